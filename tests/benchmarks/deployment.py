"""A production-shaped toolrelay for the benchmark: a fresh PostgreSQL database and Redis key prefix,
``toolrelay migrate`` and ``toolrelay keys create`` run as a user runs them, and ``toolrelay gateway``,
``worker`` and ``beat`` as real processes, all removed again by :meth:`Deployment.close`.

Unlike the integration-test stack, the settings are the production defaults (no shortened sweeper
or lease intervals); only the database, broker and key prefix are the benchmark's own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support import services
from tests.support.stack import Process, free_port

ROOT = Path(__file__).resolve().parents[2]
TOOLRELAY = [sys.executable, "-m", "toolrelay"]


def wait_until(check: Callable[[], bool], what: str, process: Process, timeout: float = 60) -> None:
    """Poll ``check`` until it holds; fail with the process log when it does not (or the process died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if process.popen.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not start:\n{process.log()[-4000:]}")


def answers(url: str) -> Callable[[], bool]:
    """A check that ``url`` answers 200."""
    def check() -> bool:
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False
    return check


class Deployment:
    """One database + key prefix, the API keys made on it, and the processes started on them."""

    def __init__(self, log_dir: Path, *, log_level: str = "INFO", tenants: tuple[str, ...] = ("bench",)) -> None:
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_level = log_level.upper()
        self.processes: list[Process] = []
        self.database_url = services.create_database()
        self.prefix = services.redis_prefix()
        self.closed = False
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TOOLRELAY_DATABASE_URL": self.database_url,
            "TOOLRELAY_BROKER_URL": services.REDIS_URL,
            "TOOLRELAY_BROKER_KEY_PREFIX": self.prefix,
            "TOOLRELAY_LOG_LEVEL": self.log_level,
            # Webhooks: secrets are encrypted at rest, and the benchmark's receiver lives on loopback.
            "TOOLRELAY_SECRET_KEY": "benchmark-secret-key",
            "TOOLRELAY_OUTBOUND_ALLOW_CIDRS": "127.0.0.0/8",
        }
        try:
            self.cli("migrate")
            self.keys = {tenant: self.create_key(tenant) for tenant in tenants}
        except BaseException:
            self.close()
            raise
        self.api_key = self.keys[tenants[0]]

    def cli(self, *args: str) -> str:
        """Run ``toolrelay ARGS`` to completion on this deployment; its output."""
        done = subprocess.run([*TOOLRELAY, *args], env=self.env, cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"toolrelay {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return done.stdout

    def create_key(self, tenant: str) -> str:
        """``toolrelay keys create --tenant NAME``: the key is alone on the last line."""
        return self.cli("keys", "create", "--tenant", tenant).strip().splitlines()[-1].strip()

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None, *,
              base_env: dict[str, str] | None = None) -> Process:
        """Start ``argv`` logging to ``<log_dir>/<name>.log``, with ``env`` over the deployment's (or ``base_env``)."""
        process = Process(name, argv, {**(self.env if base_env is None else base_env), **(env or {})}, self.log_dir)
        self.processes.append(process)
        return process

    def start_gateway(self, env: dict[str, str] | None = None) -> tuple[Process, str]:
        """``toolrelay gateway`` on a free port; returns it and its base URL once /healthz answers."""
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        process = self.spawn(f"gateway-{port}", [*TOOLRELAY, "gateway", "--port", str(port)], env)
        wait_until(answers(f"{base_url}/healthz"), "gateway", process)
        return process, base_url

    def start_worker(self, concurrency: int, env: dict[str, str] | None = None) -> Process:
        """``toolrelay worker -c N`` (Celery prefork), returned once it logs that it is ready (at INFO)."""
        name = f"worker{len(self.processes)}"
        process = self.spawn(name, [*TOOLRELAY, "worker", "-c", str(concurrency), "-n", f"{name}@%h",
                                    "--without-heartbeat", "--without-gossip", "--without-mingle",
                                    "--loglevel", self.log_level], env)
        if self.log_level in ("DEBUG", "INFO"):
            wait_until(lambda: "ready." in process.log(), "worker", process)
        # Quieter levels do not log "ready.": the first calls (the warm-up) wait for the worker instead.
        return process

    def start_beat(self) -> Process:
        """``toolrelay beat`` (the sweeper's schedule), as production runs it."""
        name = f"beat{len(self.processes)}"
        return self.spawn(name, [*TOOLRELAY, "beat", "--schedule", str(self.log_dir / f"{name}-schedule")])

    def stop(self, process: Process) -> None:
        """Stop one process (SIGTERM to its session, SIGKILL after 15 s)."""
        process.kill(signal.SIGTERM)
        if process in self.processes:
            self.processes.remove(process)

    def stop_processes(self) -> None:
        """Stop every process started so far, the last started first."""
        while self.processes:
            self.processes.pop().kill(signal.SIGTERM)

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"===== {p.name} =====\n{p.log()[-tail:]}" for p in self.processes)

    def close(self) -> None:
        """Stop the processes, delete the Redis keys and drop the database; safe to call twice."""
        if self.closed:
            return
        self.closed = True
        self.stop_processes()
        services.clear_redis_prefix(self.prefix)
        services.drop_database(self.database_url)
