"""Accepting a tool call: look the tool up, validate, store the receipt, publish its message."""

from __future__ import annotations

import logging

from starlette.concurrency import run_in_threadpool

from gateway.problems import Problem
from gateway.schemas import ToolCallRequest
from gateway.services import CheckedTool, Services
from gateway.webhook_urls import check_call_webhook_url
from receipts import states
from receipts.errors import NotFound
from receipts.records import Receipt, Tenant
from receipts.store import NewCall, fingerprint

log = logging.getLogger(__name__)


def resolve_key(body: ToolCallRequest, header_key: str | None) -> str | None:
    """The idempotency key from the header or the body; both given must agree."""
    if header_key is not None and body.idempotency_key is not None and header_key != body.idempotency_key:
        raise Problem.invalid("idempotency_key", "differs from the Idempotency-Key header",
                              "Idempotency-Key header and idempotency_key field differ")
    key = header_key if header_key is not None else body.idempotency_key
    if key is not None and not 1 <= len(key) <= 255:
        raise Problem.invalid("idempotency_key", "must be 1 to 255 characters")
    return key


async def accept(services: Services, tenant: Tenant, body: ToolCallRequest,
                 header_key: str | None) -> tuple[Receipt, bool]:
    """Store the call durably and publish it; returns ``(receipt, replayed)``.

    Nothing is written when the request is invalid. Once the row is committed the call is accepted:
    if the broker is unreachable the message is left to the sweeper, which re-sends pending receipts
    whose message never arrived. The common case (the tool's schema cached, no ``webhook_url`` to
    check) runs on the event loop with no thread hop: a pending call's INSERT is awaited there.
    """
    checked = services.tools.cached(tenant.id, body.tool)
    if checked is not None and body.webhook_url is None:
        call, status = prepare(services, tenant, body, header_key, checked)
    else:  # a catalogue read or a webhook URL check may block: off the loop
        call, status = await run_in_threadpool(
            lambda: prepare(services, tenant, body, header_key, lookup_tool(services, tenant.id, body.tool)))
    if status == states.PENDING:
        receipt, replayed = await services.store.create_pending(call)
    else:
        receipt, replayed = await run_in_threadpool(lambda: services.store.create(call, status=status))
    (services.metrics.replayed if replayed else services.metrics.accepted).labels(call.tool.name).inc()
    if not replayed and status == states.PENDING:
        try:
            services.publish(receipt)
        except Exception as exc:  # noqa: BLE001 - the row is committed; the sweeper will publish it
            log.warning("receipt %s accepted but not published (%s); the sweeper will retry", receipt.id, exc)
    return receipt, replayed


def lookup_tool(services: Services, tenant_id: str, name: str) -> CheckedTool:
    """The tool with its compiled validator (may read the catalogue); 422 for an unknown tool."""
    try:
        return services.tools.get(tenant_id, name)
    except NotFound:
        services.metrics.rejected.labels("unknown_tool").inc()
        raise Problem.invalid("tool", f"no tool named {name!r}; see GET /v1/tools",
                              f"unknown tool {name!r}") from None


def prepare(services: Services, tenant: Tenant, body: ToolCallRequest, header_key: str | None,
            checked: CheckedTool) -> tuple[NewCall, str]:
    """Validate the request against its tool: the call to store and the status it starts in.

    Raises:
        Problem: 422 for arguments that do not match the schema, or any other invalid field.
    """
    key = resolve_key(body, header_key)
    errors = checked.errors(body.arguments)
    if errors:
        services.metrics.rejected.labels("invalid_arguments").inc()
        raise Problem(422, f"arguments do not match the schema of {body.tool!r}", errors=errors)
    if body.webhook_url is not None:
        check_call_webhook_url(services, tenant, body.webhook_url)
    spec = checked.spec
    settings = services.settings
    waiting = spec.kind == "function"
    # A function tool's timeout_s is how long its calls wait for the client's result (default 24 h).
    deadline = body.timeout_s or (spec.timeout_s if waiting else settings.call_deadline_s)
    limit = settings.function_deadline_max_s
    if deadline > limit:
        raise Problem.invalid("timeout_s", f"must be at most {limit:g} seconds")
    request_hash = None
    if key is not None:  # what a replay under this key must match
        request_hash = fingerprint(body.model_dump(exclude={"idempotency_key", "wait_s"}, exclude_none=True))
    call = NewCall(
        tenant_id=tenant.id,
        tool=spec,
        arguments=body.arguments,
        deadline_s=deadline,
        trace_id=body.trace_id,
        call_id=body.call_id,
        idempotency_key=key,
        request_hash=request_hash,
        metadata=body.metadata,
        webhook_url=body.webhook_url,
    )
    return call, states.WAITING if waiting else states.PENDING
