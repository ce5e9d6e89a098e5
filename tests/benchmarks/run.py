"""One benchmark run: its options, the load seen per phase, the results, and what to clean up."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.benchmarks.deployment import Deployment


@dataclass
class Run:
    """Options, results, per-phase load average, and the cleanups still due (run last first)."""

    args: argparse.Namespace
    log_dir: Path
    results: dict[str, Any] = field(default_factory=dict)
    phases: list[dict[str, Any]] = field(default_factory=list)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Print and keep the load average at the start and end of a phase, and how long it took."""
        start_load, started = os.getloadavg(), time.monotonic()
        print(f"-- {name:<60} load {_load(start_load)}", flush=True)
        yield
        end_load = os.getloadavg()
        elapsed = time.monotonic() - started
        print(f"   {'done':<60} load {_load(end_load)}   {elapsed:6.1f} s", flush=True)
        self.phases.append({"phase": name, "load_start": [round(x, 2) for x in start_load],
                            "load_end": [round(x, 2) for x in end_load], "seconds": round(elapsed, 1)})

    @contextmanager
    def deployment(self, name: str, **options: Any) -> Iterator[Deployment]:
        """A fresh database and key prefix for one section, removed with its processes at the end
        (on error too, after printing the end of every process's log)."""
        deployment = Deployment(self.log_dir / name, log_level=self.args.log_level, **options)
        try:
            yield deployment
        except Exception:
            print(deployment.logs(), file=sys.stderr)
            raise
        finally:
            deployment.close()


def _load(values: tuple[float, float, float]) -> str:
    return " ".join(f"{v:5.2f}" for v in values)
