"""The run's figures, from three sources that do not trust each other.

- the client's own records (:mod:`tests.chaos.load`): what was accepted, every answer;
- the effects file the tool appends to (:mod:`tests.chaos.tools`): what really ran, and how often;
- the database, read directly (SQL, as an auditor would): how each receipt and webhook message ended;
- the receiver's records (:mod:`tests.chaos.receiver`): what arrived, and whether it verified.

:class:`Figure` says whether a figure must be 0; :func:`verdict` is the run's exit status.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

TERMINAL = ("success", "failed", "partially_succeeded", "canceled")
TERMINAL_EVENTS = {"receipt.succeeded": ("success", "partially_succeeded"), "receipt.failed": ("failed",),
                   "receipt.canceled": ("canceled",)}


@dataclass(frozen=True)
class Figure:
    """One line of the report: a name, its value, and whether anything but 0 is a failure."""

    key: str
    label: str
    value: Any
    must_be_zero: bool = False

    @property
    def failed(self) -> bool:
        return self.must_be_zero and self.value != 0


@dataclass(frozen=True)
class Receipt:
    id: str
    key: str | None
    status: str
    code: str | None
    message: str | None
    deadline: float  # Unix time, by the database's clock (the same host's as the run's)
    ended: float  # when it finished, or now if it is open

    def lateness_s(self, down: Sequence[tuple[float, float]] = ()) -> float:
        """How long after its deadline it ended (> 0: late), not counting the time PostgreSQL was down
        (``down``: from, to), when nothing could end it."""
        lost = sum(max(0.0, min(to, self.ended) - max(since, self.deadline)) for since, to in down)
        return self.ended - self.deadline - lost


def receipts(conninfo: str, tool: str) -> dict[str, Receipt]:
    """Every receipt of ``tool`` in the database, with its deadline and end (by the database's clock)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, idempotency_key, status, error->>'code', error->>'message', "
            "extract(epoch FROM deadline_at)::float8, extract(epoch FROM coalesce(finished_at, now()))::float8 "
            "FROM receipts WHERE tool = %s", (tool,)).fetchall()
    return {row[0]: Receipt(*row) for row in rows}


def webhook_messages(conninfo: str, endpoint_id: str) -> list[tuple[str, str, str, str, int]]:
    """(id, status, event type, receipt id, attempts) of every message to the run's endpoint."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return conn.execute("SELECT id, status, event_type, receipt_id, attempts FROM webhook_messages "
                            "WHERE endpoint_id = %s", (endpoint_id,)).fetchall()


def effects(path: Path) -> list[dict[str, Any]]:
    """The tool's effect lines, one per execution."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_figures(accepted: dict[str, str], stored: dict[str, Receipt], ran: list[dict[str, Any]], *,
                  slack_s: float, pg_down: list[tuple[float, float]]) -> tuple[list[Figure], dict[str, Any]]:
    """The call figures: accepted (key -> receipt id) against what is stored and what ran."""
    by_receipt: Counter[str] = Counter(line["receipt"] for line in ran)
    by_key: dict[str, set[str]] = defaultdict(set)
    runs_of_key: Counter[str] = Counter()
    for line in ran:
        by_key[line["key"]].add(line["receipt"])
        runs_of_key[line["key"]] += 1
    mine = [stored[rid] for rid in accepted.values() if rid in stored]
    ended = [r for r in mine if r.status in TERMINAL]
    late = [r for r in stored.values() if r.lateness_s(pg_down) > slack_s]
    ends: Counter[str] = Counter(f"{r.status}/{r.code}" if r.code else r.status for r in ended)
    # What the receipt says against what the effects file says: a success that never ran, or an end
    # that says the write did not happen (anything but success and outcome_unknown) when it did.
    contradicted = [r for r in stored.values() if r.status in TERMINAL and (
        (r.status == "success" and by_receipt[r.id] == 0)
        or (r.status != "success" and r.code != "outcome_unknown" and by_receipt[r.id] > 0))]
    keys_stored = Counter(r.key for r in stored.values() if r.key)
    figures = [
        Figure("accepted", "accepted (202, or 200 replaying it)", len(accepted)),
        Figure("lost", "accepted but not in the database", len(accepted) - len(mine), True),
        Figure("ended", "ended (terminal, among accepted)", len(ended)),
        Figure("not_ended", "accepted, not ended", len(mine) - len(ended), True),
        Figure("stuck_past_deadline", f"stuck past deadline (> {slack_s:g} s, PostgreSQL's downtime aside)",
               len(late), True),
        Figure("writes_run_twice", "writes run twice (keys or receipts run more than once)",
               sum(1 for n in runs_of_key.values() if n > 1) + sum(1 for n in by_receipt.values() if n > 1), True),
        Figure("duplicate_receipts", "idempotency keys with more than one receipt",
               sum(1 for n in keys_stored.values() if n > 1), True),
        Figure("contradicted", "ends the effects contradict", len(contradicted), True),
        Figure("stored_not_accepted", "stored, never answered 202 (client gave up)",
               len({r.key for r in stored.values()} - set(accepted))),
        Figure("writes", "writes run (effect lines)", len(ran)),
    ]
    why: dict[str, str] = {}
    for r in ended:
        if r.code and r.code not in why:
            why[r.code] = f"{r.id}: {r.message}"
    details = {"ends": dict(sorted(ends.items())), "an_error_of_each_code": why,
               "max_lateness_s": round(max((r.lateness_s(pg_down) for r in stored.values()), default=0.0), 2),
               "max_lateness_with_downtime_s": round(max((r.lateness_s() for r in stored.values()), default=0.0), 2),
               "late": [(r.id, r.status, r.code, round(r.lateness_s(pg_down), 2)) for r in late[:10]],
               "contradicted": [(r.id, r.status, r.code, by_receipt[r.id]) for r in contradicted[:10]],
               "not_ended": [(r.id, r.status) for r in mine if r.status not in TERMINAL][:10]}
    return figures, details


