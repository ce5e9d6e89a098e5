"""The broker messages that point workers at receipts. The row is the truth; a message is a hint.

Publishing needs only an object with Celery's ``send_task``: the gateway publishes by task name and
never imports the workers package.
"""

from __future__ import annotations

from typing import Any, Protocol

from receipts.settings import Settings

EXECUTE_TASK = "toolrelay.execute"
SWEEP_TASK = "toolrelay.sweep"
DELIVER_TASK = "toolrelay.webhooks.deliver"
RUN_TASK = "toolrelay.run"
RUNS_QUEUE = "runs"
WEBHOOKS_QUEUE = "webhooks"
MAX_COUNTDOWN_S = 60.0  # longer delays live in the database; the sweeper enqueues them when due
VISIBILITY_TIMEOUT_S = 6 * 3600  # Redis redelivers unacked messages after this: above any task's time limit


def transport_options(settings: Settings) -> dict[str, Any]:
    """Broker transport options for publishers and workers alike.

    Redis: a visibility timeout above every time limit, and the optional key prefix. In memory: a
    5 ms polling interval (the default 1 s caps the in-memory broker at ~17 tasks/s).
    """
    if settings.broker_url.startswith("memory"):
        return {"polling_interval": 0.005}
    options: dict[str, Any] = {"visibility_timeout": VISIBILITY_TIMEOUT_S}
    if settings.broker_key_prefix:
        options["global_keyprefix"] = settings.broker_key_prefix
    return options


class TaskSender(Protocol):
    def send_task(self, name: str, args: Any = ..., **options: Any) -> Any: ...


class Executable(Protocol):
    """What an execute message is made from: a receipt, or the entry of a call just inserted (a BatchCall)."""

    @property
    def id(self) -> str: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def queue(self) -> str: ...


def hard_time_limit(timeout_s: float, grace_s: float) -> float:
    """The Celery hard time limit of an attempt: its timeout plus half the lease grace (see :func:`execute_call`)."""
    return timeout_s + grace_s / 2


def execute_call(receipt: Executable, *, grace_s: float) -> tuple[list[Any], dict[str, Any]]:
    """The execute task's arguments and options for ``receipt``.

    The message carries the lease the claim should take (the attempt timeout plus a grace period)
    and a Celery hard time limit between the two, so a hung attempt is killed before its lease runs
    out; the worker's main process then records it timed out (``workers.hard_limit``), and the
    sweeper settles it at the lease only if that record was lost.
    """
    return [receipt.id, receipt.timeout_s + grace_s], {"queue": receipt.queue,
                                                       "time_limit": hard_time_limit(receipt.timeout_s, grace_s)}


def publish_execute(sender: TaskSender, receipt: Executable, *, grace_s: float, countdown: float | None = None,
                    **options: Any) -> None:
    """Ask a worker on the receipt's queue to run it (see :func:`execute_call`).

    ``options`` go to ``send_task`` (e.g. a batching producer).
    """
    args, call_options = execute_call(receipt, grace_s=grace_s)
    sender.send_task(EXECUTE_TASK, args=args, countdown=countdown if countdown else None, **call_options, **options)


def publish_run(sender: TaskSender, run_id: str) -> None:
    """Ask a worker on the ``runs`` queue to advance the run (the row says what to do; this is a hint)."""
    sender.send_task(RUN_TASK, args=[run_id], queue=RUNS_QUEUE)
