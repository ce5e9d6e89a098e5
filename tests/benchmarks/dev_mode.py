"""``toolrelay dev`` as a user runs it, on the user's whole path, against the same bare Celery.

``toolrelay dev --data-dir <tmp> --port <p> --api-key <k>`` with no ``TOOLRELAY_DATABASE_URL`` or
``TOOLRELAY_BROKER_URL`` in its environment, so it uses its own embedded database and in-memory
broker. The client and the bare Celery side are the headline's (submit + long-poll every receipt;
publish + ``get()`` every task), in ``--dev-rounds`` paired rounds, after the low-load round trips.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.benchmarks.celery_baseline import CeleryBaseline
from tests.benchmarks.deployment import TOOLRELAY, Deployment, answers, wait_until
from tests.benchmarks.load import Client, summarize
from tests.benchmarks.paired import paired_rounds
from tests.benchmarks.processes import rss_mb, tree_pids
from tests.benchmarks.run import Run
from tests.support.stack import Process, free_port


def start_dev(deployment: Deployment, data_dir: Path) -> tuple[Process, str, str]:
    """``toolrelay dev`` on a free port with a key of ours; it, its base URL and the key."""
    env = {k: v for k, v in deployment.env.items()
           if k not in ("TOOLRELAY_DATABASE_URL", "TOOLRELAY_BROKER_URL", "TOOLRELAY_BROKER_KEY_PREFIX")}
    port, key = free_port(), "trk_" + secrets.token_urlsafe(32)
    process = deployment.spawn("dev", [*TOOLRELAY, "dev", "--data-dir", str(data_dir), "--port", str(port),
                                       "--api-key", key], base_env=env)
    base_url = f"http://127.0.0.1:{port}"
    wait_until(answers(f"{base_url}/healthz"), "toolrelay dev", process, timeout=120)
    return process, base_url, key


def stop_dev(deployment: Deployment, process: Process, data_dir: Path) -> None:
    """Stop dev; then stop an embedded PostgreSQL server it left running in its data directory, by pid."""
    deployment.stop(process)
    for pid_file in data_dir.rglob("postmaster.pid"):
        try:
            pid = int(pid_file.read_text().split()[0])
            if b"postgres" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue  # a stale file: that pid is no server of ours
            os.kill(pid, signal.SIGTERM)
        except (ValueError, IndexError, ProcessLookupError, PermissionError, FileNotFoundError):
            continue
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.1)


def dev_section(run: Run) -> dict[str, Any]:
    """``toolrelay dev``: its whole path and low-load round trip against bare Celery's."""
    args = run.args
    with run.deployment("dev") as deployment:
        # A directory of its own, traversable by others: dev's embedded PostgreSQL may run its server
        # as a system user of its own (as root it does), and the log directory is the benchmark's only.
        parent = Path(tempfile.mkdtemp(prefix="toolrelay-bench-dev-"))
        parent.chmod(0o755)
        data_dir = parent / "data"
        run.cleanups.append(lambda: shutil.rmtree(parent, ignore_errors=True))
        with run.phase(f"dev: start toolrelay dev, and bare Celery (-c {args.workers}, "
                       f"{args.concurrency} clients)"):
            dev, base_url, key = start_dev(deployment, data_dir)
            run.cleanups.append(lambda: stop_dev(deployment, dev, data_dir))
            client = Client(base_url, key)
            baseline = CeleryBaseline(deployment, args.workers, args.concurrency)
        with baseline:
            with run.phase("dev: warm-up, 200 calls and 400 bare tasks"):
                client.whole_path(200, args.concurrency)
                baseline.whole_path(400)
            result: dict[str, Any] = {}
            if args.low_load_calls:
                with run.phase(f"dev: low load, {args.low_load_calls} calls one at a time, each side"):
                    result["low_load"] = summarize(client.whole_path(args.low_load_calls, 1))
                    result["bare_low_load"] = baseline.round_trips(args.low_load_calls)
            result["paired"] = paired_rounds(run, "dev", lambda: summarize(client.whole_path(args.calls,
                                                                                             args.concurrency)),
                                             lambda: baseline.whole_path(args.calls), args.dev_rounds,
                                             ours_name="toolrelay dev")
            tree = tree_pids(dev.popen.pid)
            result["memory_mb"] = {"dev": rss_mb(dev.popen.pid), "children": [rss_mb(pid) for pid in tree[1:]]}
        stop_dev(deployment, dev, data_dir)
    return result
