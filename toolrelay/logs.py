"""Process logging: text lines by default, one JSON object a line with ``TOOLRELAY_LOG_FORMAT=json``.

A JSON line has ``time`` (UTC, ISO 8601), ``level``, ``logger`` and ``message``, then what the work in
hand bound (``receipt_id``, ``trace_id``, ``tenant``, ``tool``: :mod:`receipts.telemetry.logfields`),
the fields a call passed with ``extra=``, the OpenTelemetry trace and span ids when a span is current
(``otel_trace_id``, ``otel_span_id``: the same trace the spans of :mod:`receipts.telemetry.tracing`
are in), and ``exception`` with the traceback. Every process configures its logging here: the
gateway, the worker (Celery's own loggers included: it does not install handlers of its own), beat
and dev.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from receipts.settings import Settings
from receipts.telemetry import logfields

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# Per-request access lines and Celery's own chatter drown what matters at INFO.
NOISY = ("uvicorn.access", "celery.worker.strategy", "celery.app.trace", "kombu", "alembic.runtime.migration",
         "celery.beat",  # a line for every task it sends, every second
         "celery.worker.consumer.connection")
# What every LogRecord has; anything else on a record came with ``extra=`` and is written out.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update(logfields.current())
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_") and value is not None:
                data[name] = value
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            data["otel_trace_id"] = f"{span_context.trace_id:032x}"
            data["otel_span_id"] = f"{span_context.span_id:016x}"
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            data["exception"] = record.exc_text
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return json.dumps(data, default=str, ensure_ascii=False)


def configure(settings: Settings, *, celery: bool = False) -> None:
    """Log to stderr at ``TOOLRELAY_LOG_LEVEL``, as text or JSON (``TOOLRELAY_LOG_FORMAT``).

    ``celery``: the process runs a Celery worker or beat, which would otherwise set up handlers of its
    own (its task logger, its multiprocessing logger); a receiver of its ``setup_logging`` signal
    tells it this process's logging is done.
    """
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if settings.log_format == "json" else logging.Formatter(TEXT_FORMAT))
    # Neither format writes where a line was logged from, nor the thread or process: records skip
    # finding them out (the logging HOWTO's "Optimization"), a third of the cost of each call's line.
    logging._srcfile = None  # type: ignore[attr-defined]  # noqa: SLF001 - documented there
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
    logging.captureWarnings(True)  # warnings too are log lines (logger py.warnings), not raw text on stderr
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    if celery:
        from celery import signals

        signals.setup_logging.connect(_configured_already, weak=False)


def _configured_already(**_: Any) -> None:
    """Celery's ``setup_logging``: nothing to do, :func:`configure` did it."""
