"""Tools a tenant defines over the API: ``function``, ``api_call`` and ``integration``.

``POST /v1/tools`` bodies are parsed here (pydantic at the edge) and turned into a catalogue entry
(:class:`~receipts.records.ToolSpec` owned by the tenant) after every check passes: the name, the
JSON Schema of the parameters, the request template and its URL (SSRF guard), the provider and
method, the fixed arguments. Any failure is a :class:`~gateway.problems.Problem` naming the field,
raised before anything is stored. An api_call's credential headers are encrypted here
(:mod:`receipts.outbound.sealed_headers`): 503 when ``TOOLRELAY_SECRET_KEY`` is not set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from gateway.problems import Problem
from receipts import patterns
from receipts.catalogue.providers import ProviderMethod
from receipts.catalogue.tools import TOOL_NAME
from receipts.errors import InvalidInput
from receipts.outbound import sealed_headers
from receipts.outbound import templates as request_templates
from receipts.outbound.guard import OutboundGuard
from receipts.records import ToolSpec
from receipts.secretbox import SecretKeyMissing
from receipts.settings import Settings

Effect = Literal["read", "write"]
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, description=f"Matches {TOOL_NAME.pattern}.")
    description: str = Field(default="", max_length=4000)
    effect: Effect | None = None
    idempotent: bool | None = None
    max_attempts: int | None = Field(default=None, ge=1, le=20)
    requires_approval: bool = Field(default=False, description="Each call waits for a person's approval first.")
    approval_timeout_s: float | None = Field(default=None, gt=0, le=31 * 24 * 3600,
                                             description="How long a call waits for a decision (default 24 h).")


class FunctionTool(_Common):
    """Run by the client (or a person): calls wait until the result is posted."""

    kind: Literal["function"]
    parameters: dict[str, Any] = Field(default_factory=lambda: dict(NO_PARAMETERS))
    timeout_s: float | None = Field(default=None, gt=0, description="How long a call waits for its result.")


class ApiCallTool(_Common):
    """An HTTP request, filled from the arguments (path segments, query, JSON body)."""

    kind: Literal["api_call"]
    parameters: dict[str, Any] = Field(default_factory=lambda: dict(NO_PARAMETERS))
    request: dict[str, Any]
    timeout_s: float | None = Field(default=None, gt=0, le=3600, description="Per attempt (default: request's + 5 s).")


class IntegrationTool(_Common):
    """A method of a built-in provider, with some arguments fixed by the definition."""

    kind: Literal["integration"]
    provider: str = Field(min_length=1, max_length=64)
    method: str = Field(min_length=1, max_length=64)
    arguments: dict[str, Any] = Field(default_factory=dict, description="Fixed values; callers cannot change them.")
    timeout_s: float | None = Field(default=None, gt=0, le=3600)


ToolDefinition = Annotated[FunctionTool | ApiCallTool | IntegrationTool, Field(discriminator="kind")]
KINDS = ("function", "api_call", "integration")
_ADAPTER: TypeAdapter[FunctionTool | ApiCallTool | IntegrationTool] = TypeAdapter(ToolDefinition)


def parse_definition(data: Any) -> FunctionTool | ApiCallTool | IntegrationTool:
    """The body of ``POST /v1/tools`` as a model; errors name the field (``timeout_s``, not ``function.timeout_s``).

    Raises:
        Problem: 422 with one ``{field, message}`` per error.
    """
    if not isinstance(data, dict):
        raise Problem.invalid("body", "must be a JSON object")
    if data.get("kind") not in KINDS:
        raise Problem.invalid("kind", f"one of {', '.join(KINDS)} (python and system tools come from workers)")
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        errors = [{"field": ".".join(str(part) for part in err["loc"][1:]) or "body", "message": err["msg"]}
                  for err in exc.errors()]
        raise Problem(422, f"invalid {data['kind']} tool definition", errors=errors) from None


def check_name(name: str) -> None:
    if not TOOL_NAME.match(name):
        raise Problem.invalid("name", f"must match {TOOL_NAME.pattern}")


def check_parameters(parameters: Mapping[str, Any]) -> None:
    """A valid JSON Schema (2020-12) describing an object, as OpenAI and Anthropic require."""
    try:
        patterns.check_schema(parameters)
    except SchemaError as exc:
        path = ".".join(["parameters", *map(str, exc.absolute_path)])
        if isinstance(exc.cause, patterns.UnsupportedPattern):
            raise Problem.invalid(path, str(exc.cause)) from None
        raise Problem.invalid(path, f"not a valid JSON Schema: {exc.message}") from None
    if parameters.get("type") != "object":
        raise Problem.invalid("parameters.type", 'must be "object": arguments are a JSON object')
    check_references(parameters)


# Keywords whose values are data, not schemas: a "$ref" inside them is a value like any other.
DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def check_references(parameters: Mapping[str, Any]) -> None:
    """Every ``$ref`` of the schema resolves inside it (``#/$defs/...``, an anchor, a nested ``$id``).

    A schema whose reference leads nowhere is still a valid schema, and would fail every call when
    its arguments are checked; nor is any schema fetched from elsewhere (a remote ``$ref``).
    """
    root = Registry().resolver_with_root(DRAFT202012.create_resource(parameters))
    stack: list[tuple[Any, Any, str]] = [(parameters, root, "parameters")]  # (node, its resolver, its field)
    while stack:
        node, resolver, path = stack.pop()
        if isinstance(node, Mapping):
            if isinstance(node.get("$id"), str) and path != "parameters":
                resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
            reference = node.get("$ref")
            if isinstance(reference, str):
                try:
                    resolver.lookup(reference)
                except Unresolvable as exc:
                    raise Problem.invalid(f"{path}.$ref", f"{reference!r} does not resolve within the schema "
                                                          f"({type(exc).__name__})") from None
            stack.extend((child, resolver, f"{path}.{key}") for key, child in node.items() if key not in DATA_KEYWORDS)
        elif isinstance(node, list):
            stack.extend((child, resolver, f"{path}.{index}") for index, child in enumerate(node))


def _problem(exc: InvalidInput) -> Problem:
    return Problem(422, exc.message, errors=exc.errors or [{"field": "body", "message": exc.message}])


class ToolDefinitions:
    """Turns definitions into catalogue entries, with the SSRF guard on the URLs they name."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.guard = OutboundGuard(settings.outbound_allow_cidrs)

    def build(self, tenant_id: str, body: FunctionTool | ApiCallTool | IntegrationTool,
              method: ProviderMethod | None = None) -> ToolSpec:
        """The tenant's catalogue entry for ``body`` (an integration tool's ``method`` looked up by the
        caller); blocking (DNS), so call it off the event loop.

        Raises:
            Problem: 422 naming the field at fault.
        """
        check_name(body.name)
        if isinstance(body, FunctionTool):
            if body.requires_approval:
                raise Problem.invalid("requires_approval", "a function tool's calls are decided by its client already")
            spec = self._function(tenant_id, body)
        elif isinstance(body, ApiCallTool):
            spec = self._api_call(tenant_id, body)
        else:
            assert method is not None, "an integration tool is built from its provider method"
            spec = self._integration(tenant_id, body, method)
        return dataclasses.replace(spec, requires_approval=body.requires_approval,
                                   approval_timeout_s=body.approval_timeout_s)

    def _function(self, tenant_id: str, body: FunctionTool) -> ToolSpec:
        check_parameters(body.parameters)
        limit = self.settings.function_deadline_max_s
        deadline = body.timeout_s or self.settings.function_deadline_s
        if deadline > limit:
            raise Problem.invalid("timeout_s", f"must be at most {limit:g} seconds")
        effect = body.effect or "write"
        return ToolSpec(name=body.name, kind="function", description=body.description, parameters=body.parameters,
                        effect=effect, idempotent=bool(body.idempotent), timeout_s=deadline, max_attempts=1,
                        definition={}, tenant_id=tenant_id)

    def _api_call(self, tenant_id: str, body: ApiCallTool) -> ToolSpec:
        check_parameters(body.parameters)
        try:
            template = request_templates.parse(body.request)
            request_templates.check_arguments(template, body.parameters)
            # Resolve the host now for a clear early error; workers check again at send time.
            self.guard.check(template.url.split("{", 1)[0], field="request.url")
            definition = sealed_headers.seal(template.to_definition(), self.settings.secret_key)
        except InvalidInput as exc:
            raise _problem(exc) from None
        except SecretKeyMissing:
            names = [name for name in template.headers if sealed_headers.is_secret(name)]
            raise Problem(503, "TOOLRELAY_SECRET_KEY is not set: credential headers cannot be stored encrypted",
                          errors=[{"field": f"request.headers.{name}", "message": "a credential, stored encrypted"}
                                  for name in names]) from None
        effect = body.effect or ("read" if template.method in ("GET", "HEAD", "OPTIONS") else "write")
        idempotent = body.idempotent
        if idempotent is None:
            idempotent = effect == "read" or template.method in ("PUT", "DELETE")
        return ToolSpec(name=body.name, kind="api_call", description=body.description, parameters=body.parameters,
                        effect=effect, idempotent=idempotent, timeout_s=body.timeout_s or template.timeout_s + 5,
                        max_attempts=body.max_attempts or self.settings.default_max_attempts,
                        definition=definition, tenant_id=tenant_id)

    def _integration(self, tenant_id: str, body: IntegrationTool, method: ProviderMethod) -> ToolSpec:
        self._check_fixed(method, body.arguments)
        parameters = open_parameters(method.arguments, fixed=body.arguments)
        return ToolSpec(
            name=body.name, kind="integration", description=body.description or method.description,
            parameters=parameters, effect=body.effect or method.effect,
            idempotent=method.idempotent if body.idempotent is None else body.idempotent,
            timeout_s=body.timeout_s or method.timeout_s,
            max_attempts=body.max_attempts or method.max_attempts, queue=method.queue,
            definition={"provider": method.provider, "method": method.method, "arguments": body.arguments},
            tenant_id=tenant_id,
        )

    def _check_fixed(self, method: ProviderMethod, fixed: Mapping[str, Any]) -> None:
        """Fixed arguments: known names, valid values, and no secrets (those belong in the stored setup)."""
        arg_props: Mapping[str, Any] = method.arguments.get("properties") or {}
        setup_props: Mapping[str, Any] = method.setup.get("properties") or {}
        for name, value in fixed.items():
            field = f"arguments.{name}"
            prop = arg_props.get(name, setup_props.get(name))
            if prop is None:
                raise Problem.invalid(field, f"{method.key} takes no argument or setting {name!r}")
            if name in method.secret_fields:
                raise Problem.invalid(field, f"a secret: store it with PUT /v1/integrations/{method.provider}/setup")
            errors = list(patterns.validator(prop).iter_errors(value))
            if errors:
                raise Problem.invalid(field, errors[0].message)
            if name == "url" and isinstance(value, str):
                try:
                    self.guard.check(value, field=field)
                except InvalidInput as exc:
                    raise _problem(exc) from None


def open_parameters(arguments: Mapping[str, Any], *, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """The method's argument schema without the properties the definition fixes (callers never see them)."""
    properties = {k: v for k, v in (arguments.get("properties") or {}).items() if k not in fixed}
    schema = {**arguments, "properties": properties}
    if "required" in arguments:
        schema["required"] = [name for name in arguments["required"] if name not in fixed]
        if not schema["required"]:
            del schema["required"]
    return schema
