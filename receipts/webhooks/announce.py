"""Announcing what is not a receipt transition (a batch completed, a run ended or waits) in the outbox.

The payload is built by the caller (it holds what the event reports: a batch's messages, a run's
steps) and written, in the caller's transaction, once for every endpoint of the tenant subscribed
to the event and once for the subject's own ``webhook_url``; the same statement notifies requests
long-polling the subject (``toolrelay_receipts``, payload ``<subject id>:<event>``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from receipts.db import Query, Steps
from receipts.records import iso
from receipts.store.statements import MESSAGE_COLUMNS, NEW_MESSAGE_ID, subscribers

ANNOUNCE = f"""
WITH m AS (
    INSERT INTO webhook_messages ({MESSAGE_COLUMNS})
    SELECT {NEW_MESSAGE_ID}, %(tenant_id)s, t.endpoint_id, t.url, %(event)s::text, %(subject)s, %(payload)s,
           'pending', 0, now(), now(), now()
    FROM {subscribers("%(tenant_id)s", "%(event)s::text", "%(webhook_url)s::text")} AS t
    RETURNING 1
)
SELECT (SELECT count(*) FROM m), pg_notify('toolrelay_receipts', %(subject)s || ':' || %(event)s::text)"""


def announce(*, tenant_id: str, event: str, subject: str, data: dict[str, Any], at: datetime | None,
             webhook_url: str | None) -> Steps[int]:
    """Queue ``event`` about ``subject`` (``data`` its API shape, ``at`` when it happened); how many messages."""
    payload = {"type": event, "timestamp": iso(at), "data": data}
    row = yield Query(ANNOUNCE, {"tenant_id": tenant_id, "event": event, "subject": subject,
                                 "payload": Jsonb(payload), "webhook_url": webhook_url})
    return int(row[0])
