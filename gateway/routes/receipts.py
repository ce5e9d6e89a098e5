"""Tool calls and receipts: submit, read, long-poll, list, timeline, cancel, post a client result.

A key limited to some tools submits calls to those only (403 for any other) and sees only their
receipts: another tool's receipt is a 404, as another tenant's is.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from agents.batches import completion
from gateway.bodies import JSONBodyRoute
from gateway.calls import accept, publish
from gateway.deps import CallerDep, TenantDep, get_caller, services_of
from gateway.params import IDEMPOTENCY_KEY, WAIT_S, Param, documented
from gateway.problems import Problem
from gateway.responses import JSONResponse
from gateway.schemas import (
    PROBLEMS,
    DecisionRequest,
    EventList,
    ReceiptBody,
    ReceiptList,
    ResultRequest,
    ToolCallRequest,
)
from gateway.services import Services
from gateway.waiters import wait_until
from receipts import states
from receipts.errors import NotFound
from receipts.messages import publish_run
from receipts.records import Caller, Receipt
from receipts.store import approvals, batches, calls, runs
from receipts.store.calls import Result
from receipts.telemetry import tracing

router = APIRouter(prefix="/v1", tags=["receipts"], route_class=JSONBodyRoute)

def in_scope(caller: Caller, receipt: Receipt) -> Receipt:
    """``receipt`` if the caller's key may see its tool; NotFound (404) if not, as for another tenant's."""
    if not caller.may_use(receipt.tool):
        raise NotFound(f"no receipt {receipt.id}")
    return receipt


async def read(services: Services, caller: Caller, receipt_id: str) -> Receipt:
    """The caller's receipt (NotFound outside its tenant or its key's tools)."""
    return in_scope(caller, await services.read_receipt((caller.tenant.id, receipt_id)))


async def wait_for_terminal(services: Services, caller: Caller, receipt_id: str, wait_s: float) -> Receipt:
    """The receipt once terminal, or as it stands after ``wait_s`` (capped at the long-poll maximum)."""
    return await wait_until(services.waiters, receipt_id, lambda: read(services, caller, receipt_id),
                            lambda receipt: receipt.terminal, min(wait_s, services.settings.long_poll_max_s))


def receipt_response(receipt: Receipt, status_code: int, replayed: bool = False) -> JSONResponse:
    headers = {"Location": f"/v1/receipts/{receipt.id}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(receipt.to_api(), status_code=status_code, headers=headers)


@router.post("/tool-calls", status_code=202, response_model=ReceiptBody,
             responses={200: {"model": ReceiptBody, "description": "terminal within wait_s, or a replay"}, **PROBLEMS},
             openapi_extra=documented(IDEMPOTENCY_KEY))
async def create_tool_call(request: Request, body: ToolCallRequest, caller: CallerDep) -> JSONResponse:
    """Accept a tool call. 202 with the pending receipt once it is durably stored.

    With ``wait_s``, answers 200 with the terminal receipt if it settles in time. The same
    Idempotency-Key with the same request returns the first receipt (200, ``Idempotent-Replayed``).
    A key limited to some tools gets 403 for any other; a read-only key gets 403. A W3C
    ``traceparent`` header is continued: the call's execution and its requests join that trace.
    """
    services = services_of(request)
    receipt, replayed = await accept(services, caller, body, IDEMPOTENCY_KEY.read(request),
                                     tracing.accepted_under(request.headers))
    if replayed:
        return receipt_response(receipt, 200, replayed=True)
    if body.wait_s and receipt.status != states.WAITING:  # a client-run call waits for its client
        receipt = await wait_for_terminal(services, caller, receipt.id, body.wait_s)
    return receipt_response(receipt, 200 if receipt.terminal else 202)


RECEIPT_ID = Param("receipt_id", "path", str)


@router.get("/receipts/{receipt_id}", response_model=ReceiptBody, responses=PROBLEMS,
            openapi_extra=documented(RECEIPT_ID, WAIT_S))
async def get_receipt(request: Request) -> JSONResponse:
    """A receipt; with ``wait_s``, long-poll up to that many seconds for a terminal state."""
    caller = await get_caller(request)  # its parameters are read here: see gateway.params
    receipt_id, wait_s = RECEIPT_ID.read(request), WAIT_S.read(request)
    services = services_of(request)
    if wait_s:
        receipt = await wait_for_terminal(services, caller, receipt_id, wait_s)
    else:
        receipt = await read(services, caller, receipt_id)
    return JSONResponse(receipt.to_api())


@router.get("/receipts", response_model=ReceiptList, responses=PROBLEMS)
async def list_receipts(request: Request, caller: CallerDep, trace_id: str | None = None,
                        status: str | None = None, tool: str | None = None, parent_id: str | None = None,
                        limit: Annotated[int, Query(ge=1, le=200)] = 50, cursor: str | None = None) -> JSONResponse:
    """Receipts newest first, filtered by trace, status, tool or parent; page with ``cursor``."""
    services = services_of(request)
    if status is not None and status not in states.STATUSES:
        raise Problem.invalid("status", f"one of {', '.join(states.STATUSES)}")
    page = await services.db.arun(calls.list_receipts(caller.tenant.id, trace_id=trace_id, status=status, tool=tool,
                                                      parent_id=parent_id, limit=limit, cursor=cursor,
                                                      tools=caller.tools))
    return JSONResponse({"data": [r.to_api() for r in page.items], "next_cursor": page.next_cursor})


@router.get("/receipts/{receipt_id}/events", response_model=EventList, responses=PROBLEMS)
async def receipt_events(receipt_id: str, request: Request, caller: CallerDep) -> JSONResponse:
    """The receipt's timeline: every transition, with who made it, when and on which attempt."""
    services = services_of(request)
    if caller.scoped:
        await read(services, caller, receipt_id)
    events = await services.db.arun(calls.events(caller.tenant.id, receipt_id))
    return JSONResponse({"data": [e.to_api() for e in events], "next_cursor": None})


