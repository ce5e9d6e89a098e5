"""Advancing a run: claim it, take its next step, store it, until it must wait for its tools or ends.

One task advances a run by at most one model call: it claims the run (a lease, the attempt as
fencing token), does what ``agents.runs.next_action`` says, stores each step before the next, and
either ends the run, hands its next model call to a fresh task, or releases it until its tool step's
batch completes (whoever ends the batch's last call resumes the run). A worker killed mid-run
loses its lease; the sweeper gives the run back and it resumes from its last stored step: a model
answer that was stored is never asked for again, and a tool step's batch is found again by its id,
so no tool call is submitted twice (a non-idempotent call killed mid-run ends ``outcome_unknown``,
and the model is told so).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import replace
from typing import Any

from agents import batches as agent_batches
from agents.runs import Action, batch_id_of, conversation, next_action, plan, run_error, tool_messages
from agents.tools import openai_tool
from receipts import states
from receipts.catalogue import models
from receipts.catalogue import tools as catalogue
from receipts.catalogue.models import Models
from receipts.db import Database
from receipts.errors import NotFound
from receipts.messages import TaskSender, publish_execute, publish_run
from receipts.outbound.guard import OutboundGuard
from receipts.records import Batch, Run, RunStep
from receipts.secretbox import SecretBox, SecretKeyMissing, SecretUnreadable
from receipts.settings import Settings
from receipts.store import batches, calls, runs
from receipts.store.batches import NewBatch
from receipts.submission import CheckedTool
from workers.backoff import Backoff
from workers.models import Completion, ModelError, ModelRefused, complete
from workers.runner import Invocation, Runner

log = logging.getLogger(__name__)

MAX_MODEL_BACKOFF_S = 30.0


class OutOfTime(ModelError):
    """The model kept failing until the run's deadline."""


def cancel_open_calls(db: Database, run: Run) -> None:
    """Cancel the tool calls still open in the step a run waited for (the run was canceled or timed out)."""
    if run.waiting_batch_id is not None:
        db.run(calls.cancel_batch(run.tenant_id, run.waiting_batch_id, reason=f"the run ended ({run.status})",
                                  actor=f"run:{run.id}"))
        db.run(agent_batches.complete(run.waiting_batch_id))


