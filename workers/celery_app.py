"""``make_celery(settings)``: the Celery app of a worker, with the execute and sweep tasks.

The settings here are the ones DESIGN.md's guarantees rest on: late acks, reject on worker loss,
prefetch of one, and a Redis visibility timeout above the longest time limit. On a ``redis://``
broker the app talks to Redis through :mod:`workers.redis_transport`.

Beat does not enqueue sweeps: a beat of this app sweeps on a thread of its own
(:class:`workers.sweeper.Sweeper`), where no backlog of tool calls can delay it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any, NamedTuple

from celery import Celery, Task, signals
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry

from receipts.catalogue import tools as catalogue
from receipts.db import Database
from receipts.errors import Unavailable
from receipts.messages import EXECUTE_TASK, RUN_TASK, RUNS_QUEUE, SWEEP_TASK, transport_options
from receipts.settings import Settings
from receipts.telemetry.calls import CallMetrics, CallObserver
from workers.backoff import Backoff
from workers.execution import Executor, KindRunner, PythonKind
from workers.hard_limit import HardLimitRecorder, execute_request
from workers.metrics import WorkerMetrics
from workers.pool import POOL
from workers.redis_transport import broker_transport
from workers.registry import Registry, load_registry
from workers.runs import RunAdvancer
from workers.sweeper import Sweeper, sweep_once

log = logging.getLogger(__name__)
tracer = trace.get_tracer("toolrelay.workers")

KindsFactory = Callable[["WorkerServices"], Mapping[str, KindRunner]]
EXECUTE_RETRY_S = 1.0  # an execute task the database did not answer is sent again this much later,
EXECUTE_RETRIES = 30  # this many times in a row at most (then the sweeper re-sends it once the database is back)


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery configuration shared by workers and publishers."""
    return {
        "broker_url": settings.broker_url,
        "broker_transport_options": transport_options(settings),
        "broker_connection_retry_on_startup": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "task_default_queue": "tools",
        "task_serializer": "json",
        "accept_content": ["json"],
        "worker_hijack_root_logger": False,
        "worker_pool": POOL,  # prefork, surviving a reconnect just after a pool process exited (workers.pool)
        # No sweep entry: beat runs the sweeper itself (see workers.sweeper for why not a task).
        "beat_schedule": {},
    }


class WorkerServices:
    """What the tasks of one worker process use, built lazily so nothing crosses a fork.

    ``metrics_registry`` holds this process's figures (in a prefork worker, prometheus_client's
    multiprocess mode keeps each child's in its own file, whatever registry they are made in).
    """

    def __init__(self, settings: Settings, app: Celery, registry: Registry, kinds: KindsFactory | None,
                 db: Database | None = None, metrics_registry: CollectorRegistry | None = None) -> None:
        self.settings = settings
        self.app = app
        self.registry = registry
        self._kinds = kinds
        self.metrics_registry = metrics_registry or CollectorRegistry(auto_describe=False)
        self.metrics = WorkerMetrics(self.metrics_registry)
        if db is not None:  # shared with an in-process gateway (embedded mode), which observes its calls
            self.__dict__["db"] = db

    @cached_property
    def db(self) -> Database:
        db = Database.from_settings(self.settings, pool_size=4, name="toolrelay-worker")
        db.subscribe(CallObserver(CallMetrics(self.metrics_registry)))  # the calls' ends, counted and logged
        return db

    @cached_property
    def runs(self) -> RunAdvancer:
        return RunAdvancer(self.db, self.app, self.settings, self.executor.runner)

    @cached_property
    def executor(self) -> Executor:
        kinds: dict[str, KindRunner] = {"python": PythonKind(self.registry)}
        if self._kinds is not None:
            kinds.update(self._kinds(self))
        s = self.settings
        return Executor(self.db, kinds, self.app, backoff=Backoff(s.retry_initial_s, s.retry_factor, s.retry_max_s),
                        lease_grace_s=s.lease_grace_s, secret_key=s.secret_key, metrics=self.metrics)

    @cached_property
    def sweeper(self) -> Sweeper:
        return Sweeper(self.db, self.app, self.settings, metrics=self.metrics)

    def publish_catalogue(self) -> None:
        """Tell the catalogue which tools this worker runs (with the queue that serves each)."""
        self.db.run(catalogue.publish(self.registry.specs()))
        log.info("published %d Python tools to the catalogue: %s", len(self.registry.specs()),
                 ", ".join(sorted(spec.name for spec in self.registry.specs())))
        for name, kind in self.executor.kinds.items():  # kinds with tools of their own (system, integration)
            publish = getattr(kind, "publish", None)
            if callable(publish):
                publish()
                log.info("published the %s tools to the catalogue", name)

    def after_fork(self) -> None:
        """Drop connections inherited from the parent process; the child opens its own."""
        if "db" in self.__dict__:
            self.db.after_fork()


class WorkerApp(NamedTuple):
    """A worker's Celery app and the services its tasks use."""

    app: Celery
    services: WorkerServices


def make_celery(settings: Settings, *, registry: Registry | None = None, kinds: KindsFactory | None = None,
                db: Database | None = None, metrics_registry: CollectorRegistry | None = None) -> WorkerApp:
    """A Celery app that executes receipts and runs the sweeper, with its services.

    The execute task's span is the executor's (a child of the trace its receipt was accepted under);
    a sweep is a trace of its own.
    """
    app = Celery("toolrelay", set_as_current=False)
    transport = broker_transport(settings.broker_url) if settings.redis_fast_path else None  # None: kombu's
    app.conf.update(celery_config(settings), broker_transport=transport)
    services = WorkerServices(settings, app, registry or load_registry(settings.tool_modules), kinds, db,
                              metrics_registry)

    # The custom request records an attempt killed by the hard time limit (workers.hard_limit).
    request = execute_request(HardLimitRecorder(lambda: services.db, app))

    @app.task(name=EXECUTE_TASK, ignore_result=True, Request=request, bind=True, max_retries=EXECUTE_RETRIES)
    def execute(task: Task, receipt_id: str, lease_s: float | None = None) -> None:
        try:
            services.executor.execute(receipt_id, lease_s)
        except Unavailable as exc:
            # The database did not answer in time. The row is the truth: the same message a second later
            # claims the call (it stayed pending) or finds it moved on (its end is left to the lease),
            # and the sweeper re-sends it anyway if this one is lost.
            raise task.retry(countdown=EXECUTE_RETRY_S, exc=exc) from exc

    # One model call per task (workers/runs.py): the hard limit is that call's, plus the time to store it.
    @app.task(name=RUN_TASK, ignore_result=True, queue=RUNS_QUEUE,
              time_limit=settings.model_timeout_s + settings.lease_grace_s / 2)
    def run(run_id: str) -> None:
        services.runs.advance(run_id)

    @app.task(name=SWEEP_TASK, ignore_result=True)
    def sweep() -> None:  # on demand only; beat sweeps on a thread of its own
        with tracer.start_as_current_span(SWEEP_TASK, kind=SpanKind.CONSUMER):
            sweep_once(services.db, app, settings, metrics=services.metrics)

    def on_worker_init(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            services.publish_catalogue()

    def on_beat_init(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            services.sweeper.start()

    def on_process_init(**_: Any) -> None:
        services.after_fork()

    signals.worker_init.connect(on_worker_init, weak=False)
    signals.beat_init.connect(on_beat_init, weak=False)
    signals.worker_process_init.connect(on_process_init, weak=False)
    return WorkerApp(app, services)
