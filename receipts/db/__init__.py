"""PostgreSQL access: the pools and drivers (:mod:`.database`) and how operations are written (:mod:`.operations`)."""

from receipts.db.database import Database
from receipts.db.operations import Announce, Op, Query, Steps, just, operation, subop, transaction

__all__ = ["Announce", "Database", "Op", "Query", "Steps", "just", "operation", "subop", "transaction"]
