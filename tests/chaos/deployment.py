"""toolrelay in production shape on the run's own PostgreSQL and Redis, started through its CLI.

``toolrelay migrate`` and ``toolrelay keys create`` as an operator runs them; then, as the README's
"Running in production" lists them, ``toolrelay gateway``, two (or more) ``toolrelay worker -Q tools``,
one ``toolrelay worker -Q webhooks --pool threads`` (the dispatcher) and ``toolrelay beat`` (the
sweeper and the dispatcher's pump), each a process in a session of its own so that a kill reaches
its pool children too. The run kills and restarts the workers; a process that exits when nobody
killed it is recorded (:attr:`Deployment.exited`).
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.benchmarks.processes import tree_pids
from tests.chaos.tools import EFFECTS_ENV
from tests.support.stack import Process, free_port

ROOT = Path(__file__).resolve().parents[2]
TOOLRELAY = [sys.executable, "-m", "toolrelay"]


@dataclass(frozen=True)
class Role:
    """How to start one process: its name and the ``toolrelay`` arguments."""

    name: str
    args: tuple[str, ...]
    worker: bool  # a Celery worker: ready when it logs "ready."


class Deployment:
    """The processes of one toolrelay installation, by name, and what happened to them."""

    def __init__(self, log_dir: Path, *, database_url: str, broker_url: str, effects: Path, tool_workers: int,
                 concurrency: int, gateway_workers: int, settings: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.effects = effects
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TOOLRELAY_DATABASE_URL": database_url,
            "TOOLRELAY_BROKER_URL": broker_url,
            "TOOLRELAY_TOOL_MODULES": "tests.chaos.tools",
            "TOOLRELAY_SECRET_KEY": secrets.token_urlsafe(32),
            "TOOLRELAY_OUTBOUND_ALLOW_CIDRS": "127.0.0.1/32",  # the receiver is on loopback
            "TOOLRELAY_LOG_LEVEL": "INFO",
            EFFECTS_ENV: str(effects),
            **{f"TOOLRELAY_{name.upper()}": value for name, value in settings.items()},
        }
        self.roles: dict[str, Role] = {
            "gateway": Role("gateway", ("gateway", "--port", str(self.port), "--workers", str(gateway_workers)),
                            worker=False),
            **{f"tools{n}": Role(f"tools{n}", ("worker", "-Q", "tools", "-c", str(concurrency),
                                               "-n", f"tools{n}@%h"), worker=True)
               for n in range(1, tool_workers + 1)},
            "webhooks": Role("webhooks", ("worker", "-Q", "webhooks", "--pool", "threads", "-c", "4",
                                          "-n", "webhooks@%h"), worker=True),
            "beat": Role("beat", ("beat", "--schedule", str(log_dir / "celerybeat-schedule")), worker=False),
        }
        self.processes: dict[str, Process] = {}
        self.started_at: dict[str, float] = {}
        self.exited: dict[str, int] = {}  # name -> exit status, for exits nobody caused
        self.kills: dict[str, int] = {}
        self._killed: set[int] = set()  # pids of the main processes the run killed

    # -- the operator's commands -------------------------------------------------------------------

    def cli(self, *args: str) -> str:
        """``toolrelay ARGS`` to completion; its standard output."""
        done = subprocess.run([*TOOLRELAY, *args], env=self.env, cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"toolrelay {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return done.stdout

    def create_key(self, tenant: str) -> str:
        """``toolrelay keys create``: the key is alone on the last line."""
        return self.cli("keys", "create", "--tenant", tenant).strip().splitlines()[-1].strip()

    # -- processes -------------------------------------------------------------------------------

    @property
    def tool_workers(self) -> list[str]:
        return [name for name in self.roles if name.startswith("tools")]

    def start(self, name: str, *, wait: bool = True) -> Process:
        """Start (or start again) the process ``name``; with ``wait``, until it serves or is ready."""
        role = self.roles[name]
        process = Process(name, [*TOOLRELAY, *role.args], self.env, self.log_dir)
        self.processes[name] = process
        self.started_at[name] = time.monotonic()
        if wait:
            self.wait_ready(name)
        return process

    def start_all(self) -> None:
        for name in self.roles:
            self.start(name)

    def wait_ready(self, name: str, timeout: float = 60) -> None:
        process = self.processes[name]
        offset = process.log_path.stat().st_size if process.log_path.exists() else 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                break
            if self._ready(name, offset):
                return
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not start:\n{process.log()[-4000:]}")

    def _ready(self, name: str, offset: int) -> bool:
        role = self.roles[name]
        if name == "gateway":
            try:
                return httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False
        if not role.worker:
            return True
        with self.processes[name].log_path.open("rb") as log:
            log.seek(offset)
            return b"ready." in log.read()

    def kill(self, name: str) -> None:
        """SIGKILL the process and its pool children (its whole session), as a host that dies."""
        process = self.processes[name]
        self.kills[name] = self.kills.get(name, 0) + 1
        self._killed.add(process.popen.pid)
        with suppress(ProcessLookupError):
            os.killpg(process.popen.pid, signal.SIGKILL)
        process.kill()  # reaps it, closes its log

    def kill_pool_child(self, name: str, rng: random.Random) -> int | None:
        """SIGKILL one pool process of the worker ``name`` (its main process replaces it); its pid."""
        children = tree_pids(self.processes[name].popen.pid)[1:]
        if not children:
            return None
        pid = rng.choice(children)
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return pid

    def check_exits(self) -> dict[str, int]:
        """Processes that exited although nobody killed them (recorded once each, and left stopped)."""
        for name, process in self.processes.items():
            status = process.popen.poll()
            if status is not None and name not in self.exited and process.popen.pid not in self._killed:
                self.exited[name] = status
        return self.exited

    def pids(self, name: str) -> list[int]:
        """The process and its live descendants (a worker's pool children)."""
        return tree_pids(self.processes[name].popen.pid)

    def log_of(self, name: str) -> str:
        process = self.processes.get(name)
        return process.log() if process is not None else ""

    def stop_all(self) -> None:
        """SIGTERM every process (SIGKILL after 15 s), the last role first."""
        for name in reversed(list(self.processes)):
            self.processes.pop(name).kill(signal.SIGTERM)
