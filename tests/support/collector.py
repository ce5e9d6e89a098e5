"""A tiny OpenTelemetry collector on 127.0.0.1: it takes OTLP/HTTP trace exports and keeps the spans.

Point a process at it with ``OTEL_EXPORTER_OTLP_ENDPOINT=<collector.endpoint>``; the OTLP/HTTP span
exporter posts protobuf ``ExportTraceServiceRequest`` bodies to ``/v1/traces``, decoded here with the
protocol's own generated classes, so a test reads back exactly what the SDK exported.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class Span:
    """One exported span, ids in hex as in a ``traceparent``."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int
    attributes: dict[str, Any]


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return getattr(value, which) if which else None


class Collector:
    """A threaded HTTP server that collects the spans exported to it."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path == "/v1/traces":
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    collector._keep(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        return Handler

    def _keep(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(Span(service=str(resource.get("service.name", "")), name=span.name,
                                      trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                                      parent_span_id=span.parent_span_id.hex(), kind=span.kind,
                                      attributes={a.key: _value(a.value) for a in span.attributes}))
        with self._lock:
            self.spans.extend(found)

    def of_trace(self, trace_id: str) -> list[Span]:
        with self._lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def wait_for(self, match: Callable[[Span], bool], timeout: float = 30.0) -> Span:
        """The first span ``match`` accepts, once it has been exported."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                for span in self.spans:
                    if match(span):
                        return span
            if time.monotonic() > deadline:
                with self._lock:
                    names = sorted({(s.service, s.name) for s in self.spans})
                raise AssertionError(f"no such span exported within {timeout:g} s; seen: {names}")
            time.sleep(0.05)


@contextmanager
def collecting() -> Iterator[Collector]:
    collector = Collector()
    threading.Thread(target=collector.server.serve_forever, name="collector", daemon=True).start()
    try:
        yield collector
    finally:
        collector.server.shutdown()
        collector.server.server_close()
