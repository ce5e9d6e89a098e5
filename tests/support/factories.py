"""Small builders for unit tests: catalogue entries, calls, batches, runs, and a sender that records what it
publishes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from receipts.ids import new_id
from receipts.messages import EXECUTE_TASK
from receipts.records import ToolSpec
from receipts.store.batches import NewBatch
from receipts.store.calls import Entry, NewCall
from receipts.store.runs import NewRun

TENANT = "ten_acme"
OTHER_TENANT = "ten_other"


def spec(name: str = "echo", *, effect: str = "read", idempotent: bool = True, timeout_s: float = 30.0,
         max_attempts: int = 3, parameters: dict[str, Any] | None = None, kind: str = "python") -> ToolSpec:
    """A catalogue entry with the contract a test needs."""
    return ToolSpec(name=name, kind=kind, description=f"{name} for tests",
                    parameters=parameters or {"type": "object"}, effect=effect, idempotent=idempotent,
                    timeout_s=timeout_s, max_attempts=max_attempts)


def call(tool: ToolSpec | None = None, *, tenant_id: str = TENANT, arguments: Any = None, deadline_s: float = 3600,
         **options: Any) -> NewCall:
    """A call to ``tool`` (echo by default) as the gateway would hand it to the store."""
    return NewCall(tenant_id=tenant_id, tool=tool or spec(), arguments={"x": 1} if arguments is None else arguments,
                   deadline_s=deadline_s, **options)


def batch(size: int = 2, *, batch_id: str | None = None, tenant_id: str = TENANT,
          metadata: dict[str, Any] | None = None) -> NewBatch:
    """A batch of ``size`` calls (of a read tool), as an agent step would open it."""
    batch_id = batch_id or new_id("batch")
    return NewBatch(id=batch_id, tenant_id=tenant_id, trace_id="trace_batch", format="openai_chat",
                    idempotency_key=None, request_hash=None, max_result_chars=100, metadata=metadata or {},
                    webhook_url=None,
                    entries=[Entry(call(spec("lookup"), tenant_id=tenant_id, batch_id=batch_id)) for _ in range(size)])


def run(*, tenant_id: str = TENANT, deadline_s: float = 600, **options: Any) -> NewRun:
    """A run of the scripted model, as the gateway would hand it to the store."""
    fields: dict[str, Any] = {
        "id": new_id("run"), "tenant_id": tenant_id, "trace_id": "trace_run", "model": "scripted",
        "instructions": None, "input": [{"role": "user", "content": "go"}], "tools": ["lookup"], "max_iterations": 5,
        "max_result_chars": 100, "deadline_s": deadline_s, "metadata": {}, "webhook_url": None,
        "idempotency_key": None, "request_hash": None}
    return NewRun(**{**fields, **options})


@dataclass
class Sent:
    name: str
    args: list[Any]
    options: dict[str, Any]


@dataclass
class RecordingSender:
    """Stands in for Celery's ``send_task``: remembers every message instead of sending it."""

    sent: list[Sent] = field(default_factory=list)

    def send_task(self, name: str, args: Any = None, **options: Any) -> None:
        self.sent.append(Sent(name, list(args or []), options))

    def for_receipt(self, receipt_id: str) -> list[Sent]:
        return [message for message in self.sent if message.args and message.args[0] == receipt_id]

    def executes(self) -> list[str]:
        """The receipt ids of the execute messages sent, in order."""
        return [message.args[0] for message in self.sent if message.name == EXECUTE_TASK]