class RunAdvancer:
    """Advances runs in one worker process; every dependency is passed in."""

    def __init__(self, db: Database, sender: TaskSender, settings: Settings, runner: Runner) -> None:
        self.db = db
        self.sender = sender
        self.settings = settings
        self.runner = runner
        self.guard = OutboundGuard(settings.outbound_allow_cidrs)
        self.models = Models(lambda: SecretBox(settings.secret_key))
        self.backoff = Backoff(1.0, 2.0, MAX_MODEL_BACKOFF_S)
        self.lease_s = settings.model_timeout_s + settings.lease_grace_s

    def advance(self, run_id: str) -> Run | None:
        """Take the run's next steps; the run as this attempt left it (None: not claimed, or fenced out)."""
        claimed = self.db.run(runs.claim(run_id, lease_s=self.lease_s))
        if claimed is None:
            log.debug("run %s not claimable (a duplicate or early message); dropped", run_id)
            return None
        run, steps = claimed.run, list(claimed.steps)
        ends_at = time.monotonic() + claimed.time_left_s
        called_model = False
        while True:
            action = next_action(run, steps)
            if action.kind in ("success", "failed"):
                return self._end(run, action)
            if time.monotonic() >= ends_at:
                return self._end(run, Action("failed", error=run_error("timeout", "the run's deadline passed")))
            if action.kind == "model":
                if called_model:  # one model call per task: the next goes to a fresh one
                    return self._requeue(run)
                step = self._model_step(run, steps, action.index, ends_at)
                called_model = True
            elif action.kind == "tools":
                step = self._tool_step(run, action)
            else:
                step, released = self._await(run, steps[-1])
                if released is not None:
                    return released
            if step is None:
                return None  # fenced out: another attempt holds the run, or it ended
            steps = [s for s in steps if s.index != step.index] + [step]

    # -- steps ----------------------------------------------------------------------------------

    def _model_step(self, run: Run, steps: list[RunStep], index: int, ends_at: float) -> RunStep | None:
        try:
            completion = self._ask_model(run, steps, ends_at)
        except ModelError as exc:
            code = "timeout" if isinstance(exc, OutOfTime) else "upstream_error"
            self._end(run, Action("failed", error=run_error(code, exc.message, status=exc.status)))
            return None
        data = {"request_messages": len(conversation(run, steps)), "response": completion.message,
                "usage": {"prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens},
                "latency_ms": round(completion.latency_ms, 1)}
        stored = self.db.run(runs.add_step(run, index, "model", data, lease_s=self.lease_s, iterations=1,
                                           prompt_tokens=completion.prompt_tokens,
                                           completion_tokens=completion.completion_tokens))
        return RunStep(run.id, index, "model", data, run.updated_at) if stored else None

    def _ask_model(self, run: Run, steps: list[RunStep], ends_at: float) -> Completion:
        """The model's answer, retrying what may pass (429, 5xx, network) with backoff until the deadline."""
        try:
            model = self.db.run(models.get(run.tenant_id, run.model))
            api_key = self.models.api_key(model)
        except NotFound as exc:
            raise ModelRefused(exc.message) from None
        except (SecretKeyMissing, SecretUnreadable) as exc:
            raise ModelRefused(f"the model's API key cannot be read: {exc.message}") from None
        offered = [openai_tool(spec) for spec in self.db.run(catalogue.list_tools(run.tenant_id))
                   if spec.name in run.tools]
        messages = conversation(run, steps)
        for attempt in range(1, 1000):
            left = ends_at - time.monotonic()
            timeout = min(self.settings.model_timeout_s, left)
            try:
                return self.runner.run(Invocation(complete, {  # type: ignore[no-any-return]
                    "guard": self.guard, "base_url": model.base_url, "api_key": api_key, "model": model.model,
                    "messages": messages, "tools": offered, "params": model.params, "timeout_s": timeout,
                }, is_async=True), timeout + 1)
            except ModelRefused:
                raise
            except ModelError as exc:
                asked_ms = None if exc.retry_after_s is None else int(exc.retry_after_s * 1000)
                delay = self.backoff.delay(attempt, asked_ms)
                if delay >= ends_at - time.monotonic():
                    raise OutOfTime(f"the run's deadline passed while the model kept failing: {exc.message}",
                                    status=exc.status) from None
                log.info("run %s: %s; asking again in %.1f s", run.id, exc.message, delay)
                if not self.db.run(runs.renew(run, lease_s=self.lease_s + delay)):
                    raise ModelRefused("the run was taken over or ended while the model was failing") from None
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _tool_step(self, run: Run, action: Action) -> RunStep | None:
        """Open the batch of the calls the run offers (refusing the others), store the step, publish the calls."""
        tool_plan = plan(run, action.calls)
        batch: Batch | None = None
        data: dict[str, Any] = {"batch_id": None, "receipts": [], "messages": None,
                                "refused": tool_plan.refused, "order": tool_plan.order}
        if tool_plan.allowed:
            batch_id = batch_id_of(run, action.index)
            checked: dict[str, CheckedTool] = {}
            for name in {call.name for call in tool_plan.allowed}:
                with contextlib.suppress(NotFound):  # removed since the run began: its receipt says not_found
                    checked[name] = CheckedTool.of(self.db.run(catalogue.find(run.tenant_id, name)))
            metadata = {**run.metadata, "run_id": run.id, "step": action.index}
            entries = agent_batches.entries(self.settings, run.tenant_id, batch_id=batch_id, trace_id=run.trace_id,
                                            calls=tool_plan.allowed, tools=checked, may_use=run.tools,
                                            metadata=metadata)
            new = NewBatch(id=batch_id, tenant_id=run.tenant_id, trace_id=run.trace_id, format="openai_chat",
                           idempotency_key=f"run:{run.id}:{action.index}", request_hash=None,
                           max_result_chars=run.max_result_chars, metadata=metadata, webhook_url=None,
                           entries=entries)
            batch, opened_calls, _replayed = self.db.run(batches.open_batch(new, agent_batches.render))
            data.update(batch_id=batch.id, receipts=[call.id for call in opened_calls])
            for call in opened_calls:  # again after a crash: a duplicate message is dropped by the claim
                if call.status == states.PENDING:
                    publish_execute(self.sender, call, grace_s=self.settings.lease_grace_s)
        step = RunStep(run.id, action.index, "tools", data, run.updated_at)
        if batch is None or batch.completed:
            data["messages"] = tool_messages(step, batch)
        if not self.db.run(runs.add_step(run, action.index, "tools", data, lease_s=self.lease_s)):
            return None
        return replace(step, data=data)

    def _await(self, run: Run, step: RunStep) -> tuple[RunStep | None, Run | None]:
        """The tool step's messages once its batch completed; else the run released until it does."""
        batch_id = step.data["batch_id"]
        batch, receipts = self.db.run(batches.get(run.tenant_id, batch_id))
        if batch.completed:
            data = {**step.data, "messages": tool_messages(step, batch)}
            if not self.db.run(runs.update_step(run, step.index, data)):
                return None, None
            return replace(step, data=data), None
        asks_person = any((r.approval or {}).get("state") == "requested" for r in receipts if not r.terminal)
        released = self.db.run(runs.wait_for(run, batch_id, waiting=asks_person))
        if released is None:
            return None, run  # fenced out meanwhile
        # The batch may have completed between the look and the release, when its completer could not
        # resume the run yet (this attempt still held it): look once more. The release waited for any
        # completer in the middle of its transaction (runs.wait_for), so this look sees what it did.
        if self.db.run(batches.get(run.tenant_id, batch_id))[0].completed:
            resumed = self.db.run(runs.resume(run.id, batch_id))
            if resumed is not None:
                publish_run(self.sender, run.id)
        return None, released

    # -- ends -----------------------------------------------------------------------------------

    def _end(self, run: Run, action: Action) -> Run | None:
        status = states.SUCCESS if action.kind == "success" else states.FAILED
        ended = self.db.run(runs.finish(run, status, output=action.output, error=action.error))
        if ended is not None:
            log.info("run %s %s after %d model calls%s", run.id, status, ended.iterations,
                     f": {action.error['code']}" if action.error else "")
        return ended

    def _requeue(self, run: Run) -> Run | None:
        requeued = self.db.run(runs.requeue(run))
        if requeued is not None:
            publish_run(self.sender, run.id)
        return requeued
