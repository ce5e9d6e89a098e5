"""The hot transitions on PostgreSQL, each as ONE statement sent in autocommit: one round trip.

A receipt transition is three writes that must commit together: the conditional UPDATE (or the
INSERT of a new receipt), its line in ``receipt_events`` and the webhook outbox rows announcing it.
On PostgreSQL they are data-modifying CTEs of a single statement, which is atomic on its own, so no
BEGIN/COMMIT round trips are needed and nothing is weakened: the compare-and-set and the attempt
fence stay in the UPDATE's WHERE clause, and the timeline and outbox rows are written from the
UPDATE's RETURNING, so they exist exactly when the transition happened.

The webhook payload is rendered inside the statement from :data:`receipts.records.API_FIELDS`, the
same list ``Receipt.to_api()`` uses, so the two renderings cannot drift apart.

The generic SQLAlchemy path in ``store.py`` is the reference (and what SQLite runs); the tests run
every store operation on both backends.
"""

from __future__ import annotations

from receipts.records import API_FIELDS, PG_ISO_FORMAT
from receipts.tables import receipts

COLUMNS = [column.name for column in receipts.columns]
RETURNING = f"RETURNING {', '.join(COLUMNS)}"
# What every statement of this module returns, in order: the receipt's columns, then how many
# webhook messages the transition queued.
ROW = (*COLUMNS, "outbox_messages")


def _api_json(alias: str) -> str:
    fields = []
    for name, is_time in API_FIELDS:
        value = f"to_char({alias}.{name} AT TIME ZONE 'UTC', '{PG_ISO_FORMAT}')" if is_time else f"{alias}.{name}"
        fields.append(f"'{name}', {value}")
    return f"jsonb_build_object({', '.join(fields)})"


TIMELINE = """
ev AS (
    INSERT INTO receipt_events (receipt_id, at, from_status, to_status, attempt, actor, detail)
    SELECT r.id, %(now)s, %(before)s, r.status, r.attempt, %(actor)s, %(detail)s FROM r
)"""

OUTBOX = f"""
m AS (
    INSERT INTO webhook_messages (id, tenant_id, endpoint_id, url, event_type, receipt_id, payload, status,
                                  attempts, next_attempt_at, created_at, updated_at)
    SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), r.tenant_id, t.endpoint_id, t.url,
           %(event_type)s::text, r.id,
           jsonb_build_object('type', %(event_type)s::text, 'timestamp', %(timestamp)s::text,
                              'data', {_api_json("r")}),
           'pending', 0, %(now)s, %(now)s, %(now)s
    FROM r CROSS JOIN LATERAL (
        SELECT e.id AS endpoint_id, NULL::text AS url FROM webhook_endpoints e
        WHERE e.tenant_id = r.tenant_id AND e.enabled
          AND (e.event_types = '' OR e.event_types LIKE %(event_pattern)s)
        UNION ALL
        SELECT NULL, r.webhook_url WHERE r.webhook_url IS NOT NULL
    ) AS t
    RETURNING 1
)"""


def transition(row_statement: str, *, announce: bool) -> str:
    """``row_statement`` (an INSERT or UPDATE ... RETURNING the columns) with its timeline and outbox writes.

    The statement returns one row of :data:`ROW` when the transition happened, none when it did not.
    """
    ctes = [f"r AS ({row_statement})", TIMELINE]
    if announce:
        ctes.append(OUTBOX)
    queued = "(SELECT count(*) FROM m)" if announce else "0"
    return "WITH " + ",".join(ctes) + f"\nSELECT r.*, {queued} AS outbox_messages FROM r"


INSERT = (
    f"INSERT INTO receipts ({', '.join(COLUMNS)}) VALUES ({', '.join(f'%({c})s' for c in COLUMNS)})"
    f" ON CONFLICT (tenant_id, idempotency_key) DO NOTHING {RETURNING}"
)

# The guards after ``id = %(id)s`` are wrapped in ``(...) IS TRUE`` (the same test: NULL fails either way)
# so that they cannot match a partial index on open receipts. Written plainly, a claim's
# ``status = 'pending' AND deadline_at > now`` lets the planner walk every open receipt's deadline and
# filter on the id, which it does without fresh statistics: each claim then cost as much as the backlog
# was long. This way the primary key is the only path to the row.
CLAIM = f"""
UPDATE receipts SET status = 'running', updated_at = %(now)s, attempt = attempt + 1,
       lease_expires_at = %(lease_expires_at)s, started_at = %(now)s
WHERE id = %(id)s AND (status = 'pending' AND available_at <= %(due_by)s AND deadline_at > %(now)s) IS TRUE
{RETURNING}"""

FINISH = f"""
UPDATE receipts SET status = %(target)s, updated_at = %(now)s, output = %(output)s, error = %(error)s,
       finished_at = %(now)s, lease_expires_at = NULL
WHERE id = %(id)s AND (status = %(before)s AND attempt = %(attempt)s) IS TRUE
{RETURNING}"""

RETRY = f"""
UPDATE receipts SET status = 'pending', updated_at = %(now)s, error = %(error)s, available_at = %(available_at)s,
       published_at = %(published_at)s, lease_expires_at = NULL
WHERE id = %(id)s AND (status = 'running' AND attempt = %(attempt)s) IS TRUE
{RETURNING}"""

CREATE_PENDING = transition(INSERT, announce=False)
CREATE_ANNOUNCED = transition(INSERT, announce=True)
CLAIM_SQL = transition(CLAIM, announce=True)
FINISH_SQL = transition(FINISH, announce=True)
RETRY_SQL = transition(RETRY, announce=False)
