"""``/metrics`` of a ``toolrelay worker``: the sum of its processes' figures, on ``TOOLRELAY_METRICS_PORT``.

A prefork worker is a main process and the children it forks; the children do the work. With a
metrics port set, every process of the worker writes its figures to files in one directory
(prometheus_client's multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR``, made fresh for this worker
unless given), and the main process serves their sum once the pool is up. prometheus_client decides
its mode when it is first imported, so :func:`prepare` runs before anything imports it. A gateway of
several processes (``toolrelay gateway --workers N``) writes its figures the same way.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from celery import Celery, signals

log = logging.getLogger(__name__)

ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare() -> Path:
    """Make (or empty) the directory the worker's processes write their figures to, and name it in the
    environment the children inherit. Figures of an earlier run left there are removed: they would
    be summed with this run's."""
    if "prometheus_client" in sys.modules and not os.environ.get(ENV):
        raise RuntimeError("prometheus_client was imported before the metrics directory was set up")
    given = os.environ.get(ENV)
    directory = Path(given) if given else Path(tempfile.mkdtemp(prefix="toolrelay-metrics-"))
    if not given:
        atexit.register(_remove, directory, os.getpid())
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    os.environ[ENV] = str(directory)
    return directory


def _remove(directory: Path, owner: int) -> None:
    """Remove the directory this process made, when it exits (never from a child that runs atexit handlers)."""
    if os.getpid() == owner:
        shutil.rmtree(directory, ignore_errors=True)


def serve(app: Celery, host: str, port: int) -> None:
    """Serve the summed figures on ``host:port`` from the main process, once the worker is ready;
    forget a child's live figures when it exits (its counters stay in the sum)."""
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    def on_ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        start_http_server(port, addr=host, registry=registry)
        log.info("metrics on http://%s:%d/metrics", host, port)

    def on_child_exit(pid: int | None = None, **_: Any) -> None:
        if pid is not None:
            multiprocess.mark_process_dead(pid)

    signals.worker_ready.connect(on_ready, weak=False)
    signals.worker_process_shutdown.connect(on_child_exit, weak=False)
