"""The SQL of receipt transitions and reads. Each transition is ONE statement: one round trip, atomic.

A transition is three writes that must commit together: the conditional UPDATE (or the INSERT of a
new receipt), its line in ``receipt_events`` and the webhook outbox rows announcing it. They are
data-modifying CTEs of a single statement, which PostgreSQL applies atomically on its own, so no
BEGIN/COMMIT round trips are needed and nothing is weakened: the compare-and-set and the attempt
fence stay in the UPDATE's WHERE clause, and the timeline and outbox rows are written from the
UPDATE's RETURNING, so they exist exactly when the transition happened.

Time is the database's: every timestamp written or compared here is ``now()`` (the statement's
start, in autocommit), never a host's clock, so a host whose clock is wrong cannot claim too early,
keep a lease too long or have a live attempt reclaimed under it.

The webhook payload is rendered inside the statement from :data:`receipts.records.API_FIELDS`, the
same list ``Receipt.to_api()`` uses, so the two renderings cannot drift apart.
"""

from __future__ import annotations

from receipts import states
from receipts.records import API_FIELDS, PG_ISO_FORMAT, RECEIPT_COLUMNS

COLUMNS = ", ".join(RECEIPT_COLUMNS)
NOW_ISO = f"to_char(now() AT TIME ZONE 'UTC', '{PG_ISO_FORMAT}')"


def _in(statuses: frozenset[str] | set[str]) -> str:
    """A SQL list of status literals (from the state machine, never from input)."""
    return "(" + ", ".join(f"'{status}'" for status in sorted(statuses)) + ")"


def api_json(alias: str, *, builder: str = "jsonb_build_object") -> str:
    """The receipt's API shape as a SQL expression over the row ``alias`` (see ``Receipt.to_api``)."""
    fields = []
    for name, is_time in API_FIELDS:
        value = f"to_char({alias}.{name} AT TIME ZONE 'UTC', '{PG_ISO_FORMAT}')" if is_time else f"{alias}.{name}"
        fields.append(f"'{name}', {value}")
    return f"{builder}({', '.join(fields)})"


TIMELINE = """
ev AS (
    INSERT INTO receipt_events (receipt_id, at, from_status, to_status, attempt, actor, detail)
    SELECT r.id, now(), r.before_status, r.status, r.attempt, %(actor)s, {detail} FROM r
)"""

# The webhook event a receipt's new status announces (states.EVENT_TYPES; NULL for pending): a call
# waiting for a person's decision announces that it asks for one.
EVENT_TYPE = (f"CASE WHEN r.status = 'waiting' AND r.approval IS NOT NULL THEN '{states.APPROVAL_REQUESTED}' "
              "ELSE CASE r.status " + " ".join(f"WHEN '{status}' THEN '{event}'" for status, event in
                                               sorted(states.EVENT_TYPES.items())) + " END END")


def subscribers(tenant: str, event: str, url: str) -> str:
    """Rows (endpoint_id, url) of who receives ``event`` of ``tenant``: every enabled endpoint of the
    tenant subscribed to it, and the call's own ``url`` (SQL expressions, over the row being announced)."""
    return f"""(
        SELECT e.id AS endpoint_id, NULL::text AS url FROM webhook_endpoints e
        WHERE e.tenant_id = {tenant} AND e.enabled
          AND (e.event_types = '' OR e.event_types LIKE '%%,' || {event} || ',%%')
        UNION ALL
        SELECT NULL, {url} WHERE {url} IS NOT NULL
    )"""


MESSAGE_COLUMNS = ("id, tenant_id, endpoint_id, url, event_type, receipt_id, payload, status, attempts, "
                   "next_attempt_at, created_at, updated_at")
NEW_MESSAGE_ID = "'msg_' || replace(gen_random_uuid()::text, '-', '')"

