"""What /proc says about a process and its descendants: CPU time, resident memory, loaded libraries."""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def meminfo_mib(field: str) -> int:
    """A line of /proc/meminfo (``MemTotal``, ``Cached``, ...) in MiB."""
    with open("/proc/meminfo") as meminfo:
        kib = next(int(line.split()[1]) for line in meminfo if line.startswith(f"{field}:"))
    return kib // 1024


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its live descendants (a Celery worker's pool children, say), parents first."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop(0)
        try:
            children = [int(c) for task in Path(f"/proc/{current}/task").iterdir()
                        for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        found.append(current)
        stack.extend(children)
    return found


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants."""
    return sum(cpu_s(p) for p in tree_pids(pid))


def rss_mb(pid: int) -> float:
    """Resident set size (``VmRSS``) in MiB; NaN if the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (FileNotFoundError, ProcessLookupError):
        pass
    return float("nan")


def maps(pid: int, *fragments: str) -> dict[str, bool]:
    """Whether a file whose path contains each fragment is mapped into ``pid`` (a loaded extension)."""
    mapped = Path(f"/proc/{pid}/maps").read_text()
    return {fragment: fragment in mapped for fragment in fragments}


# The compiled modules uvicorn loads when it runs on uvloop and parses HTTP/1.1 with httptools.
UVLOOP = "uvloop/loop."
HTTPTOOLS = "httptools/parser/parser."


def check_uvloop_httptools(pid: int, what: str) -> None:
    """Fail unless ``pid`` (a uvicorn server) runs on uvloop and httptools, as both sides must."""
    missing = [name for name, loaded in maps(pid, UVLOOP, HTTPTOOLS).items() if not loaded]
    if missing:
        raise RuntimeError(f"{what} does not run on uvloop + httptools: {', '.join(missing)} not loaded")


def backends_cpu_s(database: str) -> float:
    """User + system CPU seconds of the live PostgreSQL backends connected to ``database`` (their process
    titles, ``postgres: user database host(port) state``, name it)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        words = title.split()
        if len(words) > 2 and words[0] == "postgres:" and words[2] == database:
            total += cpu_s(int(entry.name))
    return total
