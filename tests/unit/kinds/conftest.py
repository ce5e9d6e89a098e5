"""Tool kinds on a test's PostgreSQL database: the real executor and kind runners, the real gateway app.

Nothing here is mocked but the broker: a recording sender stands in for Celery's ``send_task``.
Upstreams are real servers on loopback (tests/support), reached through the real SSRF guard with
127.0.0.0/8 allow-listed (tests that check the guard itself build a worker without the allow-list).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from gateway.app import create_app
from gateway.tool_definitions import IntegrationTool, ToolDefinition, ToolDefinitions
from receipts import tenants
from receipts.catalogue import providers
from receipts.catalogue import tools as catalogue
from receipts.catalogue.setups import IntegrationSetups, SetupSummary
from receipts.db import Database
from receipts.outbound.guard import OutboundGuard
from receipts.records import Receipt, ToolSpec
from receipts.secretbox import SecretBox
from receipts.settings import Settings
from receipts.store import calls
from receipts.store.calls import NewCall
from receipts.submission import initial_status
from tests.support.factories import RecordingSender
from workers import egress
from workers.backoff import Backoff
from workers.execution import Executor, KindRunner
from workers.integrations import builtin_providers
from workers.kinds.api_call import ApiCallKind
from workers.kinds.integration import IntegrationKind
from workers.kinds.system import SPECS, SystemKind
from workers.runner import Runner

SECRET = "unit-test-secret"
LOOPBACK = "127.0.0.0/8"


def make_settings(db: Database, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"database_url": db.url, "secret_key": SECRET, "outbound_allow_cidrs": [LOOPBACK],
                              "http_max_bytes": 64 * 1024, "outbound_timeout_s": 5.0}
    values.update(overrides)
    return Settings(**values)


class Worker:
    """A worker process's executor with the api_call, integration and system kinds, on one database."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self.sender = RecordingSender()
        self.setups = IntegrationSetups(lambda: SecretBox(settings.secret_key))
        guard_clients = egress.Clients(OutboundGuard(settings.outbound_allow_cidrs))
        self.integration = IntegrationKind(db, self.setups, builtin_providers(), settings)
        self.system = SystemKind(db, self.sender, settings)
        kinds: dict[str, KindRunner] = {"api_call": ApiCallKind(db, settings, guard_clients),
                                        "integration": self.integration, "system": self.system}
        self.executor = Executor(db, kinds, self.sender, backoff=Backoff(0.2, 2.0, 1.0, jitter=0.0),
                                 lease_grace_s=2.0, runner=Runner(), secret_key=settings.secret_key)
        self.integration.publish()
        self.system.publish()
        self.tenant = db.run(tenants.ensure("acme")).id
        self.other_tenant = db.run(tenants.ensure("intruders")).id

    def define(self, body: dict[str, Any], tenant_id: str | None = None) -> ToolSpec:
        """Define a tool as ``POST /v1/tools`` would (same validation), straight into the catalogue."""
        model = TypeAdapter(ToolDefinition).validate_python(body)
        method = None
        if isinstance(model, IntegrationTool):
            method = self.db.run(providers.find(model.provider, model.method))
        spec = ToolDefinitions(self.settings).build(tenant_id or self.tenant, model, method)
        self.db.run(catalogue.publish([spec]))
        return spec

    def put_setup(self, tenant_id: str, provider: str, config: dict[str, Any]) -> SetupSummary:
        """Store a tenant's setup of ``provider``, encrypted with this worker's key."""
        return self.db.run(self.setups.put(tenant_id, provider, config))

    def submit(self, tool: str, arguments: dict[str, Any] | None = None, *, tenant_id: str | None = None,
               deadline_s: float = 600, **options: Any) -> Receipt:
        tenant = tenant_id or self.tenant
        spec = self.db.run(catalogue.find(tenant, tool))
        receipt, _ = self.db.run(calls.create(NewCall(tenant_id=tenant, tool=spec, arguments=arguments or {},
                                                      deadline_s=deadline_s, **options), status=initial_status(spec)))
        return receipt

    def execute(self, receipt_id: str) -> Receipt:
        """Run one attempt now; returns the receipt as recorded."""
        current = self.db.run(calls.load(receipt_id))
        assert current is not None
        recorded = self.executor.execute(receipt_id, lease_s=current.timeout_s + 2)
        assert recorded is not None, "the receipt was not claimable"
        return recorded

    def run(self, tool: str, arguments: dict[str, Any] | None = None, **options: Any) -> Receipt:
        """Submit and run one attempt."""
        return self.execute(self.submit(tool, arguments, **options).id)


@pytest.fixture
def worker(db: Database) -> Worker:
    return Worker(db, make_settings(db))


@dataclass
class Gateway:
    client: TestClient
    db: Database
    sender: RecordingSender
    key: str
    other_key: str
    tenant_id: str

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}

    def post(self, path: str, body: Any, key: str | None = None) -> Any:
        return self.client.post(path, json=body, headers=self.headers(key))

    def put(self, path: str, body: Any, key: str | None = None) -> Any:
        return self.client.put(path, json=body, headers=self.headers(key))

    def get(self, path: str, key: str | None = None, **params: Any) -> Any:
        return self.client.get(path, headers=self.headers(key), params=params)

    def delete(self, path: str, key: str | None = None) -> Any:
        return self.client.delete(path, headers=self.headers(key))


@contextmanager
def running_gateway(db: Database, settings: Settings) -> Iterator[Gateway]:
    """The real app on ``db`` (its lifespan run: async pool, listener), with tenants ``acme`` and ``intruders``."""
    key, other_key = db.run(tenants.create_key("acme")), db.run(tenants.create_key("intruders"))
    tenant = db.run(tenants.for_key(key))
    assert tenant is not None
    sender = RecordingSender()
    with TestClient(create_app(settings, db=db, sender=sender)) as client:
        yield Gateway(client, db, sender, key, other_key, tenant.id)


@pytest.fixture
def gateway(db: Database) -> Iterator[Gateway]:
    """The real app, with the providers and system tools published as a worker would."""
    settings = make_settings(db, outbound_allow_cidrs=[])  # the SSRF guard as in production
    IntegrationKind(db, IntegrationSetups(lambda: SecretBox(SECRET)), builtin_providers(), settings).publish()
    db.run(catalogue.publish([*SPECS, ToolSpec(name="echo", kind="python", description="Echo.",
                                               parameters={"type": "object"}, effect="read")]))
    with running_gateway(db, settings) as running:
        yield running


def assert_problem(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    """An RFC 9457 problem with ``status`` (and, if given, an error naming ``field``)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["detail"]
    if field is not None:
        assert field in [err["field"] for err in body.get("errors") or []], body
    return body
