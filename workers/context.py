"""What a running tool may know about its call."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Handed to a tool that declares a parameter annotated ``ToolContext``.

    ``receipt_id`` is the natural idempotency key for anything the tool does downstream: it is the
    same on every attempt of this call and different for every other call.
    """

    receipt_id: str
    tenant_id: str
    trace_id: str
    attempt: int
    deadline_at: datetime
    timeout_s: float
