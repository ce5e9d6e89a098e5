"""``system`` tools: toolrelay's own capabilities, always scoped to the calling receipt's tenant.

``receipts_get``, ``receipts_list``, ``tool_calls_create`` (a child call, linked by ``parent_id``)
and ``tools_list``. Every read and write passes the calling receipt's tenant id to the store, so a
system call can never see or touch another tenant's data: another tenant's receipt id is
``not_found``, exactly like an unknown one.

``tool_calls_create`` is idempotent: the child's idempotency key is derived from the calling
receipt, so a retried attempt finds the child its first attempt created instead of making another.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from receipts import states
from receipts.catalogue import tools as catalogue
from receipts.cursors import InvalidCursor
from receipts.db import Database
from receipts.errors import InvalidInput, NotFound
from receipts.messages import TaskSender, publish_execute
from receipts.records import Receipt, ToolSpec
from receipts.secretbox import SecretKeyMissing
from receipts.settings import Settings
from receipts.store import calls
from receipts.submission import CallRequest, CheckedTool, initial_status, prepare
from receipts.telemetry import tracing
from workers.context import ToolContext
from workers.errors import InvalidArguments, ToolError, ToolNotFound
from workers.runner import Invocation

Handler = Callable[[Receipt, dict[str, Any]], Any]
ID = {"type": "string", "minLength": 1, "maxLength": 40}


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str] | None = None, *,
          effect: str = "read") -> ToolSpec:
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        parameters["required"] = required
    return ToolSpec(name=name, kind="system", description=description, parameters=parameters, effect=effect,
                    idempotent=True, timeout_s=15.0, max_attempts=3, queue="tools")


SPECS = (
    _spec("receipts_get", "Get one receipt (a tool call's status, input, output and error) by id.",
          {"receipt_id": ID}, ["receipt_id"]),
    _spec("receipts_list", "List receipts, newest first, filtered by trace, status, tool or parent receipt.",
          {"trace_id": {"type": "string", "maxLength": 200}, "status": {"enum": list(states.STATUSES)},
           "tool": {"type": "string", "maxLength": 64}, "parent_id": ID,
           "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
           "cursor": {"type": "string", "maxLength": 200}}),
    _spec("tool_calls_create", "Submit a tool call as a child of this one; returns the child's receipt (pending).",
          {"tool": {"type": "string", "minLength": 1, "maxLength": 64}, "arguments": {"type": "object"},
           "call_id": {"type": "string", "maxLength": 200}, "metadata": {"type": "object"},
           "timeout_s": {"type": "number", "exclusiveMinimum": 0}}, ["tool"], effect="write"),
    _spec("tools_list", "List the tools that can be called, with their descriptions and argument schemas.", {}),
)


class SystemKind:
    """Runs the system tools against the store and catalogue, in the calling receipt's tenant."""

    def __init__(self, db: Database, sender: TaskSender, settings: Settings) -> None:
        self.db = db
        self.sender = sender
        self.settings = settings
        self.handlers: dict[str, Handler] = {
            "receipts_get": self.receipts_get,
            "receipts_list": self.receipts_list,
            "tool_calls_create": self.tool_calls_create,
            "tools_list": self.tools_list,
        }

    def specs(self) -> list[ToolSpec]:
        return list(SPECS)

    def publish(self) -> None:
        """Publish the system tools as global catalogue entries (every tenant may call them)."""
        self.db.run(catalogue.publish(self.specs()))

    def prepare(self, receipt: Receipt, context: ToolContext) -> Invocation:
        handler = self.handlers.get(receipt.tool)
        if handler is None:
            raise ToolNotFound(f"no system tool {receipt.tool!r}")
        arguments = receipt.input if isinstance(receipt.input, dict) else {}
        return Invocation(handler, {"receipt": receipt, "arguments": arguments})

    # -- the tools -------------------------------------------------------------------------------

    def receipts_get(self, receipt: Receipt, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.db.run(calls.get(receipt.tenant_id, str(arguments["receipt_id"]))).to_api()
        except NotFound:
            raise ToolNotFound(f"no receipt {arguments['receipt_id']}") from None

    def receipts_list(self, receipt: Receipt, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            page = self.db.run(calls.list_receipts(
                receipt.tenant_id, trace_id=arguments.get("trace_id"), status=arguments.get("status"),
                tool=arguments.get("tool"), parent_id=arguments.get("parent_id"),
                limit=int(arguments.get("limit", 20)), cursor=arguments.get("cursor")))
        except InvalidCursor:
            raise InvalidArguments("cursor is not a next_cursor from a previous page") from None
        return {"data": [item.to_api() for item in page.items], "next_cursor": page.next_cursor}

    def tools_list(self, receipt: Receipt, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"data": [spec.to_api() for spec in self.db.run(catalogue.list_tools(receipt.tenant_id))]}

    def _depth(self, receipt: Receipt) -> int:
        """How many ancestors the calling receipt has (bounded walk up the parent links)."""
        depth, current = 0, receipt
        while current.parent_id is not None and depth <= self.settings.max_call_depth:
            try:
                current = self.db.run(calls.get(receipt.tenant_id, current.parent_id))
            except NotFound:
                break
            depth += 1
        return depth

    def tool_calls_create(self, receipt: Receipt, arguments: dict[str, Any]) -> dict[str, Any]:
        name = str(arguments["tool"])
        try:
            spec = self.db.run(catalogue.find(receipt.tenant_id, name))
        except NotFound:
            raise ToolNotFound(f"no tool named {name!r}") from None
        if self._depth(receipt) + 1 > self.settings.max_call_depth:
            raise ToolError(f"the call tree is deeper than {self.settings.max_call_depth} levels",
                            details={"max_call_depth": self.settings.max_call_depth})
        # The child's idempotency key is derived from this receipt: a retried attempt finds the child
        # its first attempt created instead of making another.
        request = CallRequest(tool=name, arguments=arguments.get("arguments") or {}, trace_id=receipt.trace_id,
                              call_id=arguments.get("call_id"), parent_id=receipt.id,
                              idempotency_key=f"tool_calls_create:{receipt.id}",
                              metadata=arguments.get("metadata") or {}, timeout_s=arguments.get("timeout_s"),
                              traceparent=tracing.current_traceparent())  # the child continues this attempt's trace
        try:
            call = prepare(self.settings, receipt.tenant_id, CheckedTool.of(spec), request)
        except InvalidInput as exc:
            raise InvalidArguments(exc.message, details={"errors": exc.errors}) from None
        except SecretKeyMissing:
            raise ToolError(f"{name!r} is called with secret arguments, which cannot be stored without "
                            "TOOLRELAY_SECRET_KEY") from None
        child, _replayed = self.db.run(calls.create(call, status=initial_status(spec), actor=f"system:{receipt.id}"))
        if child.status == states.PENDING:
            # Also on a replay: the first attempt may have died before publishing; a duplicate
            # message is harmless (the claim is compare-and-set).
            publish_execute(self.sender, child, grace_s=self.settings.lease_grace_s)
        return child.to_api()
