"""Accepting a batch: a model's tool calls in its own format, a receipt for each, published together."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from starlette.concurrency import run_in_threadpool

from agents import batches as agent_batches
from agents.errors import MalformedMessage
from agents.formats import FORMATS
from gateway.calls import check_default_secret, publish
from gateway.problems import Problem
from gateway.schemas import BatchRequest
from gateway.services import Services
from gateway.webhook_urls import check_url
from receipts import states
from receipts.catalogue import tools as catalogue
from receipts.errors import NotFound
from receipts.ids import new_id
from receipts.records import Batch, BatchCall, Caller
from receipts.settings import Settings
from receipts.store.batches import NewBatch
from receipts.store.calls import fingerprint
from receipts.submission import CheckedTool


def batch_key(header_key: str | None, trace_id: str | None, call_ids: list[str]) -> str | None:
    """What identifies a batch for replays: the Idempotency-Key, or else the caller's trace with the model's
    call ids (a retried agent step sends the same), or nothing (a batch without either is always new)."""
    if header_key is not None:
        if not 1 <= len(header_key) <= 255:
            raise Problem.invalid("Idempotency-Key", "must be 1 to 255 characters")
        return header_key
    if trace_id is None:
        return None
    digest = hashlib.sha256(json.dumps(call_ids).encode()).hexdigest()[:32]
    return f"trace:{trace_id[:200]}:{digest}"


def request_hash(settings: Settings, request: dict[str, Any], tools: Iterable[CheckedTool]) -> str:
    """The batch's fingerprint, which its replays must match. Keyed with TOOLRELAY_SECRET_KEY where a called
    tool takes secret arguments: the message holds them in clear, and the stored hash must tell nothing about
    them (a plain hash of a short password is a guess away)."""
    keyed = any(tool.secrets is not None for tool in tools)
    return fingerprint(request, settings.secret_key if keyed else None)


async def accept_batch(services: Services, caller: Caller, body: BatchRequest, header_key: str | None,
                       traceparent: str | None = None) -> tuple[Batch, Sequence[BatchCall], bool]:
    """Open the batch of ``body``'s calls and publish those to run: ``(batch, its calls, replayed)``.

    ``traceparent`` is the trace context the calls are accepted under (their executions continue it).

    Only a malformed envelope is refused (422); what the model got wrong inside it becomes a failed
    receipt and a message it can act on. All receipts are inserted in one transaction with the batch.
    A call to a tool outside the key's scope is such a mistake: its receipt starts failed with
    ``forbidden``, and the message names the tools the key may use (those alone).
    """
    tenant = caller.tenant
    try:
        calls = FORMATS[body.format].calls(body.message)
    except MalformedMessage as exc:
        raise Problem(422, exc.message, errors=exc.errors) from None
    limit = services.settings.batch_max_calls
    if len(calls) > limit:
        raise Problem.invalid("message", f"at most {limit} tool calls in one batch ({len(calls)} given)")
    if body.webhook_url is not None:
        await run_in_threadpool(check_url, services, body.webhook_url, field="webhook_url")  # DNS: off the loop
        await check_default_secret(services, tenant)
    tools: dict[str, CheckedTool] = {}
    names = set(dict.fromkeys(call.name for call in calls))
    forbidden = {name for name in names if not caller.may_use(name)}
    for name in names - forbidden:
        with contextlib.suppress(NotFound):  # the model named a tool that does not exist: its receipt says so
            tools[name] = await services.tools.get(tenant.id, name)
    may_use = list(tools)
    if len(tools) < len(names):  # someone is told which tools they may call
        specs = await services.db.arun(catalogue.list_tools(tenant.id))
        may_use = [spec.name for spec in caller.visible(specs)]
    trace_id = body.trace_id or new_id("trace")
    batch_id = new_id("batch")
    entries = agent_batches.entries(services.settings, tenant.id, batch_id=batch_id, trace_id=trace_id, calls=calls,
                                    tools=tools, may_use=may_use, metadata=body.metadata, webhook_url=body.webhook_url,
                                    forbidden=forbidden, traceparent=traceparent)
    key = batch_key(header_key, body.trace_id, [call.call_id for call in calls])
    replay_hash = None  # what a replay must repeat; a batch without a key has no replays
    if key is not None:
        replay_hash = request_hash(services.settings, {
            "format": body.format, "message": body.message, "max_result_chars": body.max_result_chars,
            "metadata": body.metadata, "webhook_url": body.webhook_url}, tools.values())
    new = NewBatch(id=batch_id, tenant_id=tenant.id, trace_id=trace_id, format=body.format,
                   idempotency_key=key, request_hash=replay_hash,
                   max_result_chars=body.max_result_chars, metadata=body.metadata, webhook_url=body.webhook_url,
                   entries=entries)
    batch, opened_calls, replayed = await services.open_batch(new)
    if not replayed:
        for call in opened_calls:
            if call.status == states.PENDING:
                publish(services, call)
    return batch, opened_calls, replayed
