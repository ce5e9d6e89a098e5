"""The agent loop's rules, as pure functions: what a run does next, what the model is sent, and when to stop.

A run alternates model steps and tool steps (stored in order, ``receipts.store.runs``)::

    model (the assistant message) -> tools (the calls it made, as a batch of receipts) -> model -> ...

until the model answers without calling a tool (``success``, its text the run's output). The rails:
only the run's tools are offered and only they run (a call to any other tool gets a tool message
saying so, and no receipt); at most ``max_iterations`` model calls (then ``max_iterations``); the
same tool with the same arguments three times in a row ends the run (``loop_detected``); the
deadline is kept by the worker and the sweeper.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.calls import ToolCall
from agents.formats import FORMATS
from receipts.records import Batch, Run, RunStep
from receipts.storable import mended

LOOP_LIMIT = 3  # the same call this many times in a row is a loop
CHAT = FORMATS["openai_chat"]

ActionKind = Literal["model", "tools", "await", "success", "failed"]


@dataclass(frozen=True, slots=True)
class Action:
    """What to do next: call the model, run the last answer's tools, wait for a tool step's batch,
    or end the run (with ``output`` or ``error``)."""

    kind: ActionKind
    index: int = 0
    output: str | None = None
    error: dict[str, Any] | None = None
    calls: list[ToolCall] = field(default_factory=list)


def run_error(code: str, message: str, **details: Any) -> dict[str, Any]:
    return mended({"code": code, "message": message, "retryable": False, "retry_after_ms": None,  # type: ignore[no-any-return]
                   "details": details})  # a model's error text is stored as it came, made storable


def model_steps(steps: Sequence[RunStep]) -> int:
    return sum(1 for step in steps if step.kind == "model")


def tool_calls(response: dict[str, Any]) -> list[ToolCall]:
    """The calls an assistant message makes (none when it answers)."""
    if not response.get("tool_calls"):
        return []
    return CHAT.calls(response)


def _signature(call: ToolCall) -> str:
    arguments = call.arguments if call.arguments is not None else call.problem
    return call.name + ":" + json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def looping(steps: Sequence[RunStep], calls: Sequence[ToolCall]) -> bool:
    """Whether ``calls`` make the same tool call with the same arguments :data:`LOOP_LIMIT` times in a row,
    counting the calls of the steps before them."""
    history = [call for step in steps if step.kind == "model" for call in tool_calls(step.data["response"])]
    recent = [_signature(call) for call in [*history, *calls]][-LOOP_LIMIT:]
    return len(recent) == LOOP_LIMIT and len(set(recent)) == 1


def next_action(run: Run, steps: Sequence[RunStep]) -> Action:
    """What the run does next, given its stored steps."""
    index = len(steps)
    last = steps[-1] if steps else None
    if last is not None and last.kind == "tools" and last.data.get("messages") is None:
        return Action("await", index=last.index)
    if last is not None and last.kind == "model":
        calls = tool_calls(last.data["response"])
        if not calls:
            content = last.data["response"].get("content")
            return Action("success", output=content if isinstance(content, str) else json.dumps(content))
        previous = [step for step in steps if step is not last]
        if looping(previous, calls):
            call = calls[-1]
            return Action("failed", error=run_error(
                "loop_detected", f"the model called {call.name} with the same arguments {LOOP_LIMIT} times in a row",
                tool=call.name))
        return Action("tools", index=index, calls=calls)
    if model_steps(steps) >= run.max_iterations:
        return Action("failed", error=run_error(
            "max_iterations", f"the model was called {run.max_iterations} times without a final answer",
            max_iterations=run.max_iterations))
    return Action("model", index=index)


def conversation(run: Run, steps: Sequence[RunStep]) -> list[dict[str, Any]]:
    """The Chat Completions messages for the run's next model call."""
    messages: list[dict[str, Any]] = []
    if run.instructions:
        messages.append({"role": "system", "content": run.instructions})
    messages.extend(run.input)
    for step in steps:
        if step.kind == "model":
            messages.append(step.data["response"])
        elif step.data.get("messages"):
            messages.extend(step.data["messages"])
    return messages


def refusal(call: ToolCall, offered: Sequence[str]) -> dict[str, Any]:
    """The tool message for a call to a tool the run does not offer (no receipt is made for it)."""
    listed = ", ".join(offered) or "none"
    content = (f"error: forbidden: the tool {call.name!r} is not offered in this run; "
               f"the tools you may call are: {listed}")
    return {"role": "tool", "tool_call_id": call.call_id, "content": content}


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """A tool step before it runs: the calls to run as a batch, and the refused ones' messages."""

    allowed: list[ToolCall]
    refused: dict[str, dict[str, Any]]  # call id -> its tool message
    order: list[str]  # every call id, in the model's order


def plan(run: Run, calls: Sequence[ToolCall]) -> ToolPlan:
    offered = list(run.tools)
    allowed = [call for call in calls if call.name in offered]
    refused = {call.call_id: refusal(call, offered) for call in calls if call.name not in offered}
    return ToolPlan(allowed, refused, [call.call_id for call in calls])


def tool_messages(step: RunStep, batch: Batch | None) -> list[dict[str, Any]]:
    """A tool step's messages in the model's call order: the batch's, and the refusals."""
    by_id = dict(step.data.get("refused") or {})
    for message in (batch.messages or []) if batch is not None else []:
        by_id[message["tool_call_id"]] = message
    return [by_id[call_id] for call_id in step.data["order"] if call_id in by_id]


def batch_id_of(run: Run, index: int) -> str:
    """The id of a run's tool step batch: derived from the run and the step, so a retried attempt finds
    the batch (and so the receipts) its first try made, and never runs a call twice."""
    return f"batch_{run.id.removeprefix('run_')}_{index}"
