"""The tool kinds a worker runs besides ``python``: api_call, integration and system.

``function`` tools have no kind runner: their calls wait for the client's result and never reach a
worker. :func:`build_kinds` is the ``kinds`` factory handed to :func:`workers.celery_app.make_celery`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from receipts.catalogue.setups import IntegrationSetups
from receipts.outbound.guard import OutboundGuard
from receipts.secretbox import SecretBox
from workers import egress
from workers.execution import KindRunner
from workers.integrations import builtin_providers
from workers.kinds.api_call import ApiCallKind
from workers.kinds.integration import IntegrationKind
from workers.kinds.system import SystemKind

if TYPE_CHECKING:
    from workers.celery_app import WorkerServices


def build_kinds(services: WorkerServices) -> dict[str, KindRunner]:
    """The kind runners of one worker process. Cheap: no connection is opened until a call needs it."""
    settings, db = services.settings, services.db
    setups = IntegrationSetups(lambda: SecretBox(settings.secret_key))
    return {
        "api_call": ApiCallKind(db, settings, egress.Clients(OutboundGuard(settings.outbound_allow_cidrs))),
        "integration": IntegrationKind(db, setups, builtin_providers(), settings),
        "system": SystemKind(db, services.app, settings),
    }


__all__ = ["build_kinds"]
