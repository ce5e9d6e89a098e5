"""The chaos run's tool, loaded by its workers (``TOOLRELAY_TOOL_MODULES=tests.chaos.tools``).

``chaos_write`` is a write that is not idempotent: toolrelay must never run one call of it twice. Its
effect is a line appended to ``$TOOLRELAY_CHAOS_EFFECTS``, outside toolrelay's store, with one
``write(2)`` on a file opened ``O_APPEND`` (atomic between processes for a line this short, and kept
by the kernel when the process is killed right after). The run counts these lines: a receipt or an
idempotency key with two lines is a write run twice, whatever toolrelay's tables say.
"""

from __future__ import annotations

import json
import os
import time

from toolrelay import ToolContext, tool

EFFECTS_ENV = "TOOLRELAY_CHAOS_EFFECTS"
TOOL = "chaos_write"


@tool(name=TOOL, effect="write", idempotent=False, timeout_s=5)
def chaos_write(key: str, work_s: float, ctx: ToolContext) -> dict[str, str]:
    """Work for ``work_s`` seconds, then record the write (one line: receipt, key, attempt, process)."""
    time.sleep(work_s)
    line = json.dumps({"receipt": ctx.receipt_id, "key": key, "attempt": ctx.attempt, "pid": os.getpid(),
                       "at": time.time()}) + "\n"
    fd = os.open(os.environ[EFFECTS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return {"key": key, "written": ctx.receipt_id}


UNSERVED = "chaos_unserved"
UNSERVED_QUEUE = "chaos-unserved"


@tool(name=UNSERVED, effect="read", timeout_s=5, queue=UNSERVED_QUEUE)
def chaos_unserved() -> None:
    """A tool on a queue no worker of the run consumes: its calls end only when the sweeper expires them."""
