"""Approvals: a person's yes or no to a call of a tool that requires one, before it runs.

Such a call starts ``waiting`` with ``approval = {"state": "requested", ...}`` until its approval
times out (its ``deadline_at`` meanwhile; the sweeper then ends it ``failed``/``expired``). Approving
moves it to ``pending`` and publishes it, with its own deadline counted from then; rejecting ends it
``failed`` with code ``rejected``. Each decision is one statement, conditional on the request still
being open, so deciding twice (or after the timeout) changes nothing and is a Conflict; who decided,
when and why is in ``approval`` and on the timeline (the event's actor is ``person:<by>``).
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from receipts.db import Announce, Query, Steps, operation
from receipts.errors import InvalidTransition
from receipts.records import PG_ISO_FORMAT, Receipt
from receipts.store import calls
from receipts.store.statements import RETURNING, transition

_OPEN = "status = 'waiting' AND approval->>'state' = 'requested' AND deadline_at > now()"
_DECISION = (f"jsonb_build_object('decided_at', to_char(now() AT TIME ZONE 'UTC', '{PG_ISO_FORMAT}'), "
             "'by', %(by)s::text)")

APPROVE = transition(f"""
UPDATE receipts SET status = 'pending', updated_at = now(), available_at = now(), published_at = now(),
       deadline_at = now() + make_interval(secs => coalesce(deadline_s, 3600)),
       approval = approval || {_DECISION} || jsonb_build_object('state', 'approved', 'comment', %(comment)s::text)
WHERE id = %(id)s AND (tenant_id = %(tenant_id)s AND {_OPEN}) IS TRUE
{RETURNING}, 'waiting'::text AS before_status""", announce=True,
    detail="jsonb_build_object('approval', r.approval)")

REJECT = transition(f"""
UPDATE receipts SET status = 'failed', updated_at = now(), finished_at = now(), error = %(error)s,
       approval = approval || {_DECISION} || jsonb_build_object('state', 'rejected', 'reason', %(reason)s::text)
WHERE id = %(id)s AND (tenant_id = %(tenant_id)s AND {_OPEN}) IS TRUE
{RETURNING}, 'waiting'::text AS before_status""", announce=True,
    detail="jsonb_build_object('approval', r.approval, 'error', r.error)")


def _decide(statement: str, tenant_id: str, receipt_id: str, by: str, extra: dict[str, Any]) -> Steps[Receipt]:
    row = yield Query(statement, {"id": receipt_id, "tenant_id": tenant_id, "by": by,
                                  "actor": f"person:{by}"[:200], **extra})
    if row is not None:
        receipt = Receipt.from_values(row)
        yield Announce(receipt, row[-1])
        return receipt
    current = yield from calls.get(tenant_id, receipt_id).steps  # NotFound for another tenant's
    approval = current.approval or {}
    if not approval:
        raise InvalidTransition("this call does not wait for an approval", status=current.status)
    if approval.get("state") == "requested":
        raise InvalidTransition("the approval timed out", status=current.status)
    raise InvalidTransition(f"the call was already {approval.get('state')} by {approval.get('by')}",
                            status=current.status)


@operation
def approve(tenant_id: str, receipt_id: str, *, by: str, comment: str | None = None) -> Steps[Receipt]:
    """waiting (approval requested) -> pending: the call runs now (publish it).

    Raises:
        NotFound: no such receipt for this tenant.
        InvalidTransition: no open approval request (decided already, timed out, or none).
    """
    return (yield from _decide(APPROVE, tenant_id, receipt_id, by, {"comment": comment}))


@operation
def reject(tenant_id: str, receipt_id: str, *, by: str, reason: str | None = None) -> Steps[Receipt]:
    """waiting (approval requested) -> failed with ``rejected``: the call never runs.

    Raises:
        NotFound: no such receipt for this tenant.
        InvalidTransition: no open approval request (decided already, timed out, or none).
    """
    message = f"rejected by {by}" + (f": {reason}" if reason else "")
    err = calls.error("rejected", message, details={"by": by, "reason": reason})
    return (yield from _decide(REJECT, tenant_id, receipt_id, by, {"reason": reason, "error": Jsonb(err)}))
