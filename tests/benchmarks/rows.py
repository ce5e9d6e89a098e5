"""Rows in toolrelay's tables, read and written in plain SQL: the one module of the benchmark that
knows their columns (they may change; everything else drives toolrelay over its CLI and HTTP API).

* :func:`generate_receipts` writes terminal receipts with ``INSERT ... SELECT generate_series`` in
  chunks: ids in the project's ``rcpt_`` + lower-case ULID format, increasing with creation time,
  several tenants (unevenly busy), several tools, traces of four calls of one tenant, mostly
  successes with some failures and cancellations, idempotency keys and call ids on some (no
  ``receipt_events``: reading or accepting a receipt does not touch the timelines of others);
* :func:`sample_receipts` picks random existing receipts for the reads;
* :func:`open_receipts`, :func:`finished_at` follow receipts a worker settles (the worker-alone drain);
* :func:`queue_webhook_messages` and its companions fill and read the webhook outbox.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

OPEN_STATUSES = ("pending", "running", "waiting")
ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford's base32, as ULIDs use it (lower case here)
MASK_40 = (1 << 40) - 1

# (name, kind, effect, idempotent, max_attempts, weight): what a tenant's agents tend to call.
TOOLS = (
    ("echo", "python", "read", True, 3, 6),
    ("search_docs", "python", "read", True, 3, 4),
    ("get_order", "api_call", "read", True, 3, 3),
    ("send_email", "integration", "write", False, 1, 2),
    ("create_ticket", "api_call", "write", True, 3, 1),
)


def psycopg_url(url: str) -> str:
    """A libpq URL from the SQLAlchemy one the deployment hands to toolrelay."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@contextmanager
