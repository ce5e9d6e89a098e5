"""The benchmark's own PostgreSQL server (``--postgres own``, the default): PostgreSQL's stock settings.

A CI machine's server may be set for tests, not for a service: the development machine's has
``autovacuum = off``, under which a receipt's dead row versions (a claim and a finish are two
updates of a row whose indexed ``status`` changes) pile up in the table and its indexes for the whole
run, and PostgreSQL's CPU per call grew threefold over the headline's rounds. A deployment runs with
autovacuum on. The benchmark's own server is the chaos run's (tests/chaos/services.py): the binaries
``toolrelay dev`` uses, a cluster in a temporary folder, only ``initdb``'s defaults changed by what
reaching it needs (127.0.0.1, a port of its own, a password, room for the sections' connections).
Every section's databases are made on it; it is stopped and removed when the run ends.
"""

from __future__ import annotations

import atexit
from typing import Any

import psycopg

from tests.benchmarks.run import Run
from tests.chaos.services import OwnPostgres
from tests.support import services

SETTINGS = ("autovacuum", "autovacuum_naptime", "shared_buffers", "synchronous_commit", "fsync", "max_connections")


def use_own_postgres(run: Run) -> dict[str, Any]:
    """Start a server of this run's own and make it the one every section's databases are made on."""
    server = OwnPostgres()

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
