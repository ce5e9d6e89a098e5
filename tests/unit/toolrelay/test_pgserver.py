"""The embedded PostgreSQL of ``toolrelay dev``: real servers, reached over their socket with psycopg."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy

import toolrelay
from tests.unit.toolrelay.conftest import root_only
from toolrelay.pgbinaries import Binaries, find_binaries
from toolrelay.pglayout import SERVER_USER, ServerUser, closed_folder
from toolrelay.pgserver import EmbeddedPostgres, Postmaster, Startup

Embedded = Callable[..., EmbeddedPostgres]

# Starts a server for a data directory, commits a row, says so, then waits to be killed.
CHILD = """
import sys, time
from pathlib import Path
import psycopg
from toolrelay.pgserver import EmbeddedPostgres
server = EmbeddedPostgres(Path(sys.argv[1]), state_dir=Path(sys.argv[2]))
server.start()
with psycopg.connect(server.conninfo(), autocommit=True) as conn:
    conn.execute("CREATE TABLE left_by_child (id int)")
    conn.execute("INSERT INTO left_by_child VALUES (1)")
print("ready", flush=True)
time.sleep(600)
"""


def _count(server: EmbeddedPostgres, table: str) -> int:
    with psycopg.connect(server.conninfo()) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # type: ignore[index]


def _commit_one(server: EmbeddedPostgres, table: str) -> None:
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (id int)")
        conn.execute(f"INSERT INTO {table} VALUES (1)")


def _postmaster(data_dir: Path) -> Postmaster:
    running = Postmaster.read((data_dir / "pg").resolve())
    assert running is not None and running.alive()
    return running


def _modes(*paths: Path) -> dict[Path, int]:
    """The mode of every folder from / down to each path."""
    return {folder: folder.stat().st_mode for path in paths for folder in (path, *path.parents)}


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory, state_dir: Path) -> Iterator[EmbeddedPostgres]:
    """A data directory's first start; its cluster is then shared by this module's tests (one initdb)."""
    server = EmbeddedPostgres(tmp_path_factory.mktemp("first") / "dev", state_dir=state_dir)
    server.start()
    yield server
    EmbeddedPostgres(server.data_dir, state_dir=state_dir).stop()


@pytest.fixture
def server(first: EmbeddedPostgres, state_dir: Path) -> EmbeddedPostgres:
    """The shared cluster's server, running: whatever the test before did to it (stopped it, killed it)."""
    running = EmbeddedPostgres(first.data_dir, state_dir=state_dir)
    running.start()
    return running


def test_first_start_makes_the_cluster_and_the_database(first: EmbeddedPostgres) -> None:
    assert first.startup is not None
    steps = [name for name, _ in first.startup.steps]
    # The binaries are copied first where the server's user cannot read them where they are (a checkout
    # in a folder closed to others, as `mktemp -d` makes): tests/unit/toolrelay/test_pgbinaries.py.
    assert steps in (["initdb", "start", "createdb"], ["copy", "initdb", "start", "createdb"])
    assert not first.startup.reused and not first.startup.unclean
    assert first.url.startswith("postgresql+psycopg://postgres@/toolrelay?host=")
    engine = sqlalchemy.create_engine(first.url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sqlalchemy.text("SELECT current_database(), current_user")).one() == (
                "toolrelay", "postgres")
            assert conn.execute(sqlalchemy.text("SHOW server_encoding")).scalar() == "UTF8"
    finally:
        engine.dispose()


def test_the_server_listens_on_a_unix_socket_only(server: EmbeddedPostgres) -> None:
    with psycopg.connect(server.conninfo()) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
        assert conn.execute("SELECT inet_server_addr()").fetchone() == (None,)  # not a TCP connection
    assert server.socket_dir is not None and (server.socket_dir / ".s.PGSQL.5432").is_socket()
    assert server.socket_dir.stat().st_mode & 0o077 == 0  # trust is safe: nobody else can enter