def connect(url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(psycopg_url(url), autocommit=True, connect_timeout=10) as conn:
        yield conn


def _base32(column: str, chars: int) -> str:
    """SQL for ``column`` (a non-negative bigint) as ``chars`` base32 digits, most significant first."""
    return " || ".join(f"substr('{ALPHABET}', (({column} >> {5 * (chars - 1 - k)}) & 31)::int + 1, 1)"
                       for k in range(chars))


def _ulid(ms: str, high: str, low: str) -> str:
    """SQL for a ULID: 48 bits of milliseconds (10 digits), then 80 random bits (two 40-bit halves)."""
    return f"{_base32(ms, 10)} || {_base32(high, 8)} || {_base32(low, 8)}"


def _weighted(values: list[Any], weights: list[int]) -> list[Any]:
    return [value for value, weight in zip(values, weights, strict=True) for _ in range(weight)]


_GENERATE = f"""
INSERT INTO receipts (id, tenant_id, trace_id, call_id, parent_id, tool, kind, status, input, output, error,
                      attempt, max_attempts, idempotency_key, request_hash, metadata, webhook_url, effect,
                      idempotent, timeout_s, queue, created_at, updated_at, started_at, finished_at, deadline_at,
                      available_at, published_at, lease_expires_at)
SELECT 'rcpt_' || {_ulid('g.ms', 'g.r1', 'g.r2')},
       g.tenant,
       'trace_' || {_ulid('g.trace_ms', 'g.t1', 'g.t2')},
       CASE WHEN g.h % 2 = 0 THEN 'call_' || substr(md5(g.i::text), 1, 24) END,
       NULL,
       (%(tools)s::text[])[1 + g.k],
       (%(kinds)s::text[])[1 + g.k],
       g.status,
       g.input,
       CASE WHEN g.status = 'success' THEN g.input END,
       CASE g.status
         WHEN 'failed' THEN '{{"code": "tool_error", "message": "upstream answered 500 Internal Server Error",
                              "retryable": false, "retry_after_ms": null, "details": {{}}}}'::jsonb
         WHEN 'canceled' THEN '{{"code": "canceled", "message": "canceled by the caller", "retryable": false,
                                "retry_after_ms": null, "details": {{}}}}'::jsonb
       END,
       CASE g.status WHEN 'canceled' THEN 0 WHEN 'failed' THEN 1 + g.h % (%(max_attempts)s::int[])[1 + g.k]
            ELSE 1 END,
       (%(max_attempts)s::int[])[1 + g.k],
       CASE WHEN g.h % 5 = 1 THEN 'order-' || lpad(to_hex(g.i), 12, '0') END,
       CASE WHEN g.h % 5 = 1 THEN encode(sha256(int8send(g.i)), 'hex') END,
       CASE WHEN g.h % 3 = 0 THEN jsonb_build_object('agent', 'support-bot', 'step', g.i % 4) ELSE '{{}}' END,
       NULL,
       (%(effects)s::text[])[1 + g.k],
       (%(idempotent)s::bool[])[1 + g.k],
       30.0,
       'tools',
       g.created,
       g.created + g.run_time + interval '2 ms',
       CASE WHEN g.status <> 'canceled' THEN g.created + interval '2 ms' END,
       g.created + g.run_time + interval '2 ms',
       g.created + interval '30 s',
       g.created,
       g.created,
       NULL
FROM (
    SELECT s.i, s.ms, s.trace_ms, s.h, s.created, s.k, s.tenant,
           hashint8extended(s.i, 1) & {MASK_40} AS r1, hashint8extended(s.i, 2) & {MASK_40} AS r2,
           hashint8extended(s.i / 4, 3) & {MASK_40} AS t1, hashint8extended(s.i / 4, 4) & {MASK_40} AS t2,
           CASE WHEN s.h % 100 < 90 THEN 'success' WHEN s.h % 100 < 98 THEN 'failed' ELSE 'canceled' END AS status,
           jsonb_build_object('i', s.i, 'query', 'order ' || (s.i % 100000)) AS input,
           make_interval(secs => (3 + s.h % 40) / 1000.0) AS run_time
    FROM (
        SELECT i, %(start_ms)s::bigint + i * %(step_ms)s::bigint AS ms,
               %(start_ms)s::bigint + (i / 4) * 4 * %(step_ms)s::bigint AS trace_ms,
               hashint8extended(i, 0) & 2147483647 AS h,
               (%(tenants)s::text[])[1 + (hashint8extended(i / 4, 6) & 2147483647) % cardinality(%(tenants)s::text[])]
                   AS tenant,
               to_timestamp((%(start_ms)s::bigint + i * %(step_ms)s::bigint) / 1000.0) AS created,
               (%(tool_slots)s::int[])[1 + (hashint8extended(i, 5) & 2147483647) % cardinality(%(tool_slots)s::int[])]
                   AS k
        FROM generate_series(%(low)s::bigint, %(high)s::bigint - 1) AS i
    ) AS s
) AS g
""".replace(" % ", " %% ")  # modulo, not a placeholder


def generate_receipts(url: str, count: int, tenant_ids: list[str], *, chunk: int = 250_000,
                      progress: Callable[[int], None] | None = None) -> dict[str, float]:
    """Insert ``count`` terminal receipts for ``tenant_ids``, then ANALYZE and CHECKPOINT; how long each
    step took. The checkpoint writes the generated rows out of the shared buffers now, not while the
    measurements run (a database that grew to this size over weeks wrote them as it went).

    The creation times run from about 30 days ago (more if needed for one row per millisecond) to an
    hour ago, so the ids increase row by row, as the gateway's do, and sort before any made live.
    Tenants get a halving share each (the first half the rows, the next a quarter, ...).
    """
    step_ms = 1 if count > 30 * 86_400_000 else max(1, 30 * 86_400_000 // max(count, 1))
    start_ms = int(time.time() * 1000) - 3_600_000 - count * step_ms
    slots = _weighted(tenant_ids, [max(1, 2 ** (len(tenant_ids) - 1 - n)) for n in range(len(tenant_ids))])
    params: dict[str, Any] = {
        "tenants": slots, "tools": [t[0] for t in TOOLS], "kinds": [t[1] for t in TOOLS],
        "effects": [t[2] for t in TOOLS], "idempotent": [t[3] for t in TOOLS], "max_attempts": [t[4] for t in TOOLS],
        "tool_slots": _weighted(list(range(len(TOOLS))), [t[5] for t in TOOLS]),
        "start_ms": start_ms, "step_ms": step_ms,
    }
    started = time.monotonic()
    with connect(url) as conn:
        for low in range(0, count, chunk):
            with conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = off")  # the data is thrown away afterwards
                conn.execute(_GENERATE, {**params, "low": low, "high": min(count, low + chunk)})
            if progress is not None:
                progress(min(count, low + chunk))
        generated = time.monotonic()
        conn.execute("ANALYZE receipts")
        analyzed = time.monotonic()
        conn.execute("CHECKPOINT")
        checkpointed = time.monotonic()
        size = conn.execute("SELECT pg_total_relation_size('receipts')").fetchone()
    return {"rows": count, "generate_s": round(generated - started, 1), "analyze_s": round(analyzed - generated, 1),
            "checkpoint_s": round(checkpointed - analyzed, 1),
            "rows_per_s": round(count / max(generated - started, 1e-9)),
            "table_and_indexes_mb": round((size[0] if size else 0) / 2**20)}


def sample_receipts(url: str, count: int, total: int, seed: int = 7) -> list[tuple[str, str]]:
    """About ``count`` random existing receipts, ``(id, tenant_id)``, in random order.

    ``TABLESAMPLE BERNOULLI`` keeps each row with the same probability, so the sample is spread over
    the whole table (a ``LIMIT`` on it would favour the first pages).
    """
    percent = min(100.0, count / max(total, 1) * 100 * 1.2)
    with connect(url) as conn:
        rows = conn.execute(f"SELECT id, tenant_id FROM receipts TABLESAMPLE BERNOULLI ({percent:.6f}) "
                            f"REPEATABLE ({seed})").fetchall()
    picked = [(str(r[0]), str(r[1])) for r in rows]
    random.Random(seed).shuffle(picked)
    return picked[:count]


def tenant_ids(url: str) -> dict[str, str]:
    """Tenant name -> id."""
    with connect(url) as conn:
        return {str(name): str(tid) for tid, name in conn.execute("SELECT id, name FROM tenants")}


def receipt_count(url: str) -> int:
    with connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM receipts").fetchone()
    return int(row[0]) if row else 0


def open_receipts(url: str) -> int:
    """How many receipts are not terminal yet (pending, running or waiting)."""
    with connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM receipts WHERE status = ANY(%s)", [list(OPEN_STATUSES)]).fetchone()
    return int(row[0]) if row else 0


def finished_at(url: str, ids: list[str]) -> dict[str, tuple[str, float]]:
    """Receipt id -> (status, finished_at as epoch seconds, NaN while open)."""
    found: dict[str, tuple[str, float]] = {}
    with connect(url) as conn:
        for start in range(0, len(ids), 5000):
            for rid, status, finished in conn.execute(
                    "SELECT id, status, extract(epoch FROM finished_at) FROM receipts WHERE id = ANY(%s)",
                    [ids[start:start + 5000]]):
                found[str(rid)] = (str(status), float(finished) if finished is not None else float("nan"))
    return found


def backend_pids(url: str) -> list[int]:
    """The PostgreSQL server processes serving this database's other connections."""
    with connect(url) as conn:
        return [int(pid) for (pid,) in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")]


# -- the webhook outbox ------------------------------------------------------------------------------

def endpoint_tenant(url: str, endpoint_id: str) -> str:
    with connect(url) as conn:
        row = conn.execute("SELECT tenant_id FROM webhook_endpoints WHERE id = %s", [endpoint_id]).fetchone()
    if row is None:
        raise RuntimeError(f"webhook endpoint {endpoint_id} not found")
    return str(row[0])


def queue_webhook_messages(url: str, batch: str, count: int, *, tenant_id: str, endpoint_id: str, event_type: str,
                           receipt_id: str, payload: dict[str, Any]) -> None:
    """``count`` pending outbox messages for one endpoint, due now, ids ``msg_<batch>_<n>``."""
    with connect(url) as conn:
        conn.execute(
            "INSERT INTO webhook_messages (id, tenant_id, endpoint_id, url, event_type, receipt_id, payload, status, "
            "attempts, next_attempt_at, locked_until, created_at, updated_at) "
            "SELECT 'msg_' || %(batch)s || '_' || n, %(tenant)s, %(endpoint)s, NULL, %(event)s, %(receipt)s, "
            "%(payload)s, 'pending', 0, now(), NULL, now(), now() FROM generate_series(1, %(count)s) AS n",
            {"batch": batch, "tenant": tenant_id, "endpoint": endpoint_id, "event": event_type,
             "receipt": receipt_id, "payload": Jsonb(payload), "count": count})


def webhook_messages(url: str, status: str) -> int:
    with connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM webhook_messages WHERE status = %s", [status]).fetchone()
    return int(row[0]) if row else 0


def webhook_attempts(url: str) -> int:
    with connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM webhook_attempts").fetchone()
    return int(row[0]) if row else 0


def last_delivered_at(url: str) -> float:
    """When the last message was delivered (epoch seconds)."""
    with connect(url) as conn:
        row = conn.execute("SELECT extract(epoch FROM max(updated_at)) FROM webhook_messages "
                           "WHERE status = 'delivered'").fetchone()
    return float(row[0]) if row and row[0] is not None else float("nan")
