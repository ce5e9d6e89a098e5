"""A production-shaped toolrelay for the benchmark: fresh PostgreSQL database, own Redis key prefix,
``toolrelay gateway`` and ``toolrelay worker`` as real processes, all removed again by :meth:`close`.

Unlike the integration-test stack, the settings are the production defaults (no shortened sweeper
or lease intervals); only the database, broker and key prefix are the benchmark's own.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from receipts.db import Database
from receipts.migrate import upgrade
from receipts.settings import Settings
from receipts.tenants import Tenants
from tests.support import services
from tests.support.stack import Process, free_port


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


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants, from /proc."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                stack.extend(int(child) for child in children)
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
    return total


class Deployment:
    """One database + key prefix, and the processes started on them (killed, and both removed, by close)."""

    def __init__(self, log_dir: Path, *, log_level: str = "INFO") -> None:
        self.log_dir = log_dir
        self.log_level = log_level.upper()
        self.processes: list[Process] = []
        self.database_url = services.create_database()
        self.prefix = services.redis_prefix()
        self.env = {
            **os.environ,
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            "TOOLRELAY_DATABASE_URL": self.database_url,
            "TOOLRELAY_BROKER_URL": services.REDIS_URL,
            "TOOLRELAY_BROKER_KEY_PREFIX": self.prefix,
            "TOOLRELAY_LOG_LEVEL": self.log_level,
            # Webhooks: secrets are encrypted at rest, and the benchmark's receiver lives on loopback.
            "TOOLRELAY_SECRET_KEY": "benchmark-secret-key",
            "TOOLRELAY_OUTBOUND_ALLOW_CIDRS": "127.0.0.0/8",
        }
        self.db = Database.from_settings(Settings(database_url=self.database_url), pool_size=2)
        upgrade(self.db)
        self.api_key = Tenants(self.db).create_key("bench")

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        process = Process(name, argv, {**self.env, **(env or {})}, self.log_dir)
        self.processes.append(process)
        return process

    def start_gateway(self, env: dict[str, str] | None = None) -> tuple[Process, str]:
        """``toolrelay gateway`` on a free port; returns it and its base URL once /healthz answers."""
        import httpx

        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        process = self.spawn(f"gateway-{port}", [sys.executable, "-m", "toolrelay", "gateway", "--port", str(port)],
                             env)

        def healthy() -> bool:
            try:
                return httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, "gateway", process)
        return process, base_url

    def start_worker(self, concurrency: int, env: dict[str, str] | None = None) -> Process:
        """``toolrelay worker -c N`` (Celery prefork), returned once it logs that it is ready (at INFO)."""
        name = f"worker{len(self.processes)}"
        process = self.spawn(name, [sys.executable, "-m", "toolrelay", "worker", "-c", str(concurrency),
                                    "-n", f"{name}@%h", "--without-heartbeat", "--without-gossip",
                                    "--without-mingle", "--loglevel", self.log_level], env)
        if self.log_level in ("DEBUG", "INFO"):
            wait_until(lambda: "ready." in process.log(), "worker", process)
        # Quieter levels do not log "ready.": the first calls (the warm-up) wait for the worker instead.
        return process

    def start_beat(self) -> Process:
        return self.spawn("beat", [sys.executable, "-m", "toolrelay", "beat", "--schedule",
                                   str(self.log_dir / "beat-schedule")])

    def stop_processes(self) -> None:
        """Stop every process started so far (SIGTERM, then SIGKILL after 15 s)."""
        while self.processes:
            self.processes.pop().kill(signal.SIGTERM)

    def close(self) -> None:
        """Stop the processes, drop the database and delete the Redis keys; safe to call twice."""
        self.stop_processes()
        self.db.dispose()
        services.clear_redis_prefix(self.prefix)
        services.drop_database(self.database_url)
