"""py-spy profiles of the gateway and the worker during a throughput run, and a text summary of them.

py-spy samples only the thread holding the GIL (``--gil``), so the shares are of the Python CPU
time of the process, not of time spent waiting on sockets. The profiles are collapsed stacks
(``--format raw``: one ``frame;frame;... count`` line per stack), which flame graph tools read. The
summary splits each profile by process (a Celery worker's main process vs. its pool children) and
lists, per process, the own time by library, the top functions by own time (the frame on top of
the stack), and toolrelay's own functions by inclusive time (anywhere on the stack).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

PY_SPY = Path(sys.executable).with_name("py-spy")
PROJECT = ("receipts/", "gateway/", "workers/", "webhooks/", "toolrelay/")


class Recorder:
    """``py-spy record`` attached to a process (and its children with ``subprocesses``) until stopped."""

    def __init__(self, name: str, pid: int, out_dir: Path, *, subprocesses: bool = False, rate: int = 250) -> None:
        self.path = out_dir / f"{name}.collapsed.txt"
        argv = [str(PY_SPY), "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--gil",
                "--output", str(self.path), "--nonblocking"]
        if subprocesses:
            argv.append("--subprocesses")
        self.popen = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        """Ask py-spy to write its profile and wait for it."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
        try:
            self.popen.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


_FRAME = re.compile(r"^(?P<fn>.+) \((?P<file>[^:()]+)(?::\d+)?\)$")


def _place(frame: str) -> tuple[str, str]:
    """``fn (pkg/module.py:12)`` -> (``pkg/module.py:fn``, library); the line number would split a function."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip(), "?"
    file = match["file"]
    if "site-packages/" in file:
        file = file.split("site-packages/", 1)[1]
    parts = Path(file).parts
    name = "/".join(parts[-2:]) + f":{match['fn']}"
    top = parts[0].removesuffix(".py").lstrip("_")
    if file.startswith(PROJECT):
        return name, "toolrelay"
    if top in sys.stdlib_module_names or top.startswith("<frozen") or file.startswith("/"):
        return name, "stdlib"
    return name, top


def _processes(path: Path) -> dict[str, Counter[tuple[str, ...]]]:
    """Stacks per process role: "main" (the pid py-spy attached to) and "children" (forked pool processes)."""
    roles: dict[str, Counter[tuple[str, ...]]] = defaultdict(Counter)
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = [f for f in stack.split(";") if f.strip()]
        depth = sum(1 for f in frames if f.startswith("process "))
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if frames:
            roles["main" if depth <= 1 else "children"][tuple(frames)] += int(count_text)
    return roles


def summarize(path: Path, top: int = 15) -> str:
    """The summary of one collapsed-stack file (see the module docstring)."""
    out = []
    for role, stacks in sorted(_processes(path).items(), key=lambda item: -sum(item[1].values())):
        total = sum(stacks.values())
        own: Counter[str] = Counter()
        libraries: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        for frames, count in stacks.items():
            places = [_place(frame) for frame in frames]
            own[places[-1][0]] += count
            libraries[places[-1][1]] += count
            for name in {name for name, library in places if library == "toolrelay"}:
                inclusive[name] += count
        out.append(f"{path.name} [{role} process{'es' if role == 'children' else ''}]: {total} GIL samples")
        out.append("  own time by library: " + ", ".join(f"{lib} {100 * n / total:.0f}%"
                                                         for lib, n in libraries.most_common(8)))
        out.append("  own time, top functions:")
        out += [f"    {100 * n / total:5.1f}%  {name}" for name, n in own.most_common(top)]
        out.append("  inclusive time, toolrelay functions:")
        out += [f"    {100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    return "\n".join(out) + "\n" if out else f"{path.name}: no samples\n"
