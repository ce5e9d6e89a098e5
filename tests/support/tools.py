"""Tools used by the integration and acceptance tests, loaded with TOOLRELAY_TOOL_MODULES.

Side effects are appended to files under $TOOLRELAY_TEST_EFFECTS (one line per execution), so a
test can count how many times a tool really ran, across processes and worker deaths.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

from pydantic import BaseModel, SecretStr

from toolrelay import RetryableError, ToolContext, ToolError, tool


def _effects(name: str) -> Path:
    folder = Path(os.environ.get("TOOLRELAY_TEST_EFFECTS", "/tmp/toolrelay-effects"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def _record(name: str, line: str) -> None:
    with _effects(name).open("a") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def count_effects(folder: Path, name: str, marker: str | None = None) -> int:
    path = folder / name
    if not path.exists():
        return 0
    lines = path.read_text().splitlines()
    return sum(1 for line in lines if marker is None or line == marker)


@tool(effect="write", idempotent=False, timeout_s=30)
def slow_write(tag: str, seconds: float, ctx: ToolContext) -> dict[str, str]:
    """A non-idempotent write: records its start, sleeps, records its end."""
    _record(tag, "start")
    time.sleep(seconds)
    _record(tag, "done")
    return {"tag": tag, "receipt": ctx.receipt_id}


@tool(effect="read", timeout_s=30)
def slow_read(tag: str, seconds: float) -> dict[str, str]:
    """A read: safe to run again. Records each start and end."""
    _record(tag, "start")
    time.sleep(seconds)
    _record(tag, "done")
    return {"tag": tag}


@tool(effect="write", idempotent=True, timeout_s=30)
def flaky(tag: str, failures: int) -> dict[str, int]:
    """Fails with a retryable error ``failures`` times, then succeeds."""
    _record(tag, "call")
    calls = count_effects(_effects(tag).parent, tag, "call")
    if calls <= failures:
        raise RetryableError(f"transient failure {calls}")
    return {"calls": calls}


@tool(effect="write", idempotent=False, timeout_s=30)
def flaky_write(tag: str) -> dict[str, str]:
    """A non-idempotent write that fails with a retryable error: must not be retried."""
    _record(tag, "call")
    raise RetryableError("transient failure")


@tool(effect="read", timeout_s=30)
def boom(message: str) -> None:
    """Always fails permanently."""
    raise ToolError(message, details={"hint": "this tool always fails"})


@tool(effect="read", timeout_s=30)
def crash(message: str) -> None:
    """Raises an unexpected exception."""
    raise RuntimeError(message)


@tool(effect="read", timeout_s=1, max_attempts=1)
def hang(seconds: float) -> dict[str, float]:
    """A sync tool that overruns its 1 s timeout."""
    time.sleep(seconds)
    return {"slept": seconds}


@tool(effect="read", timeout_s=1, max_attempts=1)
async def async_hang(seconds: float) -> dict[str, float]:
    """An async tool that overruns its 1 s timeout."""
    await asyncio.sleep(seconds)
    return {"slept": seconds}


@tool(effect="read")
async def async_add(a: int, b: int) -> dict[str, int]:
    """Adds two integers, asynchronously."""
    await asyncio.sleep(0)
    return {"sum": a + b}


@tool(effect="read", timeout_s=5)
def short_read(tag: str, seconds: float) -> dict[str, str]:
    """A read with a short timeout (so a lost lease expires soon): records each start and end."""
    _record(tag, "start")
    time.sleep(seconds)
    _record(tag, "done")
    return {"tag": tag}


@tool(effect="write", idempotent=False, timeout_s=5)
def short_write(tag: str, seconds: float) -> dict[str, str]:
    """A non-idempotent write with a short timeout: records its start, sleeps, records its end."""
    _record(tag, "start")
    time.sleep(seconds)
    _record(tag, "done")
    return {"tag": tag}


@tool(effect="write", idempotent=False, timeout_s=10, requires_approval=True)
def guarded_write(tag: str) -> dict[str, str]:
    """A write a person approves first: records that it ran."""
    _record(tag, "ran")
    return {"written": tag}


@tool(effect="write", idempotent=False, timeout_s=10, requires_approval=True, approval_timeout_s=2)
def hasty_guarded_write(tag: str) -> dict[str, str]:
    """A write whose approval times out after two seconds."""
    _record(tag, "ran")
    return {"written": tag}


class Vault(BaseModel):
    """Where a secret token is kept: a nested object with a secret in it."""

    name: str
    token: SecretStr


@tool(effect="read", timeout_s=10)
def sign_in(tag: str, user: str, password: SecretStr, vaults: list[Vault]) -> dict[str, str]:
    """Signs in with secrets (a password, a token in each vault). Records what it really got, as JSON."""
    _record(tag, json.dumps({"user": user, "password": password.get_secret_value(),
                             "tokens": [vault.token.get_secret_value() for vault in vaults]}))
    return {"user": user, "said": f"welcome {user}, your password {password.get_secret_value()} works"}

# The two below declare neither effect nor idempotent: the safe reading makes them non-idempotent writes.


@tool(timeout_s=5)
def undeclared_flaky(tag: str) -> None:
    """Declares no contract; fails with a retryable error (which must not be retried)."""
    _record(tag, "call")
    raise RetryableError("transient failure")


@tool(timeout_s=5)
def undeclared_slow(tag: str, seconds: float) -> dict[str, str]:
    """Declares no contract; records its start, sleeps, records its end."""
    _record(tag, "start")
    time.sleep(seconds)
    _record(tag, "done")
    return {"tag": tag}


@tool(effect="read", timeout_s=1, max_attempts=1)
def hang_unstoppable(tag: str, seconds: float) -> dict[str, float]:
    """A sync tool that overruns its 1 s timeout and blocks every signal that could stop it but SIGKILL.

    SIGALRM (the runner's interruption) and SIGTERM masked: no Python code runs in its process until
    it returns, as with a tool stuck in C code.
    """
    _record(tag, "start")
    blocked = {signal.SIGALRM, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        time.sleep(seconds)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
    _record(tag, "done")
    return {"slept": seconds}
