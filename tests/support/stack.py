"""A real toolrelay deployment for integration tests: gateway, Celery workers and beat as processes.

Each stack gets its own PostgreSQL database and Redis key prefix, so stacks (and concurrent test
runs) never see each other's messages.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx

from receipts.db import Database
from receipts.settings import Settings
from receipts.tenants import create_key
from tests.support import services

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = {"success", "failed", "partially_succeeded", "canceled"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(base_url: str) -> bool:
    """Whether a toolrelay HTTP server answers ``/healthz`` at ``base_url``."""
    try:
        return httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_serving(process: Process, base_url: str, timeout: float = 30) -> None:
    """Wait until ``process`` serves ``base_url``; fail with its log if it exits or takes too long."""
    deadline = time.monotonic() + timeout
    while not healthy(base_url):
        if process.popen.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{process.name} is not serving {base_url}:\n{process.log()[-6000:]}")
        time.sleep(0.1)


class Process:
    """A child process in its own session (so a kill reaches its whole tree), logging to a file.

    With ``split_stderr`` its standard error (where toolrelay logs) goes to a file of its own,
    ``err_path``; :meth:`log` reads both.
    """

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path, cwd: Path = ROOT,
                 split_stderr: bool = False) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.err_path = log_dir / f"{name}.err.log" if split_stderr else None
        self._log = self.log_path.open("ab")
        self._err = self.err_path.open("ab") if self.err_path is not None else None
        self.popen = subprocess.Popen(argv, env=env, stdout=self._log, stderr=self._err or subprocess.STDOUT,
                                      cwd=cwd, start_new_session=True)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=5)
        self._log.close()
        if self._err is not None:
            self._err.close()

    def log(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text + self.stderr()

    def stderr(self) -> str:
        """What it wrote to standard error, when that has a file of its own."""
        if self.err_path is None or not self.err_path.exists():
            return ""
        return self.err_path.read_text(errors="replace")


class Stack:
    """Start and stop the processes of one deployment; talk to it over HTTP.

    ``settings`` become ``TOOLRELAY_*`` variables; ``env`` adds others (``OTEL_*``, say);
    ``split_stderr`` keeps each process's standard error in a file of its own.
    """

    def __init__(self, tmp: Path, *, env: dict[str, str] | None = None, split_stderr: bool = False,
                 **settings: Any) -> None:
        self.tmp = tmp
        self.effects = tmp / "effects"
        self.effects.mkdir(parents=True, exist_ok=True)
        self.database_url = services.create_database()
        self.prefix = services.redis_prefix()
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TOOLRELAY_DATABASE_URL": self.database_url,
            "TOOLRELAY_BROKER_URL": services.REDIS_URL,
            "TOOLRELAY_BROKER_KEY_PREFIX": self.prefix,
            "TOOLRELAY_TOOL_MODULES": "tests.support.tools",
            "TOOLRELAY_SECRET_KEY": "test-secret-key",
            "TOOLRELAY_TEST_EFFECTS": str(self.effects),
            "TOOLRELAY_LEASE_GRACE_S": "2",
            "TOOLRELAY_REPUBLISH_AFTER_S": "3",
            "TOOLRELAY_SWEEP_INTERVAL_S": "0.5",
            "TOOLRELAY_RETRY_INITIAL_S": "0.2",
            "TOOLRELAY_LOG_LEVEL": "INFO",
        }
        self.env.update({f"TOOLRELAY_{k.upper()}": str(v) for k, v in settings.items()})
        self.env.update(env or {})
        self.split_stderr = split_stderr
        self.settings = Settings(database_url=self.database_url)
        self.db = Database(self.database_url, pool_size=2, name="toolrelay-test")
        self.api_key = self.db.run(create_key("tests"))
        self.other_key = self.db.run(create_key("intruders"))
        self.processes: list[Process] = []
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._workers = 0

    def run(self, name: str, *args: str, prefix: Sequence[str] = ()) -> Process:
        """Start ``toolrelay *args`` as ``name``; ``prefix`` goes before the interpreter in the command line
        (e.g. a ``faketime`` that sets the process's clock)."""
        process = Process(name, [*prefix, sys.executable, "-m", "toolrelay", *args], self.env, self.tmp,
                          split_stderr=self.split_stderr)
        self.processes.append(process)
        return process

    def start_gateway(self) -> Process:
        process = self.run("gateway", "gateway", "--port", str(self.port))
        wait_serving(process, self.base_url)
        return process

    def start_worker(self, *args: str, wait: bool = True, prefix: Sequence[str] = ()) -> Process:
        self._workers += 1
        name = f"worker{self._workers}"
        process = self.run(name, "worker", "-c", "2", "-n", f"{name}@%h", "--without-heartbeat",
                           "--without-gossip", "--without-mingle", *args, prefix=prefix)
        if wait:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if "ready." in process.log():
                    return process
                if process.popen.poll() is not None:
                    break
                time.sleep(0.1)
            raise RuntimeError(f"worker did not start:\n{process.log()}")
        return process

    def start_beat(self, prefix: Sequence[str] = ()) -> Process:
        return self.run("beat", "beat", "--schedule", str(self.tmp / "beat-schedule"), prefix=prefix)

    def client(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {key or self.api_key}"},
                            timeout=70)

    def wait_terminal(self, receipt_id: str, timeout: float = 30, key: str | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.client(key) as client:
            while True:
                left = deadline - time.monotonic()
                body = client.get(f"/v1/receipts/{receipt_id}", params={"wait_s": max(0, min(left, 10))}).json()
                if body["status"] in TERMINAL or time.monotonic() >= deadline:
                    return body  # type: ignore[no-any-return]

    def logs(self) -> str:
        return "\n".join(f"===== {p.name} =====\n{p.log()[-6000:]}" for p in self.processes)

    def close(self) -> None:
        for process in self.processes:
            process.kill(signal.SIGTERM)
        self.db.dispose()
        services.clear_redis_prefix(self.prefix)
        services.drop_database(self.database_url)


@contextmanager
def running_stack(tmp: Path, *, workers: int = 1, beat: bool = True, env: dict[str, str] | None = None,
                  split_stderr: bool = False, **settings: Any) -> Iterator[Stack]:
    stack = Stack(tmp, env=env, split_stderr=split_stderr, **settings)
    try:
        stack.start_gateway()
        for _ in range(workers):
            stack.start_worker()
        if beat:
            stack.start_beat()
        yield stack
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.close()
