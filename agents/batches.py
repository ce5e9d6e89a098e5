"""A model's tool calls as a batch of receipts, and the batch's receipts as the messages the model reads.

:func:`entries` turns each call into what the store inserts: a call to run (pending, or waiting for
a client-run tool), or, for what the model got wrong, a receipt that starts ``failed`` with an
error the model can act on: arguments that are not a JSON object (``invalid_arguments``), a tool
that does not exist (``not_found``) or that the caller's key may not use (``forbidden``), both
naming the tools it may use, arguments that fail the schema (``invalid_arguments``, every error by
field, none repeating a secret). :func:`render` writes the messages once every call is terminal,
in the batch's format and the calls' order.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from agents.calls import ToolCall, ToolResult
from agents.content import content
from agents.formats import FORMATS
from receipts import states
from receipts.db import Op, Steps, transaction
from receipts.errors import InvalidInput
from receipts.records import Batch, Receipt, Run, ToolSpec
from receipts.settings import Settings
from receipts.store import batches, runs
from receipts.store.calls import Entry, NewCall, error
from receipts.submission import CallRequest, CheckedTool, initial_status, prepare

MAX_LISTED_TOOLS = 100


def unknown_tool(name: str) -> ToolSpec:
    """The stand-in contract of a call to a tool that does not exist (its receipt starts failed)."""
    return ToolSpec(name=name[:64], kind="unknown", description="", parameters={}, effect="read", idempotent=True,
                    timeout_s=0.0, max_attempts=0, queue="")


def not_found_error(name: str, names: Sequence[str]) -> dict[str, Any]:
    listed = ", ".join(sorted(names)[:MAX_LISTED_TOOLS]) or "none"
    return error("not_found", f"no tool named {name!r}; the tools you may call are: {listed}",
                 details={"tools": sorted(names)[:MAX_LISTED_TOOLS]})


def forbidden_error(name: str, names: Sequence[str]) -> dict[str, Any]:
    listed = ", ".join(sorted(names)[:MAX_LISTED_TOOLS]) or "none"
    return error("forbidden", f"the tool {name!r} may not be called here; the tools you may call are: {listed}",
                 details={"tools": sorted(names)[:MAX_LISTED_TOOLS]})


def entries(settings: Settings, tenant_id: str, *, batch_id: str, trace_id: str, calls: Sequence[ToolCall],
            tools: Mapping[str, CheckedTool], may_use: Sequence[str], metadata: dict[str, Any] | None = None,
            webhook_url: str | None = None, forbidden: Collection[str] = (),
            traceparent: str | None = None) -> list[Entry]:
    """The store's entries for ``calls``, in order. ``tools`` has the checked tool of each called name the
    model may call (a name missing from it is not found); ``may_use`` names every tool it may call;
    a name in ``forbidden`` is outside what the caller may use (the API key's scope): its call starts
    failed with ``forbidden``, whether or not such a tool exists.

    Each receipt's idempotency key is derived from the batch and the model's call id, so a batch
    opened again under its key never makes a second receipt for a call.
    """
    shared = dict(metadata or {})  # every call's metadata: one copy of the caller's, which nothing changes
    found: list[Entry] = []
    for call in calls:
        checked = tools.get(call.name)
        key = f"{batch_id}:{call.call_id}"
        if call.name in forbidden:
            problem = forbidden_error(call.name, may_use)
        elif checked is None:
            problem = not_found_error(call.name, may_use)
        elif call.problem is not None:
            problem = error("invalid_arguments", call.problem)
        else:
            request = CallRequest(tool=call.name, arguments=call.arguments or {}, trace_id=trace_id,
                                  call_id=call.call_id, idempotency_key=key, metadata=shared, webhook_url=webhook_url,
                                  batch_id=batch_id, traceparent=traceparent)
            try:  # the batch's own key and fingerprint tell its replays apart: its calls need none of their own
                found.append(Entry(prepare(settings, tenant_id, checked, request, fingerprinted=False),
                                   initial_status(checked.spec)))
                continue
            except InvalidInput as exc:
                problem = error("invalid_arguments", exc.message, details={"errors": exc.errors})
        # A call that starts failed never runs: its input is kept with any secret masked, and nothing else.
        arguments = call.arguments or {}
        spec = checked.spec if checked is not None else unknown_tool(call.name)
        found.append(Entry(NewCall(tenant_id=tenant_id, tool=spec,
                                   arguments=checked.masked(arguments) if checked is not None else arguments,
                                   deadline_s=0.0, trace_id=trace_id, call_id=call.call_id, idempotency_key=key,
                                   metadata=shared, webhook_url=webhook_url, batch_id=batch_id,
                                   traceparent=traceparent),
                           states.FAILED, problem))
    return found


def results(receipts: Sequence[Receipt], limit: int) -> list[ToolResult]:
    """What the model reads for each terminal receipt, in order."""
    found = []
    for receipt in receipts:
        text, is_error = content(receipt, limit)
        found.append(ToolResult(ToolCall(receipt.call_id or receipt.id, receipt.tool, None), text, is_error))
    return found


def render(batch: Batch, receipts: list[Receipt]) -> list[dict[str, Any]]:
    """The messages to append for a batch whose calls are all terminal, in its format."""
    return FORMATS[batch.format].messages(results(receipts, batch.max_result_chars))


@transaction
def complete(batch_id: str) -> Steps[Run | None]:
    """Complete the batch if all its calls are terminal, and resume the run waiting for it (if one is):
    the run to publish, or None."""
    batch = yield from batches.complete(batch_id, render).steps
    run_id = (batch.metadata or {}).get("run_id") if batch is not None else None
    if not isinstance(run_id, str):
        return None
    return (yield from runs.resume(run_id, batch_id).steps)


def completion(receipt: Receipt | None) -> Op[Run | None] | None:
    """The operation to run once ``receipt`` ended, if it was a call of a batch (None: nothing to do): it
    completes the batch if this was its last call, and gives back the run to publish, if one waits.

    Whoever ends a call of a batch runs it once that end has committed.
    """
    if receipt is None or receipt.batch_id is None or not receipt.terminal:
        return None
    return complete(receipt.batch_id)
