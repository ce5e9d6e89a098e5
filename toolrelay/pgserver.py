"""PostgreSQL for ``toolrelay dev``: a server of its own for the data directory, on a Unix socket only.

``EmbeddedPostgres.start()`` makes the cluster on first use (initdb: ``trust`` on the local socket,
host connections rejected, UTF8, superuser ``postgres``), starts its server or reuses the one already
serving it, and creates the database; ``stop()`` stops it (``pg_ctl stop -m fast``). PostgreSQL's
durability settings keep their defaults (fsync, synchronous_commit, full_page_writes): dev loses no
accepted call.

- The server listens on no TCP port (``listen_addresses=''`` on its command line, which nothing in the
  cluster's configuration overrides), only on a Unix socket in a folder its user and root alone can
  enter; so trusting local connections lets nobody else in.
- Where the cluster, the socket and the binaries live, and as whom the server runs, are the rules of
  ``toolrelay.pglayout``: in short, ``<data-dir>/pg`` with the binaries in place; as root, a system
  user ``toolrelay-pg``, and files under ``/var/lib/toolrelay-dev`` wherever ``<data-dir>/pg`` would
  need a folder above it opened to that user. No folder's permissions are ever widened.
- A dev killed with SIGKILL leaves its server running (``pg_ctl`` starts it in a session of its own).
  The next ``start()`` reuses it when ``postmaster.pid`` names a live postmaster of this cluster that
  answers on its socket; when the file is stale (the server died too), it starts the server again and
  PostgreSQL replays its WAL, so nothing committed is lost.

POSIX only (Linux, macOS), like ``toolrelay dev`` itself.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL

from toolrelay.pgbinaries import Binaries, find_binaries, reachable_binaries
from toolrelay.pglayout import (
    SOCKET_NAME,
    STATE_DIR,
    ClusterUnusable,
    PostgresError,
    PostgresUnavailable,
    ServerFailed,
    ServerUser,
    adopt_cluster,
    find_cluster,
    new_cluster_folder,
    server_user,
    socket_folder,
)

__all__ = ["ClusterUnusable", "EmbeddedPostgres", "PostgresError", "PostgresUnavailable", "ServerFailed", "Startup"]

PORT = 5432  # names the socket file (.s.PGSQL.5432); no TCP port is opened
SUPERUSER = "postgres"
LOG_NAME = "postgresql.log"
_ANSWER_WAIT_S = 60.0  # a live postmaster may be replaying its WAL before it answers
_BUSY_WAIT_S = 10.0  # after a postmaster was killed, its children may hold the shared memory a moment


@dataclass(frozen=True)
class Startup:
    """What ``start()`` did, and how long each step took (seconds).

    Steps, in order, among: ``copy`` (the binaries, once per version, as root), ``initdb``, ``start`` or
    ``reuse``, ``createdb``. ``unclean`` means the server had not stopped cleanly (it was killed, or the
    machine stopped): a restarted server replayed its WAL.
    """

    version: str
    steps: tuple[tuple[str, float], ...]
    total_s: float
    unclean: bool = False

    @property
    def reused(self) -> bool:
        return any(name == "reuse" for name, _ in self.steps)

    def summary(self) -> str:
        """E.g. ``PostgreSQL 18.6 ready in 0.9 s (initdb 0.6 s, start 0.3 s)``."""
        steps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.steps)
        return f"PostgreSQL {self.version} ready in {self.total_s:.1f} s ({steps})"


@dataclass(frozen=True)
class Postmaster:
    """What a cluster's ``postmaster.pid`` says: the server's pid, its cluster and its socket folder."""

    pid: int
    cluster: Path
    socket_dir: Path | None

    @classmethod
    def read(cls, cluster: Path) -> Postmaster | None:
        try:
            lines = (cluster / "postmaster.pid").read_text().splitlines()
            pid = int(lines[0])
        except (FileNotFoundError, IndexError, ValueError):
            return None
        lines += [""] * (5 - len(lines))  # the postmaster writes its lines as it starts up
        return cls(pid, Path(lines[1]), Path(lines[4]) if lines[4] else None)

    def alive(self) -> bool:
        """Whether the pid is a live process; a zombie (exited, not yet reaped by its parent) is not."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True  # no /proc (macOS): kill() said it exists
        return state not in ("Z", "X")

    def runs_postgres(self) -> bool:
        """Whether the pid still runs postgres, not a process that got the pid since; assumed so when unknown."""
        try:
            argv0 = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            return True  # no /proc (macOS), or it has just exited
        return argv0 == b"" or os.path.basename(argv0) in (b"postgres", b"postmaster")  # "" as it exits


