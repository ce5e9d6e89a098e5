"""``toolrelay dev``: the whole system in one process, with no services.

SQLite file in the data directory, Celery's in-memory broker with an in-process worker (thread
pool), the sweeper in a thread, and the gateway on uvicorn. The in-memory queue dies with the
process, but the receipts do not: at start the sweeper re-sends every pending receipt and reclaims
every running one, so a restart loses no accepted call.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import uvicorn
from celery import Celery

from gateway.app import create_app
from receipts.db import Database
from receipts.migrate import upgrade
from receipts.nudges import publish_deliver
from receipts.settings import Settings
from receipts.store import ReceiptStore
from receipts.tenants import KEY_PREFIX, Tenants
from receipts.webhook_queue import DeliveryQueue
from toolrelay.components import build_celery
from workers.sweeper import sweep_once

log = logging.getLogger(__name__)

DEV_TENANT = "default"


@dataclass
class Embedded:
    """A running embedded system (without its HTTP server): store, Celery app, worker, sweeper."""

    settings: Settings
    store: ReceiptStore
    celery: Celery
    api_key: str
    _stop: threading.Event
    _worker: Any
    _lock: IO[str]

    def stop(self) -> None:
        self._stop.set()
        self._worker.stop(in_sighandler=False)


def dev_settings(data_dir: Path, base: Settings) -> Settings:
    """The base settings with the embedded database and broker (unless set explicitly)."""
    overrides: dict[str, Any] = {}
    if "database_url" not in base.model_fields_set:
        overrides["database_url"] = f"sqlite:///{data_dir / 'toolrelay.db'}"
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


def resolve_key(data_dir: Path, given: str | None) -> str:
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
    """Migrate, recover what a previous run left, and start the worker and the sweeper threads."""
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(data_dir)
    settings = dev_settings(data_dir, settings)
    db = Database.from_settings(settings)
    upgrade(db)
    key = resolve_key(data_dir, api_key)
    Tenants(db).create_key(DEV_TENANT, key)
    store = ReceiptStore(db)
    # Webhook messages a previous run was sending when it stopped are free to send again.
    DeliveryQueue(db, disable_after_s=settings.webhook_disable_after_s).release_all()
    app = build_celery(settings, store=store)
    services = app.toolrelay  # type: ignore[attr-defined]

    queues = sorted(services.registry.queues() | {"tools", "webhooks"})
    worker = app.WorkController(pool_cls="threads", concurrency=concurrency, queues=queues, without_heartbeat=True,
                                without_mingle=True, without_gossip=True, hostname=f"dev@{os.uname().nodename}")
    threading.Thread(target=worker.start, name="celery-worker", daemon=True).start()

    report = sweep_once(services.sweeper, app, grace_s=settings.lease_grace_s, after_restart=True)
    if report.total:
        log.info("recovered after restart: %d re-sent, %d retried, %d outcome unknown, %d expired",
                 len(report.republished), report.reclaimed, report.lost, report.expired)
    stop = threading.Event()

    def sweep_forever() -> None:
        while not stop.wait(settings.sweep_interval_s):
            try:
                sweep_once(services.sweeper, app, grace_s=settings.lease_grace_s)
            except Exception:  # noqa: BLE001 - keep sweeping; the next pass retries
                log.exception("sweep failed")

    threading.Thread(target=sweep_forever, name="sweeper", daemon=True).start()

    def pump_webhooks() -> None:  # what beat does in production: wake the dispatcher for due messages
        while True:
            try:
                publish_deliver(app)
            except Exception:  # noqa: BLE001 - keep pumping; the next tick retries
                log.exception("webhook pump failed")
            if stop.wait(settings.webhook_poll_s):
                return

    threading.Thread(target=pump_webhooks, name="webhook-pump", daemon=True).start()
    return Embedded(settings, store, app, key, stop, worker, lock)


def run_dev(settings: Settings, *, host: str, port: int, data_dir: Path, api_key: str | None) -> None:
    """Run everything in this process until interrupted."""
    system = start_embedded(settings, data_dir, api_key)
    app = create_app(system.settings, store=system.store, sender=system.celery)
    url = f"http://{host}:{port}"
    print(f"toolrelay dev: {url}  (docs: {url}/docs, data: {data_dir})", flush=True)
    print(f"API key: {system.api_key}", flush=True)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        system.stop()