def webhook_figures(messages: list[tuple[str, str, str, str, int]], stored: dict[str, Receipt],
                    accepted: dict[str, str], verified: set[str], acked: set[str],
                    events: dict[str, tuple[str, str, str]], unverified: int) -> tuple[list[Figure], dict[str, Any]]:
    """The webhook figures: the outbox (database) against what the receiver verified."""
    status = Counter(m[1] for m in messages)
    delivered = {m[0] for m in messages if m[1] == "delivered"}
    ids = {m[0] for m in messages}
    ended = {rid for rid in accepted.values() if rid in stored and stored[rid].status in TERMINAL}
    announced = {receipt for (kind, receipt, state) in events.values()
                 if state in TERMINAL_EVENTS.get(kind, ()) and receipt in stored and stored[receipt].status == state}
    figures = [
        Figure("webhooks_expected", "webhook messages expected (outbox rows)", len(messages)),
        Figure("webhooks_delivered", "delivered (the dispatcher got a 2xx)", len(delivered)),
        Figure("webhooks_verified", "verified by the receiver (standardwebhooks)", len(verified & ids)),
        Figure("webhooks_undelivered", "not delivered at the end (pending or failed)", len(messages) - len(delivered),
               True),
        Figure("webhooks_delivered_unverified", "delivered, never verified by the receiver",
               len(delivered - verified), True),
        Figure("webhooks_unverifiable", "requests that failed verification", unverified, True),
        Figure("ended_unannounced", "ended calls without a verified webhook of their end", len(ended - announced),
               True),
    ]
    details = {"outbox": dict(status), "acked_by_receiver": len(acked & ids),
               "unannounced": sorted(ended - announced)[:10]}
    return figures, details


def verdict(figures: list[Figure]) -> bool:
    """Whether every figure that must be 0 is."""
    return not any(f.failed for f in figures)


def table(figures: list[Figure]) -> str:
    width = max(len(f.label) for f in figures) + 2
    lines = []
    for f in figures:
        mark = ("  <- must be 0" if f.failed else "  (0)") if f.must_be_zero else ""
        lines.append(f"{f.label:<{width}}{f.value!s:>8}{mark}")
    return "\n".join(lines)
