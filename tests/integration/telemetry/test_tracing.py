"""One trace from a caller's request to the tool's own request: gateway, worker and upstream processes."""

from __future__ import annotations

import secrets

from receipts.tenants import create_key
from tests.integration.telemetry.conftest import api_tool, define, submit
from tests.support.collector import Collector, Span
from tests.support.receiver import Receiver
from tests.support.stack import Stack
from tests.support.upstreams import Reply, Upstream

SPAN_KIND_SERVER, SPAN_KIND_CLIENT, SPAN_KIND_PRODUCER, SPAN_KIND_CONSUMER = 2, 3, 4, 5


def caller_traceparent() -> tuple[str, str, str]:
    """A caller's ``traceparent`` (sampled), with its trace id and span id."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def parts(traceparent: str) -> tuple[str, str]:
    version, trace_id, span_id, flags = traceparent.split("-")
    assert version == "00" and int(flags, 16) & 1, traceparent  # sampled (the SDK may add the random flag)
    return trace_id, span_id


def test_a_callers_trace_reaches_the_api_call_upstream_as_one_trace(stack: Stack, upstream: Upstream,
                                                                      collector: Collector) -> None:
    upstream.route("/traced", Reply(json={"ok": True}))
    header, trace_id, caller_span = caller_traceparent()
    with stack.client() as client:
        define(client, api_tool(upstream, "traced_get", "/traced"))
        accepted = submit(client, "traced_get", headers={"traceparent": header})
    receipt = stack.wait_terminal(accepted["id"])
    assert receipt["status"] == "success", receipt
    [seen] = upstream.requests_to("/traced")
    sent_trace, sent_parent = parts(seen.headers["traceparent"])
    assert sent_trace == trace_id and sent_parent != caller_span

    def in_trace(name: str, service: str) -> Span:
        return collector.wait_for(lambda s: s.trace_id == trace_id and s.name == name and s.service == service)

    server = in_trace("POST /v1/tool-calls", "toolrelay-gateway")
    assert server.kind == SPAN_KIND_SERVER and server.parent_span_id == caller_span
    execute = in_trace("execute traced_get", "toolrelay-worker")
    assert execute.kind == SPAN_KIND_CONSUMER and execute.parent_span_id == server.span_id
    assert execute.attributes["toolrelay.receipt_id"] == receipt["id"]
    assert execute.attributes["toolrelay.status"] == "success"
    request = collector.wait_for(lambda s: s.trace_id == trace_id and s.span_id == sent_parent)
    assert request.service == "toolrelay-worker" and request.kind == SPAN_KIND_CLIENT
    assert request.parent_span_id == execute.span_id  # the upstream saw the worker's request span as its parent


def test_a_call_without_a_traceparent_starts_a_trace_of_its_own(stack: Stack, upstream: Upstream,
                                                                collector: Collector) -> None:
    upstream.route("/fresh", Reply(json={"ok": True}))
    with stack.client() as client:
        define(client, api_tool(upstream, "fresh_get", "/fresh"))
        receipt = stack.wait_terminal(submit(client, "fresh_get")["id"])
    assert receipt["status"] == "success", receipt
    [seen] = upstream.requests_to("/fresh")
    trace_id, _ = parts(seen.headers["traceparent"])
    execute = collector.wait_for(lambda s: s.name == "execute fresh_get")
    server = collector.wait_for(lambda s: s.span_id == execute.parent_span_id)
    assert execute.trace_id == server.trace_id == trace_id
    assert server.service == "toolrelay-gateway" and server.parent_span_id == ""  # the root: nobody's child


def test_every_attempt_of_a_retried_call_continues_the_trace_it_was_accepted_under(
        stack: Stack, upstream: Upstream, collector: Collector) -> None:
    upstream.route("/flaky", Reply(503, json={"busy": True}), Reply(json={"ok": True}))
    header, trace_id, _ = caller_traceparent()
    with stack.client() as client:
        define(client, api_tool(upstream, "flaky_get", "/flaky"))
        receipt = stack.wait_terminal(submit(client, "flaky_get", headers={"traceparent": header})["id"])
    assert receipt["status"] == "success" and receipt["attempt"] == 2, receipt
    assert [parts(seen.headers["traceparent"])[0] for seen in upstream.requests_to("/flaky")] == [trace_id] * 2
    server = collector.wait_for(lambda s: s.trace_id == trace_id and s.service == "toolrelay-gateway")
    for attempt in (1, 2):
        execute = collector.wait_for(lambda s, n=attempt: s.trace_id == trace_id and s.name == "execute flaky_get"
                                     and s.attributes.get("toolrelay.attempt") == n)
        assert execute.parent_span_id == server.span_id  # from the row: the retry is no child of attempt 1


def test_a_webhook_delivery_carries_the_trace_of_its_receipt(stack: Stack, upstream: Upstream,
                                                            collector: Collector) -> None:
    upstream.route("/hooked", Reply(json={"ok": True}))
    key = stack.db.run(create_key("telemetry-hooks"))
    header, trace_id, _ = caller_traceparent()
    with Receiver() as receiver, stack.client(key) as client:
        created = client.post("/v1/webhook-endpoints", json={"url": receiver.url, "event_types": ["receipt.succeeded"]})
        assert created.status_code == 201, created.text
        receiver.secrets.append(created.json()["secret"])
        define(client, api_tool(upstream, "hooked_get", "/hooked"))
        receipt = submit(client, "hooked_get", headers={"traceparent": header})
        [delivery] = receiver.wait_for(1, type="receipt.succeeded", receipt_id=receipt["id"])
    assert delivery.verified_by == (0,)
    sent_trace, sent_parent = parts(delivery.headers["traceparent"])
    assert sent_trace == trace_id
    request = collector.wait_for(lambda s: s.trace_id == trace_id and s.span_id == sent_parent)
    assert request.kind == SPAN_KIND_CLIENT and request.service == "toolrelay-worker"
    webhook = collector.wait_for(lambda s: s.span_id == request.parent_span_id)
    assert webhook.name == "webhook receipt.succeeded" and webhook.kind == SPAN_KIND_PRODUCER
    assert webhook.attributes["toolrelay.receipt_id"] == receipt["id"]
