"""Accepting a run: its model and tools checked, its input read as chat messages, stored, published."""

from __future__ import annotations

import contextlib
from typing import Any

from starlette.concurrency import run_in_threadpool

from gateway.calls import check_default_secret
from gateway.problems import Problem
from gateway.schemas import RunRequest
from gateway.services import Services
from gateway.webhook_urls import check_url
from receipts.catalogue import models
from receipts.errors import NotFound
from receipts.ids import new_id
from receipts.messages import publish_run
from receipts.records import Run, Tenant
from receipts.store import runs
from receipts.store.calls import fingerprint
from receipts.store.runs import NewRun

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def chat_messages(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's input as Chat Completions messages (a string is one user message).

    Raises:
        Problem: 422 naming each message that is not one.
    """
    if isinstance(value, str):
        if not value:
            raise Problem.invalid("input", "an empty input gives the model nothing to do")
        return [{"role": "user", "content": value}]
    errors = []
    for i, message in enumerate(value):
        role = message.get("role")
        if role not in ROLES:
            errors.append({"field": f"input.{i}.role", "message": f"one of {', '.join(sorted(ROLES))}"})
        content = message.get("content")
        if not (isinstance(content, str | list) or (content is None and role == "assistant")):
            errors.append({"field": f"input.{i}.content", "message": "a string or a list of content parts"})
    if not value:
        errors.append({"field": "input", "message": "at least one message"})
    if errors:
        raise Problem(422, "input is neither a string nor chat messages", errors=errors)
    return list(value)


async def accept_run(services: Services, tenant: Tenant, body: RunRequest, header_key: str | None) -> tuple[Run, bool]:
    """Store the run and publish it: ``(run, replayed)``. Nothing is stored for a bad request."""
    settings = services.settings
    messages = chat_messages(body.input)
    try:
        await services.db.arun(models.get(tenant.id, body.model))
    except NotFound as exc:
        raise Problem.invalid("model", exc.message) from None
    missing = []
    for name in dict.fromkeys(body.tools):
        with contextlib.suppress(NotFound):
            await services.tools.get(tenant.id, name)
            continue
        missing.append(name)
    if missing:
        raise Problem(422, f"no tool named {', '.join(map(repr, missing))}; see GET /v1/tools",
                      errors=[{"field": "tools", "message": f"no tool named {name!r}"} for name in missing])
    deadline = body.timeout_s or settings.run_deadline_s
    if deadline > settings.run_deadline_max_s:
        raise Problem.invalid("timeout_s", f"must be at most {settings.run_deadline_max_s:g} seconds")
    if header_key is not None and not 1 <= len(header_key) <= 255:
        raise Problem.invalid("Idempotency-Key", "must be 1 to 255 characters")
    if body.webhook_url is not None:
        await run_in_threadpool(check_url, services, body.webhook_url, field="webhook_url")  # DNS: off the loop
        await check_default_secret(services, tenant)
    new = NewRun(id=new_id("run"), tenant_id=tenant.id, trace_id=body.trace_id or new_id("trace"), model=body.model,
                 instructions=body.instructions, input=messages, tools=list(dict.fromkeys(body.tools)),
                 max_iterations=body.max_iterations, max_result_chars=body.max_result_chars, deadline_s=deadline,
                 metadata=body.metadata, webhook_url=body.webhook_url, idempotency_key=header_key,
                 request_hash=fingerprint(body.model_dump(exclude={"wait_s"})) if header_key else None)
    run, replayed = await services.db.arun(runs.create(new))
    if not replayed:
        with contextlib.suppress(Exception):  # the row is committed; the sweeper publishes it
            publish_run(services.sender, run.id)
    return run, replayed
