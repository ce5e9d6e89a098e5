"""The state machine as data: terminal states are final, and only the listed transitions exist."""

from __future__ import annotations

import itertools

import pytest

from receipts import states
from receipts.db import Database
from receipts.errors import InvalidTransition
from receipts.store import calls
from receipts.store.calls import Result
from tests.support.factories import TENANT, call

EXPECTED = {
    ("pending", "running"),
    ("pending", "failed"),
    ("pending", "canceled"),
    ("running", "pending"),
    ("running", "success"),
    ("running", "failed"),
    ("running", "partially_succeeded"),
    ("running", "canceled"),
    ("waiting", "pending"),  # a person approved the call
    ("waiting", "success"),
    ("waiting", "failed"),
    ("waiting", "canceled"),
}


def test_transitions_are_exactly_the_designed_ones() -> None:
    actual = {(a, b) for a, targets in states.TRANSITIONS.items() for b in targets}
    assert actual == EXPECTED


@pytest.mark.parametrize(("current", "target"), list(itertools.product(states.STATUSES, repeat=2)))
def test_can_move_allows_only_listed_transitions(current: str, target: str) -> None:
    assert states.can_move(current, target) is ((current, target) in EXPECTED)


@pytest.mark.parametrize("terminal", sorted(states.TERMINAL))
def test_terminal_states_have_no_way_out(terminal: str) -> None:
    assert states.TRANSITIONS[terminal] == frozenset()
    assert all(not states.can_move(terminal, target) for target in states.STATUSES)


def test_every_status_is_in_the_table_and_terminal_ones_are_the_designed_four() -> None:
    assert set(states.TRANSITIONS) == set(states.STATUSES)
    assert set(states.TERMINAL) == {"success", "failed", "partially_succeeded", "canceled"}
    assert set(states.ACTIVE) == {"pending", "running", "waiting"}


def test_sources_of_lists_every_state_that_may_reach_a_target() -> None:
    assert states.sources_of("canceled") == {"pending", "running", "waiting"}
    assert states.sources_of("running") == {"pending"}
    assert states.sources_of("pending") == {"running", "waiting"}


def test_every_announced_status_has_a_webhook_type_and_pending_has_none() -> None:
    assert "pending" not in states.EVENT_TYPES
    assert set(states.EVENT_TYPES) == set(states.STATUSES) - {"pending"}
    assert set(states.WEBHOOK_EVENT_TYPES) == {
        "receipt.running", "receipt.waiting", "receipt.succeeded", "receipt.failed", "receipt.canceled",
        "receipt.approval_requested", "batch.completed", "run.succeeded", "run.failed", "run.canceled", "run.waiting",
    }


def test_error_codes_are_the_closed_vocabulary() -> None:
    assert set(states.ERROR_CODES) == {
        "invalid_arguments", "tool_error", "timeout", "upstream_error", "outcome_unknown", "expired",
        "canceled", "not_found", "forbidden", "rejected", "internal",
    }
    assert states.ERROR_CODES | {"max_iterations", "loop_detected"} == states.RUN_ERROR_CODES


@pytest.mark.parametrize("final", ["success", "failed", "partially_succeeded", "canceled"])
def test_a_stored_terminal_receipt_never_changes_again(db: Database, final: str) -> None:
    receipt, _ = db.run(calls.create(call()))
    claimed = db.run(calls.claim(receipt.id, lease_s=30, actor="w"))
    assert claimed is not None
    if final == "canceled":
        db.run(calls.cancel(TENANT, receipt.id))
    else:
        assert db.run(calls.finish(receipt.id, 1, Result(final, output={"v": 1}), actor="w")) is not None
    settled = db.run(calls.get(TENANT, receipt.id))
    assert settled.status == final

    assert db.run(calls.claim(receipt.id, lease_s=30, actor="w")) is None
    assert db.run(calls.finish(receipt.id, 1, Result("success", output="again"), actor="w")) is None
    assert db.run(calls.finish(receipt.id, 1, Result("failed"), actor="w")) is None
    assert db.run(calls.retry_later(receipt.id, 1, {"code": "internal"}, delay_s=0, published=False,
                                    actor="w")) is None
    with pytest.raises(InvalidTransition):
        db.run(calls.cancel(TENANT, receipt.id))
    assert db.run(calls.get(TENANT, receipt.id)) == settled
