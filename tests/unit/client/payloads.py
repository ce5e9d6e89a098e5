"""API answers as the gateway writes them, for the client's unit tests."""

from __future__ import annotations

from typing import Any


def receipt(**fields: Any) -> dict[str, Any]:
    """A receipt's JSON: a pending ``echo`` call unless ``fields`` say otherwise."""
    body: dict[str, Any] = {
        "id": "rcpt_01m8mcjbhnnp6jqb2h5kx366nb", "status": "pending", "trace_id": "trace_demo", "tool": "echo",
        "kind": "python", "call_id": None, "input": {"n": 1}, "parent_id": None, "output": None, "error": None,
        "attempt": 0, "max_attempts": 3, "idempotency_key": None, "metadata": {},
        "created_at": "2026-11-29T19:30:02.933587Z", "updated_at": "2026-11-29T19:30:02.933587Z",
        "started_at": None, "finished_at": None, "deadline_at": "2026-11-29T20:30:02.933587Z",
    }
    body.update(fields)
    return body


def problem(status: int, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}


def batch(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "batch_1", "status": "running", "trace_id": "trace_b",
                            "receipts": ["rcpt_a", "rcpt_b"], "messages": None,
                            "created_at": "2026-11-29T19:30:02Z", "completed_at": None}
    body.update(fields)
    return body


def run(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "run_1", "status": "pending", "trace_id": "trace_r", "model": "local", "output": None,
                            "error": None, "iterations": 0, "usage": {"prompt_tokens": 0, "completion_tokens": 0},
                            "steps": [], "created_at": "2026-11-29T19:30:02Z", "updated_at": "2026-11-29T19:30:02Z",
                            "finished_at": None}
    body.update(fields)
    return body
