"""The toolrelay measurements: latency one call at a time, and throughput under concurrent load."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from tests.benchmarks import load
from tests.benchmarks.deployment import Deployment, tree_cpu_s


class Pipeline:
    """A running gateway + worker on ``deployment``; counts the receipts it has submitted so far."""

    def __init__(self, deployment: Deployment, base_url: str, gateway_pid: int, worker_pid: int) -> None:
        self.deployment = deployment
        self.base_url = base_url
        self.pids = {"gateway": gateway_pid, "worker": worker_pid}
        self.submitted = 0

    def _submit(self, calls: int, concurrency: int, wait_s: float | None = None) -> load.Batch:
        batch = load.submit(self.base_url, self.deployment.api_key, calls, concurrency, wait_s)
        self.submitted += len(batch.accepted)
        return batch

    def warm_up(self, calls: int = 50) -> None:
        """Open pools, fill caches, fork-and-import everything the first calls would pay for."""
        self._submit(calls, 4)
        load.wait_terminal(self.deployment.db, self.submitted)

    def low_load(self, calls: int) -> dict[str, Any]:
        """``calls`` calls one after the other, each answered when terminal (``wait_s`` on the POST)."""
        batch = self._submit(calls, 1, wait_s=10)
        load.wait_terminal(self.deployment.db, self.submitted)
        rows = load.settled(self.deployment.db, [s.receipt_id for s in batch.accepted if s.receipt_id])
        to_finish = [rows[s.receipt_id].finished_at - s.sent for s in batch.accepted if s.receipt_id in rows]
        return {
            "calls": calls,
            "submit_to_success": load.ms(to_finish),
            "client_round_trip": load.ms([s.answered - s.sent for s in batch.accepted]),
            "answered_terminal": sum(1 for s in batch.accepted if s.status == 200),
            **_failures(batch, rows),
        }

    def throughput(self, calls: int, concurrency: int) -> dict[str, Any]:
        """``calls`` calls at ``concurrency``; figures from the first send to the last finished receipt."""
        cpu_before = self._cpu()
        batch = self._submit(calls, concurrency)
        all_done = load.wait_terminal(self.deployment.db, self.submitted)
        cpu_after = self._cpu()
        accepted = batch.accepted
        rows = load.settled(self.deployment.db, [s.receipt_id for s in accepted if s.receipt_id])
        first_sent = min(s.sent for s in batch.submissions)
        last_answer = max(s.answered for s in batch.submissions)
        last_finished = max(r.finished_at for r in rows.values())
        per_call = {name.split(":")[0]: 0.0 for name in cpu_after}
        for name, seconds in cpu_after.items():
            per_call[name.split(":")[0]] += (seconds - cpu_before.get(name, 0.0)) * 1000 / calls
        per_call = {name: round(value, 3) for name, value in per_call.items()}
        return {
            "calls": calls,
            "concurrency": concurrency,
            "calls_per_s": round(calls / (last_finished - first_sent), 1),
            "submit_per_s": round(calls / (last_answer - first_sent), 1),
            "drain_after_submit_s": round(last_finished - last_answer, 3),
            "seen_terminal_after_s": round(all_done - first_sent, 3),
            "submit_to_success": load.ms([rows[s.receipt_id].finished_at - s.sent
                                          for s in accepted if s.receipt_id in rows]),
            "created_to_finished": load.ms([r.finished_at - r.created_at for r in rows.values()]),
            "submit_response": load.ms([s.answered - s.sent for s in batch.submissions]),
            "cpu_ms_per_call": per_call,
            **_failures(batch, rows),
        }

    def drain(self, calls: int, concurrency: int, start_worker: Callable[[], int]) -> dict[str, Any]:
        """The worker alone: ``calls`` accepted while no worker runs (the caller stopped it), then a
        fresh worker (``start_worker`` returns its pid) empties the queue. The rate runs from the first
        receipt finished to the last, so the worker's start is left out."""
        batch = self._submit(calls, concurrency)
        self.pids["worker"] = start_worker()
        cpu_before = tree_cpu_s(self.pids["worker"])
        load.wait_terminal(self.deployment.db, self.submitted)
        cpu_after = tree_cpu_s(self.pids["worker"])
        rows = load.settled(self.deployment.db, [s.receipt_id for s in batch.accepted if s.receipt_id])
        finished = sorted(r.finished_at for r in rows.values())
        return {"calls": calls, "calls_per_s": round((len(finished) - 1) / (finished[-1] - finished[0]), 1),
                "worker_cpu_ms_per_call": round((cpu_after - cpu_before) * 1000 / calls, 3),
                **_failures(batch, rows)}

    def _cpu(self) -> dict[str, float]:
        """CPU seconds so far of the gateway, the worker (with its pool), each PostgreSQL backend of this
        database (``postgres:<pid>``, so one that closes meanwhile is not subtracted) and this process."""
        cpu = {name: tree_cpu_s(pid) for name, pid in self.pids.items()}
        with self.deployment.db.engine.connect() as conn:
            pids = conn.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                     "AND pid <> pg_backend_pid()")).scalars().all()
        cpu.update({f"postgres:{pid}": tree_cpu_s(pid) for pid in pids})
        cpu["load_generator"] = time.process_time()
        return cpu


def _failures(batch: load.Batch, rows: dict[str, load.Settled]) -> dict[str, int]:
    return {
        "rejected": sum(1 for s in batch.submissions if s.receipt_id is None),
        "not_success": sum(1 for r in rows.values() if r.status != "success"),
    }

