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
    """A run's JSON as GET /v1/runs/{id} answers (a listing leaves ``steps`` out)."""
    body: dict[str, Any] = {"id": "run_1", "status": "pending", "trace_id": "trace_r", "model": "local", "output": None,
                            "error": None, "iterations": 0, "usage": {"prompt_tokens": 0, "completion_tokens": 0},
                            "tools": ["echo"], "max_iterations": 8, "metadata": {}, "steps": [],
                            "created_at": "2026-11-29T19:30:02Z", "updated_at": "2026-11-29T19:30:02Z",
                            "finished_at": None, "deadline_at": "2026-11-29T20:30:02Z"}
    body.update(fields)
    return body


def run_steps(receipt_ids: list[str]) -> list[dict[str, Any]]:
    """The steps of a run whose model called ``guarded_write`` once per receipt, then answered."""
    calls = [{"id": f"call_{i}", "type": "function",
              "function": {"name": "guarded_write", "arguments": '{"tag": "t"}'}} for i in range(len(receipt_ids))]
    return [
        {"index": 0, "kind": "model", "request_messages": 1, "latency_ms": 12.5,
         "response": {"role": "assistant", "content": None, "tool_calls": calls},
         "usage": {"prompt_tokens": 11, "completion_tokens": 7}},
        {"index": 1, "kind": "tools", "batch_id": "batch_r_1", "receipts": receipt_ids,
         "messages": [{"role": "tool", "tool_call_id": call["id"], "content": '{"written": "t"}'} for call in calls],
         "refused": {}, "order": [call["id"] for call in calls]},
        {"index": 2, "kind": "model", "request_messages": 2 + len(calls), "latency_ms": 9.0,
         "response": {"role": "assistant", "content": "Written."},
         "usage": {"prompt_tokens": 20, "completion_tokens": 3}},
    ]
