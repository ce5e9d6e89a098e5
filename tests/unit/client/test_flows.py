"""wait's slicing and every listing's cursor-following, driven by hand: no client, no network."""

from __future__ import annotations

import pytest

from tests.unit.client import payloads
from toolrelay.client import flows, operations
from toolrelay.client.errors import UnexpectedResponse, WaitTimeout
from toolrelay.client.records import Page, Receipt, Run, record


class Clock:
    """A monotonic clock that moves only when told (a long-poll "takes" the time it was held)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def receipt(status: str) -> Receipt:
    return record(Receipt, payloads.receipt(id="rcpt_1", status=status))


def test_wait_slices_a_long_timeout_into_holds_of_at_most_60_s() -> None:
    clock = Clock()
    flow = flows.waiting("rcpt_1", timeout=150, clock=clock)
    held = []
    operation = next(flow)
    for _ in range(2):
        held.append(operation.params["wait_s"])
        assert (operation.path, operation.holds_s) == ("/v1/receipts/rcpt_1", operation.params["wait_s"])
        clock.now += operation.holds_s
        operation = flow.send(receipt("running"))
    held.append(operation.params["wait_s"])
    clock.now += 10  # it settled 10 s into the last slice
    with pytest.raises(StopIteration) as done:
        flow.send(receipt("success"))
    assert held == [60, 60, 30]
    assert done.value.value.status == "success"


def test_wait_returns_at_once_when_the_first_answer_is_terminal() -> None:
    flow = flows.waiting("rcpt_1", timeout=30, clock=Clock())
    assert next(flow).params == {"wait_s": 30}
    with pytest.raises(StopIteration) as done:
        flow.send(receipt("failed"))
    assert done.value.value.status == "failed"


def test_wait_keeps_asking_when_the_server_answers_early() -> None:
    clock = Clock()
    flow = flows.waiting("rcpt_1", timeout=20, clock=clock)
    assert next(flow).params == {"wait_s": 20}
    clock.now += 5  # a server with a shorter cap answered after 5 s
    assert flow.send(receipt("running")).params == {"wait_s": 15}


def test_wait_raises_wait_timeout_with_the_receipt_as_last_seen() -> None:
    clock = Clock()
    flow = flows.waiting("rcpt_1", timeout=3, clock=clock)
    operation = next(flow)
    clock.now += operation.holds_s
    with pytest.raises(WaitTimeout, match="rcpt_1 is still waiting after 3 s") as caught:
        flow.send(receipt("waiting"))
    assert caught.value.receipt.status == "waiting"


def test_wait_with_no_time_reads_once() -> None:
    flow = flows.waiting("rcpt_1", timeout=0, clock=Clock())
    assert next(flow).params == {"wait_s": 0}
    with pytest.raises(WaitTimeout):
        flow.send(receipt("pending"))
    with pytest.raises(ValueError, match="timeout"):
        next(flows.waiting("rcpt_1", timeout=-1))


def run(status: str) -> Run:
    return record(Run, payloads.run(id="run_1", status=status))


@pytest.mark.parametrize("status", ["waiting", "success", "failed", "canceled"])
def test_wait_run_returns_a_run_that_ended_or_waits_for_a_person(status: str) -> None:
    clock = Clock()
    flow = flows.waiting_run("run_1", timeout=150, clock=clock)
    operation = next(flow)
    assert (operation.path, operation.params) == ("/v1/runs/run_1", {"wait_s": 60})
    clock.now += operation.holds_s
    assert flow.send(run("running")).params == {"wait_s": 60}  # pending or running: it asks again
    with pytest.raises(StopIteration) as done:
        flow.send(run(status))
    assert done.value.value.status == status


def test_wait_run_raises_wait_timeout_with_the_run_as_last_seen() -> None:
    clock = Clock()
    flow = flows.waiting_run("run_1", timeout=3, clock=clock)
    clock.now += next(flow).holds_s
    with pytest.raises(WaitTimeout, match="run_1 is still running after 3 s") as caught:
        flow.send(run("running"))
    assert caught.value.run is not None and caught.value.run.status == "running"
    assert caught.value.receipt is None


def test_paging_follows_next_cursor_until_it_is_null() -> None:
    first = operations.list_receipts(trace_id="trace_x", limit=3)
    flow = flows.paging(first)
    assert next(flow) is first
    second = flow.send(Page(items=(), next_cursor="c1"))
    assert second.params == {"trace_id": "trace_x", "limit": 3, "cursor": "c1"}
    third = flow.send(Page(items=(), next_cursor="c2"))
    assert third.params["cursor"] == "c2"
    with pytest.raises(StopIteration):
        flow.send(Page(items=(), next_cursor=None))


def test_paging_refuses_a_cursor_that_does_not_move() -> None:
    flow = flows.paging(operations.list_receipts(cursor="c1"))
    next(flow)
    with pytest.raises(UnexpectedResponse, match="cursor it was given"):
        flow.send(Page(items=(), next_cursor="c1"))
