"""Integration values: call arguments < tool definition < stored setup; missing or bad setup sends nothing."""

from __future__ import annotations

from typing import Any

from receipts.catalogue.setups import IntegrationSetups
from receipts.secretbox import SecretBox
from tests.support.smtp import smtp_server
from tests.unit.kinds.conftest import Worker
from workers.kinds.integration import merge

MAIL = {"to": "ann@example.com", "subject": "s", "text": "t"}


def enable_mail(worker: Worker, **arguments: Any) -> None:
    worker.define({"kind": "integration", "name": "mail", "provider": "email", "method": "send",
                   "arguments": arguments})


def test_merge_order_is_arguments_then_definition_then_setup() -> None:
    merged = merge({"a": "call", "b": "call", "c": "call"}, {"b": "definition", "c": "definition"}, {"c": "setup"})
    assert merged == {"a": "call", "b": "definition", "c": "setup"}


def test_the_stored_setup_wins_over_the_definition_which_wins_over_the_call(worker: Worker) -> None:
    with smtp_server() as server:
        worker.put_setup(worker.tenant, "email", {"host": "127.0.0.1", "port": server.port, "security": "none",
                                                  "from_address": "setup@example.com"})
        enable_mail(worker, from_address="definition@example.com", subject="fixed subject")
        # A caller who sneaks extra keys past the schema still cannot override the definition or setup.
        receipt = worker.run("mail", {**MAIL, "subject": "caller subject", "from_address": "caller@example.com",
                                      "host": "evil.example.com"})
        assert receipt.status == "success", receipt.error
        [(sender, _, message)] = server.mailbox.messages
        assert sender == "setup@example.com" and message["From"] == "setup@example.com"
        assert message["Subject"] == "fixed subject"


def test_a_definition_may_supply_a_setting_the_setup_lacks(worker: Worker) -> None:
    with smtp_server() as server:
        worker.put_setup(worker.tenant, "email", {"host": "127.0.0.1", "port": server.port, "security": "none"})
        enable_mail(worker, from_address="definition@example.com")
        receipt = worker.run("mail", MAIL)
        assert receipt.status == "success", receipt.error
        assert server.mailbox.messages[0][0] == "definition@example.com"


def test_missing_setup_fails_naming_the_field_and_sends_nothing(worker: Worker) -> None:
    with smtp_server() as server:
        enable_mail(worker)
        receipt = worker.run("mail", MAIL)
        assert receipt.status == "failed" and receipt.error["code"] == "invalid_arguments"
        assert receipt.error["details"]["field"] == "host"
        assert "'host'" in receipt.error["message"] and "/v1/integrations/email/setup" in receipt.error["message"]
        worker.put_setup(worker.tenant, "email", {"host": "127.0.0.1", "port": server.port, "security": "none"})
        partial = worker.run("mail", MAIL)
        assert partial.error["details"]["field"] == "from_address"
        assert server.mailbox.messages == []


def test_an_invalid_stored_setup_fails_naming_the_field_and_sends_nothing(worker: Worker) -> None:
    with smtp_server() as server:
        worker.put_setup(worker.tenant, "email", {"host": "127.0.0.1", "port": str(server.port),  # a string
                                                  "security": "none", "from_address": "a@example.com"})
        enable_mail(worker)
        receipt = worker.run("mail", MAIL)
        assert receipt.status == "failed" and receipt.error["code"] == "invalid_arguments"
        assert receipt.error["details"] == {"field": "port", "source": "stored setup", "provider": "email"}
        assert server.mailbox.messages == []


def test_a_setup_encrypted_with_another_key_fails_clearly(worker: Worker) -> None:
    worker.db.run(IntegrationSetups(SecretBox("an-old-key")).put(worker.tenant, "email", {"host": "127.0.0.1"}))
    enable_mail(worker)
    receipt = worker.run("mail", MAIL)
    assert receipt.status == "failed" and receipt.error["code"] == "invalid_arguments"
    assert "TOOLRELAY_SECRET_KEY" in receipt.error["message"]


def test_setups_are_per_tenant(worker: Worker) -> None:
    with smtp_server() as server:
        worker.put_setup(worker.tenant, "email", {"host": "127.0.0.1", "port": server.port, "security": "none",
                                                  "from_address": "a@example.com"})
        worker.define({"kind": "integration", "name": "mail", "provider": "email", "method": "send"},
                      tenant_id=worker.other_tenant)
        receipt = worker.run("mail", MAIL, tenant_id=worker.other_tenant)
        assert receipt.error["code"] == "invalid_arguments" and receipt.error["details"]["field"] == "host"
        assert server.mailbox.messages == []