def test_durability_settings_keep_postgres_defaults(server: EmbeddedPostgres) -> None:
    with psycopg.connect(server.conninfo()) as conn:
        settings: dict[str, str] = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('fsync', 'synchronous_commit', 'full_page_writes', 'max_connections')").fetchall())
    assert settings == {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on", "max_connections": "100"}


def test_the_cluster_keeps_the_machines_time_zone(server: EmbeddedPostgres) -> None:
    expected = os.environ.get("TZ") or os.readlink("/etc/localtime").partition("zoneinfo/")[2]
    if not expected:
        pytest.skip("/etc/localtime names no zone")
    with psycopg.connect(server.conninfo()) as conn:
        assert conn.execute("SHOW TimeZone").fetchone() == (expected,)


def test_a_second_start_reuses_the_running_server(server: EmbeddedPostgres, state_dir: Path) -> None:
    again = EmbeddedPostgres(server.data_dir, state_dir=state_dir)
    assert again.start() == server.url
    assert again.startup is not None and again.startup.reused
    assert [name for name, _ in again.startup.steps] == ["reuse"]


def test_stop_then_start_keeps_committed_data(server: EmbeddedPostgres, state_dir: Path) -> None:
    with EmbeddedPostgres(server.data_dir, state_dir=state_dir) as running:
        _commit_one(running, "restarted")
    assert Postmaster.read((server.data_dir / "pg").resolve()) is None  # stopped, and cleanly
    running.stop()  # nothing runs: nothing to do

    again = EmbeddedPostgres(server.data_dir, state_dir=state_dir)
    again.start()
    assert again.startup is not None and [name for name, _ in again.startup.steps] == ["start"]
    assert not again.startup.unclean
    assert _count(again, "restarted") == 1


def test_stop_without_a_cluster_does_nothing(tmp_path: Path, embedded: Embedded) -> None:
    embedded(tmp_path / "never").stop()
    assert not (tmp_path / "never").exists()


def test_a_server_left_by_a_killed_dev_is_reused_with_its_data(server: EmbeddedPostgres, state_dir: Path) -> None:
    server.stop()  # the child starts it
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(server.data_dir), str(state_dir)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    finally:
        child.kill()  # SIGKILL: no stop(), no atexit
        child.wait()
    left = _postmaster(server.data_dir)

    again = EmbeddedPostgres(server.data_dir, state_dir=state_dir)
    again.start()
    assert again.startup is not None and again.startup.reused
    assert _postmaster(server.data_dir).pid == left.pid
    assert _count(again, "left_by_child") == 1


def test_a_killed_postmaster_is_started_again_with_its_committed_data(
        server: EmbeddedPostgres, state_dir: Path) -> None:
    _commit_one(server, "before_crash")
    killed = _postmaster(server.data_dir).pid
    os.kill(killed, signal.SIGKILL)

    again = EmbeddedPostgres(server.data_dir, state_dir=state_dir)
    again.start()
    assert again.startup is not None and not again.startup.reused and again.startup.unclean
    assert [name for name, _ in again.startup.steps] == ["start"]
    assert _postmaster(server.data_dir).pid != killed
    assert _count(again, "before_crash") == 1


def test_a_long_data_dir_path_gets_its_socket_in_a_private_tmp_folder(open_folder: Path, embedded: Embedded) -> None:
    data_dir = open_folder / ("long, with space " * 6) / "dev"
    server = embedded(data_dir)
    server.start()
    try:
        assert server.socket_dir is not None and server.socket_dir.name.startswith("toolrelay-pg-")
        assert server.socket_dir.stat().st_mode & 0o777 == 0o700
        assert server.cluster == data_dir.resolve() / "pg"
        _commit_one(server, "calls")
    finally:
        server.stop()
        if server.socket_dir is not None:
            server.socket_dir.rmdir()


def test_startup_summary_names_each_step() -> None:
    startup = Startup("18.6", (("initdb", 0.61), ("start", 0.3)), 0.93)
    assert startup.summary() == "PostgreSQL 18.6 ready in 0.9 s (initdb 0.6 s, start 0.3 s)"
    assert Startup("18.6", (("reuse", 0.01),), 0.02).reused


@root_only
def test_as_root_no_folder_permission_changes(tmp_path: Path, state_dir: Path, embedded: Embedded) -> None:
    home = tmp_path / "home"  # what /root is: 0700
    data_dir = home / "project" / ".toolrelay"
    data_dir.mkdir(parents=True)
    home.chmod(0o700)
    binaries = find_binaries()
    before = _modes(data_dir, state_dir, binaries.bin_dir)

    server = embedded(data_dir)
    server.start()
    _commit_one(server, "calls")
    assert _modes(data_dir, state_dir, binaries.bin_dir) == before
    server.stop()
    assert _modes(data_dir, state_dir, binaries.bin_dir) == before

    cluster = (data_dir / "pg").resolve()
    assert (data_dir / "pg").is_symlink() and cluster.parent == state_dir
    owner = pwd.getpwnam(SERVER_USER)
    assert (cluster.stat().st_uid, cluster.stat().st_mode & 0o777) == (owner.pw_uid, 0o700)


@root_only
def test_as_root_a_reachable_data_dir_keeps_its_cluster_in_place(open_folder: Path, embedded: Embedded) -> None:
    data_dir = open_folder / 'with "quotes" $HOME `id` spaces' / "dev"  # none of it is for a shell
    data_dir.mkdir(parents=True)  # 0755, as dev makes it
    server = embedded(data_dir)
    server.start()
    assert not (data_dir / "pg").is_symlink() and server.cluster == data_dir.resolve() / "pg"
    assert server.socket_dir == server.cluster
    assert server.cluster.stat().st_uid == pwd.getpwnam(SERVER_USER).pw_uid
    _commit_one(server, "calls")


@root_only
def test_as_root_the_server_runs_from_a_copy_of_unreachable_binaries(
        server: EmbeddedPostgres, state_dir: Path, closed_wheel: Binaries) -> None:
    server.stop()
    copied = EmbeddedPostgres(server.data_dir, binaries=closed_wheel, state_dir=state_dir)
    copied.start()
    assert copied.binaries is not None and copied.binaries.bin_dir.is_relative_to(state_dir)
    assert os.readlink(f"/proc/{_postmaster(server.data_dir).pid}/exe").startswith(str(state_dir))
    assert closed_wheel.wheel is not None and closed_wheel.wheel.root.stat().st_mode & 0o777 == 0o700
    _commit_one(copied, "from_the_copy")


def _python_for(user: ServerUser) -> str | None:
    """A Python of this version that ``user`` can run (this one, or the system's), if any."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for exe in (Path(sys.executable).resolve(), Path(f"/usr/bin/python{version}").resolve()):
        if exe.is_file() and closed_folder(exe.parent, user) is None:
            return str(exe)
    return None


@root_only
def test_not_root_the_cluster_and_binaries_stay_in_place(open_folder: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    as_nobody = ServerUser("nobody", nobody.pw_uid, nobody.pw_gid, switch=True)
    python, packages = _python_for(as_nobody), Path(sysconfig.get_paths()["purelib"])
    if python is None or closed_folder(packages, as_nobody) or closed_folder(
            Path(toolrelay.__file__).resolve().parent, as_nobody):
        pytest.skip("nobody cannot reach a Python with this checkout's packages")
    data_dir = open_folder / "dev"
    data_dir.mkdir()
    os.chown(data_dir, nobody.pw_uid, nobody.pw_gid)
    script = ("import site, sys; site.addsitedir(sys.argv[2])\n"
              "from pathlib import Path; from toolrelay.pgserver import EmbeddedPostgres\n"
              "s = EmbeddedPostgres(Path(sys.argv[1])); s.start()\n"
              "print(s.cluster, s.binaries.bin_dir, s.startup.summary()); s.stop()")
    done = subprocess.run([python, "-c", script, str(data_dir), str(packages)], capture_output=True, text=True,
                          cwd="/", env={"HOME": str(data_dir), "PATH": os.environ["PATH"]},
                          **as_nobody.subprocess_kwargs())
    assert done.returncode == 0, done.stderr
    cluster, bin_dir, _ = done.stdout.split(" ", 2)
    assert Path(cluster) == data_dir.resolve() / "pg" and not (data_dir / "pg").is_symlink()
    assert Path(bin_dir) == find_binaries().bin_dir
    assert (data_dir / "pg").stat().st_uid == nobody.pw_uid
