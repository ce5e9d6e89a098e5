"""Accepting a tool call: look the tool up, validate, store the receipt, publish its message."""

from __future__ import annotations

import logging
from typing import Any

from starlette.concurrency import run_in_threadpool

from gateway.problems import Problem
from gateway.schemas import ToolCallRequest
from gateway.services import Services
from gateway.webhook_urls import check_url
from receipts import states
from receipts.errors import InvalidInput, NotFound
from receipts.messages import Executable
from receipts.records import Caller, Receipt, Tenant
from receipts.store import calls
from receipts.submission import CallRequest, CheckedTool, initial_status, prepare
from receipts.telemetry import logfields
from receipts.webhooks.endpoints import has_default_secret

log = logging.getLogger(__name__)


def idempotency_key_of(body: ToolCallRequest, header_key: str | None) -> str | None:
    """The idempotency key from the header or the body; both given must agree."""
    if header_key is not None and body.idempotency_key is not None and header_key != body.idempotency_key:
        raise Problem.invalid("idempotency_key", "differs from the Idempotency-Key header",
                              "Idempotency-Key header and idempotency_key field differ")
    key = header_key if header_key is not None else body.idempotency_key
    if key is not None and not 1 <= len(key) <= 255:
        raise Problem.invalid("idempotency_key", "must be 1 to 255 characters")
    return key


async def lookup_tool(services: Services, tenant_id: str, name: str, field: str = "tool") -> CheckedTool:
    """The tool with its compiled validator (cached); 422 naming ``field`` for an unknown tool."""
    try:
        return await services.tools.get(tenant_id, name)
    except NotFound:
        services.metrics.rejected.labels("unknown_tool").inc()
        raise Problem.invalid(field, f"no tool named {name!r}; see GET /v1/tools", f"unknown tool {name!r}") from None


def check_scope(caller: Caller, tool: str) -> None:
    """403 when the caller's key is limited to other tools (whether or not ``tool`` exists)."""
    if not caller.may_use(tool):
        allowed = ", ".join(sorted(caller.tools or ()))
        raise Problem(403, f"this API key may not call {tool!r}; it is limited to: {allowed}",
                      errors=[{"field": "tool", "message": "outside this API key's tools"}])


async def accept(services: Services, caller: Caller, body: ToolCallRequest, header_key: str | None,
                 traceparent: str | None = None) -> tuple[Receipt, bool]:
    """``POST /v1/tool-calls``: the HTTP body as a :class:`CallRequest`, submitted; ``(receipt, replayed)``.

    ``traceparent`` is the trace context the call is accepted under: its execution continues it.
    """
    tenant = caller.tenant
    check_scope(caller, body.tool)
    key = idempotency_key_of(body, header_key)
    checked = await lookup_tool(services, tenant.id, body.tool)
    request = CallRequest(tool=body.tool, arguments=body.arguments, trace_id=body.trace_id, call_id=body.call_id,
                          idempotency_key=key, metadata=body.metadata, timeout_s=body.timeout_s,
                          webhook_url=body.webhook_url, traceparent=traceparent)
    return await submit(services, tenant, checked, request,
                        request_body=body.model_dump(exclude={"idempotency_key", "wait_s"}, exclude_none=True))


async def submit(services: Services, tenant: Tenant, checked: CheckedTool, request: CallRequest, *,
                 request_body: dict[str, Any] | None = None) -> tuple[Receipt, bool]:
    """Store a call to ``checked``'s tool durably and publish it; returns ``(receipt, replayed)``.

    The one way into the gateway for a call, whatever its caller (the HTTP API, the MCP server).
    Nothing is written when the request is invalid. Once the row is committed the call is accepted:
    if the broker is unreachable the message is left to the sweeper, which re-sends pending receipts
    whose message never arrived. Everything runs on the event loop but the webhook URL's DNS check.

    Raises:
        InvalidInput: the arguments do not match the tool's schema, or the timeout is out of range.
    """
    try:
        call = prepare(services.settings, tenant.id, checked, request, request_body=request_body)
    except InvalidInput:
        services.metrics.rejected.labels("invalid_arguments").inc()
        raise
    if request.webhook_url is not None:
        await run_in_threadpool(check_url, services, request.webhook_url, field="webhook_url")  # DNS: off the loop
        await check_default_secret(services, tenant)
    status = initial_status(checked.spec)
    if status == states.PENDING:
        receipt, replayed = await services.accept_pending(call)
    else:
        receipt, replayed = await services.db.arun(calls.create(call, status=status))
    (services.metrics.replayed if replayed else services.metrics.accepted).labels(call.tool.name).inc()
    logfields.bind(receipt_id=receipt.id, trace_id=receipt.trace_id, tool=receipt.tool)
    if not replayed and status == states.PENDING:
        publish(services, receipt)
    return receipt, replayed


def publish(services: Services, receipt: Executable) -> None:
    """Send ``receipt``'s execute message; a failure is left to the sweeper (the row is committed)."""
    try:
        services.publish(receipt)
    except Exception as exc:  # noqa: BLE001 - the row is committed; the sweeper will publish it
        log.warning("receipt %s accepted but not published (%s); the sweeper will retry", receipt.id, exc)


async def check_default_secret(services: Services, tenant: Tenant) -> None:
    """A call's own ``webhook_url`` needs the tenant's default secret to sign its deliveries."""
    if not await services.db.arun(has_default_secret(tenant.id)):
        raise Problem.invalid("webhook_url", "create the tenant's default webhook secret first "
                                             "(POST /v1/webhook-secret): it signs deliveries to webhook_url")
