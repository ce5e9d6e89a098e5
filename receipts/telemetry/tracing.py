"""Tracing with OpenTelemetry: configured by the SDK's own environment variables, off unless they ask.

Tracing is on in a process when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``, or
any the SDK's entry points provide) or an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``OTEL_TRACES_EXPORTER=none`` or ``OTEL_SDK_DISABLED=true``
keeps it off. Everything else is the SDK's to read: ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES``, the sampler (``OTEL_TRACES_SAMPLER``), the batch processor's delays
(``OTEL_BSP_*``), the exporter's endpoint, headers and timeout.

Off, the SDK is never imported and no tracer provider is installed: each span made here is the
OpenTelemetry API's no-op, which costs a context lookup and still carries a caller's trace context
through, so the ``traceparent`` a call was accepted with is the one its outbound requests send on.

The trace context a call was accepted under is stored on its receipt (``traceparent``, the W3C
header's value): the row is the truth and outlives any broker message, so an attempt's span is a
child of it whichever worker, retry or sweep runs it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping
from importlib.metadata import entry_points

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)

EXPORTERS_GROUP = "opentelemetry_traces_exporter"  # where exporter packages register themselves
# ``otlp`` is the OTLP exporter of the configured protocol (http/protobuf unless told otherwise).
OTLP_BY_PROTOCOL = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}

_W3C = TraceContextTextMapPropagator()


def exporter_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """The span exporters the environment asks for; empty means tracing stays off."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = [name.strip().lower() for name in env.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    if not named and (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")):
        named = ["otlp"]
    if "none" in named:
        return []
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    return [OTLP_BY_PROTOCOL.get(protocol, protocol) if name == "otlp" else name for name in named]


def configure(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Install an SDK tracer provider with the exporters the environment names; whether tracing is on.

    ``service_name`` is the default ``service.name`` (``OTEL_SERVICE_NAME`` wins). Call it once per
    process, before the first span; a process that forks later keeps it (the SDK's batch processor
    restarts its thread in each child). An exporter that cannot be loaded is reported, not raised:
    telemetry never stops a process from serving.
    """
    names = exporter_names(environ)
    if not names or active():
        return active()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": service_name}))
    provider = TracerProvider(resource=resource)
    available = {point.name: point for point in entry_points(group=EXPORTERS_GROUP)}
    exporting = 0
    for name in names:
        point = available.get(name)
        if point is None:
            log.warning("OTEL_TRACES_EXPORTER names %r, which no installed package provides (installed: %s)",
                        name, ", ".join(sorted(available)) or "none")
            continue
        try:
            provider.add_span_processor(BatchSpanProcessor(point.load()()))
            exporting += 1
        except Exception as exc:  # noqa: BLE001 - a broken exporter leaves tracing off, the process serves
            log.warning("the %s span exporter could not start: %s", name, exc)
    if not exporting:
        return False
    trace.set_tracer_provider(provider)
    log.info("tracing on: %s exports spans of %s", ", ".join(names), resource.attributes.get("service.name"))
    return True


def active() -> bool:
    """Whether this process records spans (an SDK, or any real tracer provider, is installed)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def formatted(span_context: SpanContext) -> str:
    """The W3C ``traceparent`` value of ``span_context``."""
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{int(span_context.trace_flags):02x}"


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span (recorded here, or a caller's carried through), or None."""
    span_context = trace.get_current_span().get_span_context()
    return formatted(span_context) if span_context.is_valid else None


def accepted_under(headers: Mapping[str, str]) -> str | None:
    """The trace context to store with a call accepted in a request with ``headers``.

    With tracing on, the request's server span (a child of the caller's ``traceparent``, if any).
    Off, the caller's own ``traceparent`` when it is well formed, so the trace still reaches the
    tool's requests. None when there is neither.
    """
    here = current_traceparent()
    if here is not None:
        return here
    given = headers.get("traceparent")
    if not given:
        return None
    span_context = trace.get_current_span(_W3C.extract({"traceparent": given})).get_span_context()
    return formatted(span_context) if span_context.is_valid else None


def context_of(traceparent: str | None) -> Context | None:
    """The context to start a span in, continuing ``traceparent`` (None: the current context)."""
    if not traceparent:
        return None
    return _W3C.extract({"traceparent": traceparent})


def inject(headers: MutableMapping[str, str], context: Context | None = None) -> None:
    """Put the current (or ``context``'s) trace context into outbound request ``headers``.

    The configured propagators decide the headers (``OTEL_PROPAGATORS``; W3C ``traceparent`` and
    ``baggage`` by default). With tracing on, the HTTP client's own instrumentation injects its
    request span's context over this one.
    """
    propagate.inject(headers, context=context)