OUTBOX = f"""
m AS (
    INSERT INTO webhook_messages ({MESSAGE_COLUMNS}, traceparent)
    SELECT {NEW_MESSAGE_ID}, r.tenant_id, t.endpoint_id, t.url, r.event_type, r.id,
           jsonb_build_object('type', r.event_type, 'timestamp', {NOW_ISO}, 'data', {api_json("r")}),
           'pending', 0, now(), now(), now(), r.traceparent
    FROM (SELECT r.*, {EVENT_TYPE} AS event_type FROM r) AS r
    CROSS JOIN LATERAL {subscribers("r.tenant_id", "r.event_type", "r.webhook_url")} AS t
    WHERE r.event_type IS NOT NULL
    RETURNING 1
)"""


def transition(row_statement: str, *, announce: bool, detail: str = "%(detail)s", first: str = "",
               source: str = "r", leading: str = "", returning: str = "r.*") -> str:
    """``row_statement`` (an INSERT or UPDATE ... RETURNING the receipt's columns and ``before_status``)
    with its timeline and outbox writes.

    The statement returns one row (what ``row_statement`` returns, then how many webhook messages it
    queued) when the transition happened, none when it did not. ``detail`` is the SQL of the timeline
    event's detail (by default the ``detail`` parameter; a sweep derives it from each row). ``first``
    is CTEs of the same statement that ``row_statement`` builds on (e.g. the batch it inserts into),
    ``source`` what the final SELECT reads ``r`` from (e.g. a join that keeps a row when ``r`` has none),
    ``leading`` columns of ``source`` that each row starts with (e.g. that batch's id), ``returning`` the
    columns of ``r`` it returns (by default all: a caller that needs only some reads less back).
    """
    ctes = [*([first] if first else []), f"r AS ({row_statement})", TIMELINE.format(detail=detail)]
    if announce:
        ctes.append(OUTBOX)
    queued = "(SELECT count(*) FROM m)" if announce else "0"
    columns = f"{leading}, {returning}" if leading else returning
    return "WITH " + ",".join(ctes) + f"\nSELECT {columns}, {queued} AS outbox_messages FROM {source}"


RETURNING = f"RETURNING {COLUMNS}"

# New calls, any number in one statement: ``%(rows)s`` is a JSON array of them, one object per call
# with the fields of NEW_CALL (read back with jsonb_to_recordset: one parameter, whatever the count).
# A deadline is the database's now() plus the call's timeout; pending calls are published at once
# (published_at); a call that starts terminal (a model's mistake in a batch) starts finished. A call
# whose (tenant, idempotency key) exists already is left out of RETURNING: the caller reads what
# that key made.
NEW_CALL = (
    ("id", "text"), ("tenant_id", "text"), ("trace_id", "text"), ("call_id", "text"), ("parent_id", "text"),
    ("tool", "text"), ("kind", "text"), ("status", "text"), ("input", "jsonb"), ("error", "jsonb"),
    ("max_attempts", "int"), ("idempotency_key", "text"), ("request_hash", "text"), ("metadata", "jsonb"),
    ("webhook_url", "text"), ("effect", "text"), ("idempotent", "bool"), ("timeout_s", "float8"),
    ("queue", "text"), ("deadline_s", "float8"), ("batch_id", "text"), ("approval_timeout_s", "float8"),
    ("traceparent", "text"), ("secret_input", "text"),
)
# A call that needs a person's approval waits for it until its approval times out (its deadline_at
# meanwhile); once approved, its own deadline runs from then (deadline_s).
_APPROVAL = f"""CASE WHEN u.approval_timeout_s IS NOT NULL THEN jsonb_build_object(
           'state', 'requested', 'requested_at', {NOW_ISO},
           'expires_at', to_char((now() + make_interval(secs => u.approval_timeout_s)) AT TIME ZONE 'UTC',
                                 '{PG_ISO_FORMAT}')) END"""