class EmbeddedPostgres:
    """PostgreSQL for toolrelay dev: a cluster in ``<data_dir>/pg``, reached over a Unix socket only.

    Usable as a context manager (started on entry, stopped on exit). ``stop()`` stops the server even
    when ``start()`` reused one that a previous dev left running: the data directory's dev owns it.
    """

    def __init__(self, data_dir: Path, *, database: str = "toolrelay", binaries: Binaries | None = None,
                 state_dir: Path = STATE_DIR) -> None:
        """Args:
            data_dir: the dev data directory; the cluster is (or is linked from) ``<data_dir>/pg``.
            database: the database ``start()`` creates when missing, and the URL names.
            binaries: the server binaries to use; by default found by ``pgbinaries.find_binaries``.
            state_dir: as root, where clusters and binaries go that ``toolrelay-pg`` could not reach.
        """
        self.data_dir = data_dir.absolute()
        self.database = database
        self.state_dir = state_dir
        self.binaries: Binaries | None = binaries  # the ones found or copied, once started
        self.cluster: Path | None = None
        self.socket_dir: Path | None = None
        self.startup: Startup | None = None

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the database: ``postgresql+psycopg://postgres@/<db>?host=<socket dir>&port=5432``."""
        return URL.create("postgresql+psycopg", username=SUPERUSER, database=self.database,
                          query={"host": str(self._socket()), "port": str(PORT)}).render_as_string(hide_password=False)

    def conninfo(self, database: str | None = None) -> str:
        """A libpq connection string for psycopg, to ``database`` (by default this one's)."""
        return psycopg.conninfo.make_conninfo(host=str(self._socket()), port=PORT, user=SUPERUSER,
                                              dbname=database or self.database)

    @property
    def log_file(self) -> Path | None:
        """The server's log (appended to by every start), once the cluster exists."""
        return self.cluster / LOG_NAME if self.cluster else None

    def start(self) -> str:
        """Make the cluster if needed, start its server or reuse the running one, create the database.

        Returns:
            the database's SQLAlchemy URL (see ``url``); ``startup`` says what was done and how fast.

        Raises:
            PostgresUnavailable: no server binaries (the message says what to install).
            ClusterUnusable: a cluster or folder in the way that must not be used as it is.
            ServerFailed: initdb or the server failed (the message carries the log's tail).
        """
        began = time.monotonic()
        steps: list[tuple[str, float]] = []
        user = server_user()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cluster = find_cluster(self.data_dir, user)
        binaries, copied = reachable_binaries(self.binaries or find_binaries(cluster), user, self.state_dir)
        self.binaries = binaries
        if copied:
            steps.append(("copy", time.monotonic() - began))
        if cluster is None:
            mark = time.monotonic()
            cluster = self._initdb(binaries, user)
            steps.append(("initdb", time.monotonic() - mark))
        self.cluster = cluster

        mark = time.monotonic()
        running = Postmaster.read(cluster)
        socket_dir = self._running_socket(running, cluster)
        reused = socket_dir is not None
        if socket_dir is None:
            socket_dir = socket_folder(cluster, user)
            self._pg_ctl_start(binaries, user, cluster, socket_dir)
        steps.append(("reuse" if reused else "start", time.monotonic() - mark))
        self.socket_dir = socket_dir

        mark = time.monotonic()
        version, created = self._ensure_database()
        if created:
            steps.append(("createdb", time.monotonic() - mark))
        # A pid file that no live server answered for: the last server did not stop cleanly.
        unclean = running is not None and not reused
        self.startup = Startup(version, tuple(steps), time.monotonic() - began, unclean)
        return self.url

    def stop(self) -> None:
        """Stop the server (fast shutdown: sessions are ended, committed work is kept) and wait for it.

        Does nothing when no server runs for this data directory.
        """
        user = server_user()
        cluster = self.cluster or find_cluster(self.data_dir, user)
        running = Postmaster.read(cluster) if cluster else None
        if cluster is None or running is None or not running.alive():
            return
        binaries, _ = reachable_binaries(self.binaries or find_binaries(cluster), user, self.state_dir)
        done = self._run(user, [binaries.exe("pg_ctl"), "stop", "-D", str(cluster), "-m", "fast", "-w"])
        if done.returncode != 0 and running.alive():
            raise ServerFailed(f"pg_ctl stop failed for {cluster}: {done.stdout}{done.stderr}".strip())

    # --- steps ----------------------------------------------------------------------------------

    def _initdb(self, binaries: Binaries, user: ServerUser) -> Path:
        folder = new_cluster_folder(self.data_dir, user, self.state_dir)
        done = self._run(user, [binaries.exe("initdb"), "-D", str(folder), "-U", SUPERUSER, "--auth-local=trust",
                                "--auth-host=reject", "--encoding=UTF8", "--no-locale"], _machine_zone())
        if done.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            raise ServerFailed(f"initdb failed:\n{done.stdout}{done.stderr}".strip())
        return adopt_cluster(folder, self.data_dir)

    def _running_socket(self, running: Postmaster | None, cluster: Path) -> Path | None:
        """The socket folder of a live server of ``cluster`` that answers; None when one must be started."""
        if running is None or not running.alive():
            return None  # no pid file, or a stale one: the new postmaster replaces it
        if running.cluster != cluster or not running.runs_postgres():
            # Its pid is another process's now, which would make the new postmaster think it still runs.
            (cluster / "postmaster.pid").unlink(missing_ok=True)
            if running.socket_dir is not None:
                (running.socket_dir / f"{SOCKET_NAME}.lock").unlink(missing_ok=True)
            return None
        if running.socket_dir is None:
            raise ClusterUnusable(f"the server of {cluster} (pid {running.pid}) has no Unix socket: stop it")
        deadline = time.monotonic() + _ANSWER_WAIT_S
        while time.monotonic() < deadline:
            if _answers(running.socket_dir):
                return running.socket_dir
            if not running.alive():
                return None
            time.sleep(0.05)
        raise ServerFailed(f"the server of {cluster} (pid {running.pid}) does not answer on {running.socket_dir}; "
                           f"its log: {cluster / LOG_NAME}")

    def _pg_ctl_start(self, binaries: Binaries, user: ServerUser, cluster: Path, socket_dir: Path) -> None:
        settings = {
            "listen_addresses": "",  # no TCP port at all
            "unix_socket_directories": '"' + str(socket_dir).replace('"', '""') + '"',
            "unix_socket_permissions": "0700",
            "port": str(PORT),
            "max_connections": "100",  # a gateway's, a worker's and a sweeper's pools
        }
        options = " ".join(f"-c {shlex.quote(f'{name}={value}')}" for name, value in settings.items())
        log = cluster / LOG_NAME
        # pg_ctl starts the server through a shell, with -D's and -l's paths inside double quotes, where a
        # "$" or a '"' in them would be the shell's: the cluster goes in PGDATA, the log relative to it.
        command = [binaries.exe("pg_ctl"), "start", "-w", "-l", LOG_NAME, "-o", options]
        deadline = time.monotonic() + _BUSY_WAIT_S
        while True:
            offset = log.stat().st_size if log.exists() else 0
            done = self._run(user, command, {"PGDATA": str(cluster)}, cwd=cluster)
            if done.returncode == 0:
                return
            tail = _read_from(log, offset)
            busy = "pre-existing shared memory block" in tail or ("lock file" in tail and "already exists" in tail)
            if not busy or time.monotonic() > deadline:
                raise ServerFailed(f"the PostgreSQL server of {cluster} did not start: "
                                   f"{done.stdout}{done.stderr}\n{tail}".strip())
            time.sleep(0.1)  # a killed postmaster not yet reaped, or its children still exiting

    def _ensure_database(self) -> tuple[str, bool]:
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            number = conn.info.server_version  # e.g. 180006 for 18.6
            version = f"{number // 10000}.{number % 10000}"
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone():
                return version, False
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))
            return version, True

    # --- helpers --------------------------------------------------------------------------------

    def _socket(self) -> Path:
        if self.socket_dir is None:
            raise RuntimeError("the embedded PostgreSQL has not been started")
        return self.socket_dir

    @staticmethod
    def _run(user: ServerUser, command: list[str], extra_env: dict[str, str] | None = None, cwd: Path = Path("/"),
             ) -> subprocess.CompletedProcess[str]:
        """Run a server command as the server's user, with no PG* variables of ours to redirect it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | (extra_env or {})
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=120,
                              **user.subprocess_kwargs())


def _machine_zone() -> dict[str, str]:
    """``TZ`` for initdb: the zone ``/etc/localtime`` links to, the one initdb would pick itself.

    Without ``TZ``, initdb finds the zone by comparing the machine's with every zone file it knows,
    which is most of a second of a first start; given a zone it does not know, it still searches.
    """
    if "TZ" in os.environ:
        return {}
    try:
        _, found, zone = os.readlink("/etc/localtime").partition("zoneinfo/")
    except OSError:
        return {}
    return {"TZ": zone} if found and zone else {}


def _answers(socket_dir: Path) -> bool:
    try:
        with psycopg.connect(host=str(socket_dir), port=PORT, user=SUPERUSER, dbname="postgres", connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def _read_from(log: Path, offset: int) -> str:
    try:
        with log.open("rb") as f:
            f.seek(offset)
            return f.read()[-4000:].decode(errors="replace")
    except FileNotFoundError:
        return ""
