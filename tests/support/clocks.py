"""Clocks for the tests that check that time is the database's: processes whose clock is wrong, and
the database's own time to compare with.

A process is started with a wrong clock under Debian's ``faketime`` (libfaketime, preloaded), which
shifts every clock the process reads. libfaketime 0.9.10 (Debian 12) shifts the monotonic clock by
the same amount as the wall clock (it still runs at the normal rate); it has to here, because with
``FAKETIME_DONT_FAKE_MONOTONIC=1`` its ``clock_nanosleep`` makes Python 3.11's ``time.sleep`` fail
with EINVAL (fixed in later libfaketime releases). A timed wait that nothing ends early, such as
``threading.Event().wait(1)``, never returns under it (glibc's ``sem_clockwait`` is not shifted), so
only run code under it that does not rely on one.
"""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

from receipts.db import Database
from tests.support import sql
from tests.support.stack import Stack

BEAT_LOCAL_TIME = re.compile(r"LocalTime -> (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def skewed(seconds: int) -> list[str]:
    """The command-line prefix that runs a process with its clock ``seconds`` off (negative: slow).

    Fails, never skips, without ``faketime`` (``.ci/run`` installs it).
    """
    faketime = shutil.which("faketime")
    if faketime is None:
        raise AssertionError("faketime is not installed: apt-get install faketime (.ci/run installs it)")
    return [faketime, "-f", f"{seconds:+d}s"]


def database_now(db: Database) -> float:
    """The database's now(), as a Unix time."""
    return float(sql.value(db, "SELECT extract(epoch FROM clock_timestamp())"))


def unix(iso: str) -> float:
    """A Unix time from the API's ISO-8601 (``...Z``)."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(UTC).timestamp()


def beat_clock_offset(log: Path) -> float | None:
    """How far beat's clock is from this process's, from the local time beat prints when it starts
    (None until it has printed it). Whole seconds: the banner has no fraction."""
    found = BEAT_LOCAL_TIME.search(log.read_text(errors="replace")) if log.exists() else None
    if found is None:
        return None
    return (datetime.fromisoformat(found.group(1)) - datetime.now()).total_seconds()


def worker_clock_offset(stack: Stack) -> float:
    """How far the clock of the worker that runs ``current_time`` is from the database's: the Unix time
    the tool read, less when its attempt started (database time)."""
    with stack.client() as client:
        response = client.post("/v1/tool-calls", json={"tool": "current_time", "arguments": {}})
    assert response.status_code == 202, response.text
    receipt = stack.wait_terminal(response.json()["id"])
    assert receipt["status"] == "success", stack.logs()
    return float(receipt["output"]["unix"]) - unix(receipt["started_at"])
