"""The JSON log format: one object a line, with the fields bound by the work in hand."""

from __future__ import annotations

import json
import logging

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from receipts.telemetry import logfields
from toolrelay.logs import JsonFormatter


def record(message: str, *args: object, exc: bool = False, **extra: object) -> logging.LogRecord:
    logger = logging.getLogger("toolrelay.test")
    exc_info = None
    if exc:
        try:
            raise ValueError("bad")
        except ValueError:
            import sys

            exc_info = sys.exc_info()
    made = logger.makeRecord(logger.name, logging.INFO, __file__, 1, message, args, exc_info, extra=extra)
    return made


def test_a_line_is_one_json_object_with_time_level_logger_message() -> None:
    line = JsonFormatter().format(record("hello %s", "world"))
    assert "\n" not in line
    data = json.loads(line)
    assert data["level"] == "INFO" and data["logger"] == "toolrelay.test" and data["message"] == "hello world"
    assert data["time"].endswith("Z") and "T" in data["time"]
    assert "receipt_id" not in data and "otel_trace_id" not in data


def test_bound_fields_extras_and_the_current_trace_are_written_out() -> None:
    span = NonRecordingSpan(SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, is_remote=True,
                                        trace_flags=TraceFlags(1)))
    with logfields.bound(receipt_id="rcpt_1", tenant="ten_1", tool="lookup", trace_id=None), \
            trace.use_span(span):
        data = json.loads(JsonFormatter().format(record("done", status="success", duration_ms=1.5)))
    assert data["receipt_id"] == "rcpt_1" and data["tenant"] == "ten_1" and data["tool"] == "lookup"
    assert "trace_id" not in data  # None is not bound
    assert data["status"] == "success" and data["duration_ms"] == 1.5
    assert data["otel_trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" and data["otel_span_id"] == "00f067aa0ba902b7"


def test_an_exception_is_in_the_line_not_after_it() -> None:
    line = JsonFormatter().format(record("failed", exc=True))
    assert "\n" not in line
    assert "ValueError: bad" in json.loads(line)["exception"]