@router.post("/receipts/{receipt_id}/cancel", response_model=ReceiptBody, responses=PROBLEMS)
async def cancel_receipt(receipt_id: str, request: Request, caller: CallerDep) -> JSONResponse:
    """Cancel a call that has not finished. A running attempt's result is then discarded (409 if terminal)."""
    services = services_of(request)
    if caller.scoped:
        await read(services, caller, receipt_id)
    receipt = await services.db.arun(calls.cancel(caller.tenant.id, receipt_id))
    await complete_batch(services, receipt)
    return JSONResponse(receipt.to_api())


@router.post("/receipts/{receipt_id}/result", response_model=ReceiptBody, responses=PROBLEMS)
async def post_result(receipt_id: str, body: ResultRequest, request: Request, caller: CallerDep) -> JSONResponse:
    """Report the result of a client-run (function) tool: ``{"output": ...}`` or ``{"error": {"message"}}``."""
    services = services_of(request)
    fields = body.model_fields_set
    if ("output" in fields) == ("error" in fields):
        raise Problem.invalid("body", "send exactly one of output or error")
    if "error" in fields:
        message = (body.error or {}).get("message")
        if not isinstance(message, str) or not message:
            raise Problem.invalid("error.message", "a non-empty string is required")
        details = (body.error or {}).get("details")
        result = Result(states.FAILED, error=calls.error("tool_error", message,
                                                         details=details if isinstance(details, dict) else {}))
    else:
        result = Result(states.SUCCESS, output=body.output)
    if caller.scoped:
        await read(services, caller, receipt_id)
    receipt = await services.db.arun(calls.complete_waiting(caller.tenant.id, receipt_id, result, actor="client"))
    await complete_batch(services, receipt)
    return JSONResponse(receipt.to_api())


@router.post("/receipts/{receipt_id}/approve", response_model=ReceiptBody, responses=PROBLEMS)
async def approve(receipt_id: str, body: DecisionRequest, request: Request, tenant: TenantDep) -> JSONResponse:
    """Approve a call of a tool that requires approval: it runs now (409 once decided, or timed out)."""
    services = services_of(request)
    receipt = await services.db.arun(approvals.approve(tenant.id, receipt_id, by=body.by, comment=body.comment))
    publish(services, receipt)
    await after_decision(services, receipt)
    return JSONResponse(receipt.to_api())


@router.post("/receipts/{receipt_id}/reject", response_model=ReceiptBody, responses=PROBLEMS)
async def reject(receipt_id: str, body: DecisionRequest, request: Request, tenant: TenantDep) -> JSONResponse:
    """Reject a call of a tool that requires approval: it ends failed with ``rejected`` and never runs."""
    services = services_of(request)
    receipt = await services.db.arun(approvals.reject(tenant.id, receipt_id, by=body.by, reason=body.reason))
    await complete_batch(services, receipt)
    await after_decision(services, receipt)
    return JSONResponse(receipt.to_api())


async def after_decision(services: Services, receipt: Receipt) -> None:
    """A run whose tool step waited for this decision waits no more, unless another call of it still does."""
    run_id = receipt.metadata.get("run_id")
    if isinstance(run_id, str) and receipt.batch_id is not None:
        _, receipts = await services.db.arun(batches.get(receipt.tenant_id, receipt.batch_id))
        still = any((r.approval or {}).get("state") == "requested" for r in receipts if not r.terminal)
        await services.db.arun(runs.set_waiting(run_id, receipt.batch_id, waiting=still))


async def complete_batch(services: Services, receipt: Receipt) -> None:
    """Complete the receipt's batch if this ended its last call, and resume a run waiting for it (the
    sweeper does both, should this fail)."""
    op = completion(receipt)
    if op is not None:
        run = await services.db.arun(op)
        if run is not None:
            publish_run(services.sender, run.id)
