"""Telemetry shared by every process: when tracing turns on, the trace context a call is stored with,
and what a call's transitions count and log."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from receipts.db import Database
from receipts.store import calls, stats
from receipts.store.calls import Result, error
from receipts.telemetry import logfields, tracing
from receipts.telemetry.calls import CallMetrics, CallObserver
from tests.support import sql
from tests.support.factories import call, spec

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(("environ", "names"), [
    ({}, []),
    ({"OTEL_SERVICE_NAME": "x"}, []),  # a name alone exports nothing
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp_proto_http"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, ["otlp_proto_http"]),
    ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
    ({"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ["otlp_proto_grpc", "console"]),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, []),
    ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, []),
])
def test_tracing_is_on_only_when_the_environment_names_an_exporter(environ: dict[str, str], names: list[str]) -> None:
    assert tracing.exporter_names(environ) == names


def test_configure_installs_nothing_when_tracing_is_off() -> None:
    assert tracing.configure("toolrelay-test", {}) is False
    assert not tracing.active()


def test_a_call_is_stored_under_the_callers_traceparent_when_nothing_records_spans() -> None:
    assert tracing.accepted_under({"traceparent": CALLER}) == CALLER
    assert tracing.accepted_under({"traceparent": "00-zz-yy-01"}) is None  # malformed: nothing to continue
    assert tracing.accepted_under({}) is None


def test_a_stored_traceparent_becomes_the_context_outbound_requests_carry() -> None:
    headers: dict[str, str] = {}
    tracing.inject(headers, tracing.context_of(CALLER))
    assert headers["traceparent"] == CALLER
    assert tracing.context_of(None) is None


def test_the_receipt_and_its_webhook_messages_keep_the_trace_context(db: Database) -> None:
    receipt, _ = db.run(calls.create(call(traceparent=CALLER)))
    assert receipt.traceparent == CALLER
    lease = db.run(calls.claim(receipt.id, lease_s=30, actor="w"))
    assert lease is not None and lease.receipt.traceparent == CALLER
    assert sql.value(db, "SELECT traceparent FROM receipts WHERE id = %(id)s", id=receipt.id) == CALLER


def observed(db: Database) -> CollectorRegistry:
    registry = CollectorRegistry()
    db.subscribe(CallObserver(CallMetrics(registry)))
    return registry


def test_a_calls_end_is_counted_by_tool_and_status_with_its_latencies(db: Database) -> None:
    registry = observed(db)
    receipt, _ = db.run(calls.create(call(spec("lookup"))))
    assert db.run(calls.claim(receipt.id, lease_s=30, actor="w")) is not None
    assert registry.get_sample_value("toolrelay_tool_call_start_delay_seconds_count", {"tool": "lookup"}) == 1
    assert registry.get_sample_value("toolrelay_tool_calls_finished_total", {"tool": "lookup",
                                                                             "status": "success"}) is None
    db.run(calls.finish(receipt.id, 1, Result("success", output={"ok": 1}), actor="w"))
    assert registry.get_sample_value("toolrelay_tool_calls_finished_total", {"tool": "lookup",
                                                                             "status": "success"}) == 1
    assert registry.get_sample_value("toolrelay_tool_call_duration_seconds_count", {"tool": "lookup"}) == 1


def test_a_retry_is_counted_and_is_not_an_end(db: Database) -> None:
    registry = observed(db)
    receipt, _ = db.run(calls.create(call(spec("lookup"))))
    db.run(calls.claim(receipt.id, lease_s=30, actor="w"))
    db.run(calls.retry_later(receipt.id, 1, error("timeout", "slow", retryable=True), delay_s=0, published=False,
                             actor="w"))
    assert registry.get_sample_value("toolrelay_tool_call_retries_total", {"tool": "lookup"}) == 1
    assert registry.get_sample_value("toolrelay_tool_call_duration_seconds_count", {"tool": "lookup"}) is None


def test_a_calls_end_is_one_info_line_with_its_fields(db: Database, caplog: pytest.LogCaptureFixture) -> None:
    observed(db)
    receipt, _ = db.run(calls.create(call(spec("lookup"), trace_id="trace_t1")))
    with caplog.at_level(logging.INFO, logger="toolrelay.calls"):
        db.run(calls.cancel(receipt.tenant_id, receipt.id))
    [record] = caplog.records
    assert record.getMessage().startswith(f"receipt {receipt.id} lookup canceled (canceled) in ")
    assert record.status == "canceled" and record.error_code == "canceled"  # type: ignore[attr-defined]
    assert record.duration_ms >= 0  # type: ignore[attr-defined]
    assert logfields.current() == {}  # bound only while it logged


def test_the_backlog_counts_pending_receipts_due_by_queue(db: Database) -> None:
    db.run(calls.create(call(spec("a"))))
    db.run(calls.create(call(spec("b"))))
    assert db.run(stats.backlog()).queue_depth == {"tools": 2}