def insert(where: str = "") -> str:
    """The INSERT of new calls (``where``: a condition on their row ``u``, e.g. that their batch is new)."""
    return f"""
INSERT INTO receipts ({COLUMNS}, secret_input)
SELECT u.id, u.tenant_id, u.trace_id, u.call_id, u.parent_id, u.tool, u.kind, u.status, u.input, NULL, u.error, 0,
       u.max_attempts, u.idempotency_key, u.request_hash, u.metadata, u.webhook_url, u.effect, u.idempotent,
       u.timeout_s, u.queue, now(), now(), NULL, CASE WHEN u.status IN {_in(states.TERMINAL)} THEN now() END,
       now() + make_interval(secs => coalesce(u.approval_timeout_s, u.deadline_s)), now(),
       CASE WHEN u.status = 'pending' THEN now() END, NULL, u.batch_id, {_APPROVAL}, u.deadline_s, u.traceparent,
       u.secret_input
FROM jsonb_to_recordset(%(rows)s) AS u({", ".join(f"{name} {kind}" for name, kind in NEW_CALL)})
{where}
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
{RETURNING}, NULL::text AS before_status"""


INSERT = insert()

# The guards after ``id = %(id)s`` are wrapped in ``(...) IS TRUE`` (the same test: NULL fails either
# way) so that they cannot match a partial index on open receipts. Written plainly, a claim's
# ``status = 'pending' AND deadline_at > now()`` lets the planner walk every open receipt's deadline
# and filter on the id, which it does without fresh statistics: each claim then cost as much as the
# backlog was long. This way the primary key is the only path to the row.
#
# A claim also returns how long the call has left (the deadline minus the database's now()), so the
# worker sizes the attempt's timeout without reading its own clock, and the call's encrypted secret
# arguments (no other statement reads them).
#
# The lease asked for is the tool's timeout plus a grace; the attempt gets at most the time left
# before the deadline, so the lease ends at the deadline plus that grace when that comes first. A
# lease of the whole timeout would keep a call whose worker died "running" for up to the timeout
# past its deadline, where nothing can happen any more but its end (the sweeper settles it).
CLAIM = f"""
UPDATE receipts SET status = 'running', updated_at = now(), attempt = attempt + 1,
       lease_expires_at = LEAST(now() + make_interval(secs => %(lease_s)s),
                                deadline_at + make_interval(secs => GREATEST(%(lease_s)s - timeout_s, 0))),
       started_at = now()
WHERE id = %(id)s
  AND (status = 'pending' AND available_at <= now() + interval '1 second' AND deadline_at > now()) IS TRUE
{RETURNING}, 'pending'::text AS before_status, secret_input,
          extract(epoch FROM deadline_at - now())::float8 AS time_left_s"""

FINISH = f"""
UPDATE receipts SET status = %(target)s, updated_at = now(), output = %(output)s, error = %(error)s,
       finished_at = now(), lease_expires_at = NULL
WHERE id = %(id)s AND (status = %(before)s AND attempt = %(attempt)s) IS TRUE
{RETURNING}, %(before)s::text AS before_status"""

RETRY = f"""
UPDATE receipts SET status = 'pending', updated_at = now(), error = %(error)s,
       available_at = now() + make_interval(secs => %(delay_s)s),
       published_at = CASE WHEN %(published)s THEN now() + make_interval(secs => %(delay_s)s) END,
       lease_expires_at = NULL
WHERE id = %(id)s AND (status = 'running' AND attempt = %(attempt)s) IS TRUE
{RETURNING}, 'running'::text AS before_status"""

# Cancel: whatever non-terminal state the receipt is in, read under a row lock so a concurrent
# claim or finish either commits first (and is seen) or waits for this one (and is fenced out).
CANCEL = f"""
WITH old AS (
    SELECT id, status FROM receipts WHERE id = %(id)s AND tenant_id = %(tenant_id)s FOR UPDATE
)
UPDATE receipts SET status = 'canceled', updated_at = now(), error = %(error)s, finished_at = now(),
       lease_expires_at = NULL
FROM old WHERE receipts.id = old.id AND old.status IN {_in(states.sources_of(states.CANCELED))}
RETURNING {", ".join(f"receipts.{c}" for c in RECEIPT_COLUMNS)}, old.status AS before_status"""

