"""Paired rounds, and the CPU meter the rounds read.

On a shared machine the speed drifts between phases a minute apart, and a single pair of runs can
move a ratio by a tenth either way. So both sides stay up at once, their runs alternate, and the
figure to judge is the median of the per-round ratios. The order flips every round (toolrelay first
in odd rounds, bare Celery first in even ones), so what one side's run leaves behind (PostgreSQL's
autovacuum and checkpoints after toolrelay's writes, say) does not always fall on the same side.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from tests.benchmarks import rows
from tests.benchmarks.processes import tree_cpu_s
from tests.benchmarks.run import Run

Side = Callable[[], dict[str, Any]]


def paired_rounds(run: Run, label: str, ours: Side, bare: Side, rounds: int, *, ours_name: str = "toolrelay",
                  rate: str = "calls_per_s") -> dict[str, Any]:
    """``rounds`` alternated runs of ``ours`` and ``bare``; each round's rates and ratio, and the median."""
    done = []
    for number in range(1, rounds + 1):
        ours_first = number % 2 == 1
        with run.phase(f"{label} round {number}/{rounds}: {ours_name if ours_first else 'bare Celery'} first"):
            mine = ours() if ours_first else None
            theirs = bare()
            mine = mine if mine is not None else ours()
        done.append({rate: mine[rate], "tasks_per_s": theirs["tasks_per_s"],
                     "ratio": round(mine[rate] / theirs["tasks_per_s"], 3), "ours": mine, "bare": theirs})
    return {"rounds": done, "median_ratio": round(statistics.median(r["ratio"] for r in done), 3) if done else None}


def median_of(rounds: list[dict[str, Any]], side: str, *path: str) -> float:
    """The median over rounds of one figure of one side (``side``, then the keys down to it)."""
    values = []
    for round_ in rounds:
        value: Any = round_[side]
        for key in path:
            value = value[key]
        values.append(float(value))
    return round(statistics.median(values), 3) if values else float("nan")


class CpuMeter:
    """CPU seconds so far of named process trees, of the PostgreSQL backends of one database (each
    ``postgres:<pid>``, so one that closes meanwhile is not subtracted) and of this process (the client)."""

    def __init__(self, pids: dict[str, int], database_url: str | None = None) -> None:
        self.pids = pids
        self.database_url = database_url

    def read(self) -> dict[str, float]:
        cpu = {name: tree_cpu_s(pid) for name, pid in self.pids.items()}
        if self.database_url is not None:
            cpu.update({f"postgres:{pid}": tree_cpu_s(pid) for pid in rows.backend_pids(self.database_url)})
        cpu["client"] = time.process_time()
        return cpu

    @staticmethod
    def per_call(before: dict[str, float], after: dict[str, float], calls: int) -> dict[str, float]:
        """Milliseconds per call by role (every ``postgres:<pid>`` summed as ``postgres``)."""
        totals: dict[str, float] = {}
        for name, seconds in after.items():
            role = name.split(":")[0]
            totals[role] = totals.get(role, 0.0) + seconds - before.get(name, 0.0)
        return {role: round(seconds * 1000 / max(calls, 1), 3) for role, seconds in totals.items()}
