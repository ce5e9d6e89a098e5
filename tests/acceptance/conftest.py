"""The ``toolrelay`` command as a user runs it: a subprocess of the installed console script."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.stack import Process, healthy

TOOLRELAY = str(Path(sys.executable).with_name("toolrelay"))


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any TOOLRELAY_* the developer may have set, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRELAY_")}
    env.update(extra)
    return env


def toolrelay(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one ``toolrelay`` command to completion."""
    return subprocess.run([TOOLRELAY, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False)


def start(name: str, *args: str, env: dict[str, str], cwd: Path) -> Process:
    """Start a long-running ``toolrelay`` command in its own session, logging to ``cwd/<name>.log``."""
    return Process(name, [TOOLRELAY, *args], env, cwd, cwd=cwd)


def wait_until(condition: Callable[[], bool], timeout: float, what: str, process: Process | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.popen.poll() is not None:
            raise AssertionError(f"{process.name} exited while waiting for {what}:\n{process.log()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}"
                                 + (f":\n{process.log()[-4000:]}" if process else ""))
        time.sleep(0.1)


def serving(base_url: str) -> Callable[[], bool]:
    return lambda: healthy(base_url)
