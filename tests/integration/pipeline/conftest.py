"""One deployment shared by the tests of a module that do not stop or kill its processes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.stack import Stack, running_stack
from tests.support.tools import count_effects


@pytest.fixture(scope="module")
def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack")) as stack:
        yield stack


@pytest.fixture
def tag() -> str:
    """A name for this test's side-effect file."""
    return f"t{uuid.uuid4().hex[:12]}"


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def effects(folder: Path, tag: str, marker: str | None = None) -> int:
    return count_effects(folder, tag, marker)
