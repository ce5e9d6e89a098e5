"""Reading a tenant-defined tool's definition (request template, provider and method) at run time."""

from __future__ import annotations

from receipts.catalogue import tools as catalogue
from receipts.db import Database
from receipts.errors import NotFound
from receipts.records import Receipt, ToolSpec
from workers.errors import ToolNotFound


def definition_of(db: Database, receipt: Receipt) -> ToolSpec:
    """The catalogue entry a receipt was accepted for, looked up in its own tenant's catalogue.

    The effect contract (effect, idempotent, timeout) is frozen on the receipt at acceptance; the
    definition is read here, so a tool removed in between fails the call instead of running it.

    Raises:
        ToolNotFound: the tool is gone, or is now of another kind.
    """
    try:
        spec = db.run(catalogue.find(receipt.tenant_id, receipt.tool))
    except NotFound:
        raise ToolNotFound(f"the tool {receipt.tool!r} no longer exists") from None
    if spec.kind != receipt.kind:
        raise ToolNotFound(f"the tool {receipt.tool!r} was redefined as a {spec.kind} tool")
    return spec
