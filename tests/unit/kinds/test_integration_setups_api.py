"""PUT/GET/DELETE /v1/integrations/{provider}/setup: stored encrypted, shown only as field names."""

from __future__ import annotations

from receipts.catalogue.setups import IntegrationSetups
from receipts.secretbox import SecretBox
from tests.support import sql
from tests.unit.kinds.conftest import SECRET, Gateway, assert_problem

SMTP = {"host": "smtp.example.com", "port": 587, "security": "starttls", "username": "ann",
        "password": "hunter2-very-secret", "from_address": "ann@example.com"}


def test_setup_is_encrypted_at_rest_and_never_shown(gateway: Gateway) -> None:
    response = gateway.put("/v1/integrations/email/setup", SMTP)
    assert response.status_code == 200, response.text
    assert response.json()["fields_set"] == sorted(SMTP)
    assert "hunter2" not in response.text
    shown = gateway.get("/v1/integrations/email/setup")
    assert shown.json()["fields_set"] == sorted(SMTP) and "hunter2" not in shown.text
    [(stored,)] = sql.rows(gateway.db, "SELECT config FROM integration_setups")
    assert "hunter2" not in stored and "smtp.example.com" not in stored
    assert gateway.db.run(IntegrationSetups(SecretBox(SECRET)).get(gateway.tenant_id, "email")) == SMTP
    listing = {p["provider"]: p for p in gateway.get("/v1/integrations").json()["data"]}
    assert listing["email"]["configured"] is True and listing["wikipedia"]["configured"] is False
    assert listing["email"]["secret_fields"] == ["password"]
    assert {m["method"] for m in listing["mcp"]["methods"]} == {"list_tools", "call_tool"}
    assert "hunter2" not in gateway.get("/v1/integrations").text


def test_invalid_setups_are_refused_and_nothing_is_stored(gateway: Gateway) -> None:
    assert_problem(gateway.put("/v1/integrations/email/setup", {**SMTP, "port": "587"}), 422, "setup.port")
    assert_problem(gateway.put("/v1/integrations/email/setup", {**SMTP, "security": "tls13"}), 422, "setup.security")
    assert_problem(gateway.put("/v1/integrations/email/setup", {**SMTP, "colour": "red"}), 422, "setup")
    assert_problem(gateway.put("/v1/integrations/email/setup", ["not", "an", "object"]), 422)
    assert_problem(gateway.put("/v1/integrations/fax/setup", {"number": "1"}), 404)
    assert_problem(gateway.get("/v1/integrations/email/setup"), 404)


def test_partial_setup_is_accepted_required_fields_are_checked_when_a_call_runs(gateway: Gateway) -> None:
    response = gateway.put("/v1/integrations/mcp/setup", {"headers": {"Authorization": "Bearer t"}})
    assert response.status_code == 200 and response.json()["fields_set"] == ["headers"]


def test_setups_are_per_tenant_and_can_be_deleted(gateway: Gateway) -> None:
    gateway.put("/v1/integrations/email/setup", SMTP)
    assert_problem(gateway.get("/v1/integrations/email/setup", key=gateway.other_key), 404)
    assert_problem(gateway.delete("/v1/integrations/email/setup", key=gateway.other_key), 404)
    assert gateway.delete("/v1/integrations/email/setup").status_code == 204
    assert_problem(gateway.get("/v1/integrations/email/setup"), 404)
    assert_problem(gateway.delete("/v1/integrations/email/setup"), 404)


def test_a_setup_encrypted_with_another_key_is_reported_not_leaked(gateway: Gateway) -> None:
    gateway.db.run(IntegrationSetups(SecretBox("an-old-key")).put(gateway.tenant_id, "email", SMTP))
    body = assert_problem(gateway.get("/v1/integrations/email/setup"), 409)
    assert "TOOLRELAY_SECRET_KEY" in body["detail"]