# Every open call of a batch (a run that was canceled or ran out of time takes its calls with it).
CANCEL_BATCH = f"""
WITH old AS (
    SELECT id, status FROM receipts
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status IN {_in(states.sources_of(states.CANCELED))}
    FOR UPDATE
)
UPDATE receipts SET status = 'canceled', updated_at = now(), error = %(error)s, finished_at = now(),
       lease_expires_at = NULL
FROM old WHERE receipts.id = old.id AND old.status IN {_in(states.sources_of(states.CANCELED))}
RETURNING {", ".join(f"receipts.{c}" for c in RECEIPT_COLUMNS)}, old.status AS before_status"""

# A client-run (function) tool's result: only while it waits and before its deadline.
COMPLETE_WAITING = f"""
UPDATE receipts SET status = %(target)s, updated_at = now(), output = %(output)s, error = %(error)s,
       finished_at = now()
WHERE id = %(id)s AND (tenant_id = %(tenant_id)s AND status = 'waiting' AND deadline_at > now()) IS TRUE
{RETURNING}, 'waiting'::text AS before_status"""

ERROR_DETAIL = "CASE WHEN r.error IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('error', r.error) END"
INSERT_SQL = transition(INSERT, announce=True, detail=ERROR_DETAIL)
CLAIM_SQL = transition(CLAIM, announce=True)
FINISH_SQL = transition(FINISH, announce=True)
RETRY_SQL = transition(RETRY, announce=False)
CANCEL_SQL = transition(CANCEL, announce=True)
CANCEL_BATCH_SQL = transition(CANCEL_BATCH, announce=True)
COMPLETE_WAITING_SQL = transition(COMPLETE_WAITING, announce=True)

# -- reads ----------------------------------------------------------------------------------------

# The attempt of a receipt that ``actor`` claimed last: the timeline's running event carries the actor
# of the claim, so a process that knows which worker process ran a task can fence by that attempt.
CLAIMED_BY = """
SELECT attempt FROM receipt_events
WHERE receipt_id = %(id)s AND to_status = 'running' AND actor = %(actor)s
ORDER BY id DESC LIMIT 1"""

GET_MANY = f"SELECT {COLUMNS} FROM receipts WHERE id = ANY(%(ids)s)"
REPLAY = f"""
SELECT {COLUMNS} FROM receipts
WHERE (tenant_id, idempotency_key) IN (SELECT * FROM unnest(%(tenant_ids)s::text[], %(keys)s::text[]))"""
# Every receipt has at least its creation in the timeline, so no row means no such receipt.
EVENTS = """
SELECT e.id, e.receipt_id, e.at, e.from_status, e.to_status, e.attempt, e.actor, e.detail
FROM receipt_events e JOIN receipts r ON r.id = e.receipt_id
WHERE r.id = %(id)s AND r.tenant_id = %(tenant_id)s
ORDER BY e.id"""
LIST_FILTERS = ("trace_id", "status", "tool", "parent_id")


def list_sql(filters: tuple[str, ...], *, after: bool, scoped: bool = False) -> str:
    """A tenant's receipts newest first, with equality ``filters`` (names of :data:`LIST_FILTERS`), and
    when ``scoped`` only those of the tools in the ``tools`` parameter (an API key's scope)."""
    conditions = ["tenant_id = %(tenant_id)s", *(f"{name} = %({name})s" for name in filters)]
    if scoped:
        conditions.append("tool = ANY(%(tools)s)")
    if after:
        conditions.append("id < %(before_id)s")
    return f"SELECT {COLUMNS} FROM receipts WHERE {' AND '.join(conditions)} ORDER BY id DESC LIMIT %(limit)s"
