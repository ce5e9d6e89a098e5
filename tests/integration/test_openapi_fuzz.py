"""schemathesis against the gateway's own ``/openapi.json``, on a real gateway process.

Every operation of the document gets generated requests, valid and invalid ones, with a valid key:
none may answer 5xx, every answer must match the document (status, headers, content type, body),
and an error must be a problem document. Then the same operations without a key and with an
unknown one: 401 problem+json wherever a key is required.

A short run for CI: a fixed set of examples per operation (``derandomize``: the same every run), long
polls capped (``TOOLRELAY_LONG_POLL_MAX_S``) and no worker, so calls stay pending and cost nothing.
The catalogue is what a worker would publish: a few tools and the built-in integration providers.

schemathesis's pytest plugin loads a schema from a fixture lazily, which pytest 9.2 no longer
supports; the document is built here from the app (``create_app`` connects to nothing), and the
first test checks that the gateway serves that very document.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case, checks
from schemathesis.config import SchemathesisConfig

from gateway.app import create_app
from receipts.catalogue import tools as catalogue
from receipts.catalogue.setups import IntegrationSetups
from receipts.records import ToolSpec
from receipts.secretbox import SecretBox
from receipts.settings import Settings
from tests.support.stack import Stack, running_stack
from workers.integrations import builtin_providers
from workers.kinds.integration import IntegrationKind

pytestmark = pytest.mark.integration

PROBLEM = "application/problem+json"
OPEN = {"/healthz", "/readyz", "/metrics"}  # the routes that answer without a key
TOOLS = [
    ToolSpec(name="echo", kind="python", description="Return the arguments.",
             parameters={"type": "object", "additionalProperties": True}, effect="read", timeout_s=5),
    ToolSpec(name="add", kind="python", description="Add two integers.", effect="read",
             parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                         "required": ["a", "b"], "additionalProperties": False}),
]
EXAMPLES = 25
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
# Requests the document allows are still refused for what it cannot say: an unknown tool, receipt or
# endpoint (422, 404), a state that forbids the change (409). Those are answers, not failures.
EXCLUDED = [checks.positive_data_acceptance]


@dataclass
class Fuzzed:
    stack: Stack
    session: requests.Session

    @property
    def base_url(self) -> str:
        return self.stack.base_url

    def auth(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.stack.api_key}"}


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    tmp: Path = tmp_path_factory.mktemp("openapi-fuzz")
    with running_stack(tmp, workers=0, beat=False, long_poll_max_s=0.1, outbound_allow_cidrs="127.0.0.0/8") as stack:
        stack.db.run(catalogue.publish(TOOLS))
        IntegrationKind(stack.db, IntegrationSetups(lambda: SecretBox("test-secret-key")), builtin_providers(),
                        stack.settings).publish()
        with requests.Session() as session:
            yield Fuzzed(stack, session)
            gateway = stack.processes[0]
            assert "unhandled error" not in gateway.log(), gateway.log()[-6000:]


def document() -> dict[str, Any]:
    """The gateway's OpenAPI document, as ``/openapi.json`` serves it."""
    return create_app(Settings(database_url="postgresql://fuzz@127.0.0.1/fuzz")).openapi()


# A body over TOOLRELAY_MAX_BODY_BYTES is refused at the door (413), whatever it holds.
CONFIG = SchemathesisConfig.from_dict({"checks": {"negative_data_rejection": {"expected-statuses": [
    "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]}}})
API = schemathesis.openapi.from_dict(document(), config=CONFIG)


def header(response: Any, name: str) -> str:
    """The first value of a header of a schemathesis response (its headers map names to lists)."""
    return str((response.headers.get(name) or [""])[0])


def problem_errors(ctx: Any, response: Any, case: Case) -> bool:
    """Every 4xx is a problem document whose ``status`` is the response's."""
    if 400 <= response.status_code < 500:
        assert header(response, "content-type").startswith(PROBLEM), response.headers
        body = response.json()
        assert body["status"] == response.status_code and body["title"] and body["detail"], body
    return True


def test_the_fuzzed_document_is_the_one_the_gateway_serves(fuzzed: Fuzzed) -> None:
    served = fuzzed.session.get(f"{fuzzed.base_url}/openapi.json")
    assert served.status_code == 200
    assert served.json() == document()


@API.parametrize()
@SETTINGS
def test_every_operation_answers_generated_requests_as_its_document_says(case: Case, fuzzed: Fuzzed) -> None:
    case.call_and_validate(base_url=fuzzed.base_url, session=fuzzed.session, headers=fuzzed.auth(),
                           excluded_checks=EXCLUDED, additional_checks=[problem_errors])


@API.parametrize()
@SETTINGS
def test_without_a_valid_key_every_operation_is_a_401(case: Case, fuzzed: Fuzzed) -> None:
    if case.method.upper() != case.operation.method.upper():
        return  # another method on the path (the unsupported-method probes): a 405 before anything
    # Plain path parameters, so that the request reaches the operation's route whatever was generated.
    case.path_parameters = {name: "x" for name in case.path_parameters or {}}
    for headers in ({}, fuzzed.auth("trk_not_a_key"), {"Authorization": f"Basic {fuzzed.stack.api_key}"}):
        response = case.call(base_url=fuzzed.base_url, session=fuzzed.session, headers=headers)
        if case.path in OPEN:
            assert response.status_code != 401
            continue
        assert response.status_code == 401, (case.method, case.path, response.text)
        assert header(response, "content-type").startswith(PROBLEM)
        assert header(response, "www-authenticate").startswith("Bearer")
