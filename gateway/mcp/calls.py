"""``tools/call`` over MCP: a receipt through the one submission path, followed to its end.

The call is submitted like ``POST /v1/tool-calls`` (:func:`gateway.calls.submit`), then long-polled
through the gateway's waiters up to its deadline; with a ``progressToken`` each step of the receipt
is a ``notifications/progress``. What a model got wrong (an unknown tool, arguments that do not fit)
is a tool result it can read, and stores nothing, like the ``422`` of the HTTP API.

A ``tools/call`` whose handler is cancelled cancels its receipt: that is how a client's
``notifications/cancelled`` arrives (the MCP dispatcher interrupts the handler), and how the
2026-07-28 transport says it (closing the response stream); a session the client ends with calls in
flight cancels them too. The one exception is the gateway shutting down: its calls stay accepted,
and run to their end whether or not anybody waits.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server.session import ServerSession

from gateway.calls import submit
from gateway.mcp import results
from gateway.routes.receipts import wait_for_terminal
from gateway.services import Services
from gateway.waiters import RECHECK_S
from receipts import states, storable
from receipts.catalogue.tools import list_tools
from receipts.errors import InvalidInput, InvalidTransition, NotFound, Unavailable
from receipts.records import Caller, Receipt, Tenant
from receipts.store import calls
from receipts.submission import CallRequest

log = logging.getLogger(__name__)

# How long past its deadline a call is still waited for: the sweeper settles an overdue receipt on
# its next pass (every TOOLRELAY_SWEEP_INTERVAL_S), and a timed-out attempt ends a second or two late.
DEADLINE_GRACE_S = 10.0
META_FIELDS = (results.TRACE_ID, results.CALL_ID)


def call_request(params: types.CallToolRequestParams) -> CallRequest:
    """The call ``params`` ask for: trace and call ids from ``_meta``, when given.

    Raises:
        InvalidInput: a ``_meta`` id is not a string of 1 to 200 characters (the HTTP API's limits), or
            the arguments or an id hold a value that cannot be stored (as on ``POST /v1/tool-calls``).
    """
    meta: dict[str, Any] = dict(params.meta or {})
    errors = [{"field": f"_meta.{key}", "message": "must be a string of 1 to 200 characters"}
              for key in META_FIELDS
              if meta.get(key) is not None and not (isinstance(meta[key], str) and 1 <= len(meta[key]) <= 200)]
    if errors:
        raise InvalidInput("invalid _meta", errors=errors)
    storable.check(params.name, field="name")
    storable.check(params.arguments or {}, field="arguments")
    storable.check({key: meta.get(key) for key in META_FIELDS}, field="_meta")
    return CallRequest(tool=params.name, arguments=params.arguments or {}, trace_id=meta.get(results.TRACE_ID),
                       call_id=meta.get(results.CALL_ID))


class Progress:
    """``notifications/progress`` for one call, as its receipt moves: accepted (0), each attempt as it
    starts (1, 2, ...), finished (``total``, which is ``max_attempts + 1``). Values only go up.

    An attempt that started and ended between two reads is still reported, before the end: the
    finished receipt's ``attempt`` says how many ran. Without a progress token nothing is sent.
    """

    def __init__(self, session: ServerSession, receipt: Receipt) -> None:
        self.session = session
        self.total = receipt.max_attempts + 1
        self.sent = -1

    async def _send(self, progress: int, message: str) -> None:
        await self.session.report_progress(progress, self.total, message)
        self.sent = progress

    async def follow(self, receipt: Receipt) -> None:
        """Report what happened to ``receipt`` since the last call."""
        if self.sent < 0:
            await self._send(0, f"accepted: {receipt.id} is {receipt.status}")
        for attempt in range(self.sent + 1, min(receipt.attempt, self.total - 1) + 1):
            await self._send(attempt, f"running: attempt {attempt} of {receipt.max_attempts}")
        if receipt.terminal and self.sent < self.total:
            await self._send(self.total, f"finished: {receipt.status}")


class ToolCalls:
    """Runs the ``tools/call`` requests of one gateway's MCP server."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.closing = False  # set when the gateway shuts down: calls in flight are then left to run

    async def call(self, session: ServerSession, caller: Caller,
                   params: types.CallToolRequestParams) -> types.CallToolResult:
        """Submit the call, follow its receipt to the end (or its deadline) and answer with it.

        A read-only key, or a key limited to other tools, is refused before anything is stored.
        """
        services, tenant = self.services, caller.tenant
        if caller.read_only:
            return results.refused("this API key is read-only: it may list tools, but not call them")
        if not caller.may_use(params.name):
            allowed = ", ".join(sorted(caller.tools or ())) or "none"
            return results.refused(f"this API key may not call {params.name!r}; it is limited to: {allowed}")
        try:
            request = call_request(params)
            checked = await services.tools.get(tenant.id, params.name)
            receipt, _ = await submit(services, tenant, checked, request)
        except NotFound:
            services.metrics.rejected.labels("unknown_tool").inc()
            available = [spec.name for spec in caller.visible(await services.db.arun(list_tools(tenant.id)))]
            return results.unknown_tool(params.name, available)
        except InvalidInput as exc:
            return results.invalid_arguments(exc.message, exc.errors)
        except Unavailable:
            return results.unavailable(None)
        try:
            progress = Progress(session, receipt)
            await progress.follow(receipt)
            if receipt.status == states.WAITING:  # a client-run tool: its client posts the result
                return results.client_run_result(receipt)
            return results.receipt_result(await self._follow(caller, receipt, progress))
        except Unavailable:
            return results.unavailable(receipt.id)
        except anyio.get_cancelled_exc_class():
            if not self.closing:
                with anyio.CancelScope(shield=True):
                    await self._cancel(tenant, receipt.id)
            raise

    async def _follow(self, caller: Caller, receipt: Receipt, progress: Progress) -> Receipt:
        """The receipt once terminal, or as it stands a little past its deadline.

        Long-polls in slices of the waiters' re-read interval, so that a new attempt (which wakes no
        waiter: only settling does) is reported within that interval, and a settled receipt at once.
        """
        budget = (receipt.deadline_at - receipt.created_at).total_seconds() + DEADLINE_GRACE_S
        deadline = time.monotonic() + budget
        while not receipt.terminal:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            receipt = await wait_for_terminal(self.services, caller, receipt.id, min(left, RECHECK_S))
            await progress.follow(receipt)
        return receipt

    async def _cancel(self, tenant: Tenant, receipt_id: str) -> None:
        try:
            await self.services.db.arun(calls.cancel(tenant.id, receipt_id, actor="mcp"))
        except (InvalidTransition, NotFound):
            pass  # it settled first: its outcome stands
        except Unavailable:
            log.warning("MCP call %s was cancelled but its receipt could not be: the database is unavailable",
                        receipt_id)
