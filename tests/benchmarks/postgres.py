"""The benchmark's own PostgreSQL server (``--postgres own``, the default), set as a deployment sets one.

A CI machine's server may be set for tests, not for a service: the development machine's has
``autovacuum = off``, under which a receipt's dead row versions (a claim and a finish are two
updates of a row whose indexed ``status`` changes) pile up in the table and its indexes for the whole
run, and PostgreSQL's CPU per call grew threefold over the headline's rounds. A deployment runs with
autovacuum on. The benchmark's own server is the chaos run's (tests/chaos/services.py): the binaries
``toolrelay dev`` uses, a cluster in a temporary folder, ``initdb``'s defaults changed only by what
reaching it needs (127.0.0.1, a port of its own, a password, room for the sections' connections) and
by ``shared_buffers``: a quarter of the machine's memory (``--shared-buffers``), where PostgreSQL's
documentation tells a dedicated server to start, as ``deploy/`` sets it. initdb's 128 MB is sized to
start anywhere, not to serve a table: with it, each read of a receipt in a 7 GB table copies its
index and heap pages in from the kernel's page cache (``--shared-buffers stock`` measures that).
Every section's databases are made on it; it is stopped and removed when the run ends.
"""

from __future__ import annotations

import atexit
from typing import Any

import psycopg

from tests.benchmarks.processes import meminfo_mib
from tests.benchmarks.run import Run
from tests.chaos.services import OwnPostgres
from tests.support import services

SETTINGS = ("autovacuum", "autovacuum_naptime", "shared_buffers", "synchronous_commit", "fsync", "max_connections")


def shared_buffers(choice: str) -> dict[str, str]:
    """The ``shared_buffers`` line for ``--shared-buffers`` (none for ``stock``)."""
    if choice == "stock":
        return {}
    if choice == "quarter":
        return {"shared_buffers": f"{meminfo_mib('MemTotal') // 4}MB"}
    return {"shared_buffers": choice}


def use_own_postgres(run: Run) -> dict[str, Any]:
    """Start a server of this run's own and make it the one every section's databases are made on."""
    server = OwnPostgres(settings=shared_buffers(run.args.shared_buffers))

    def close() -> None:
        atexit.unregister(services.drop_database)  # the template goes with the server
        server.close()

    run.cleanups.append(close)
    server.start()
    services.PG_ADMIN = server.url
    with psycopg.connect(server.admin_conninfo(), autocommit=True) as conn:
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in SETTINGS}  # type: ignore[index]
    summary = f"own server, {server.version}, " + ", ".join(f"{k} {v}" for k, v in settings.items())
    return {"version": server.version, "settings": settings, "summary": summary}
