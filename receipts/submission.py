"""Submitting a call: a request to call a tool becomes the call the store accepts, or a clear refusal.

One function for every way in: ``POST /v1/tool-calls``, the calls of a batch, an agent run's tool
calls, and the ``tool_calls_create`` system tool. It checks the arguments against the tool's JSON
Schema, works out the call's deadline, and fingerprints the request for its idempotency key; the
caller looks the tool up, stores the call (:func:`receipts.store.calls.create`) and publishes it.

Secrets in the arguments (:mod:`receipts.secret_arguments`) leave here masked in the call's
``arguments`` and encrypted in its ``secret_input``; without ``TOOLRELAY_SECRET_KEY`` a call that
carries one is refused (:class:`~receipts.secretbox.SecretKeyMissing`), since it could not be stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from referencing.exceptions import Unresolvable

from receipts import patterns, states
from receipts.errors import InvalidInput
from receipts.records import ToolSpec
from receipts.secret_arguments import SecretFields, fingerprint_part
from receipts.secretbox import SecretBox
from receipts.settings import Settings
from receipts.store.calls import NewCall, fingerprint


@dataclass(frozen=True)
class CheckedTool:
    """A catalogue entry with its compiled argument validator, and where its schema puts secrets."""

    spec: ToolSpec
    validator: Draft202012Validator
    secrets: SecretFields | None = None

    @classmethod
    def of(cls, spec: ToolSpec) -> CheckedTool:
        return cls(spec, patterns.validator(spec.parameters), SecretFields.of(spec.parameters))

    def errors(self, arguments: Any, prefix: str = "arguments") -> list[dict[str, str]]:
        """Every schema violation as ``{field, message}``, fields prefixed with ``prefix``; none repeats a secret."""
        found = []
        try:
            violations = sorted(self.validator.iter_errors(arguments), key=lambda e: list(map(str, e.absolute_path)))
        except Unresolvable as exc:  # a $ref of the tool's schema leads nowhere: the tool cannot be called
            return [{"field": prefix, "message": f"the schema of {self.spec.name!r} cannot be used: a $ref does not "
                                                 f"resolve ({type(exc).__name__}); define the tool again"}]
        for err in violations:
            found.append({"field": ".".join([prefix, *map(str, err.absolute_path)]), "message": err.message})
        if found and self.secrets is not None:
            found = self.secrets.hide_in_errors(arguments, found, prefix)
        return found

    def masked(self, arguments: Any) -> Any:
        """``arguments`` as a receipt may show them: every secret masked."""
        return arguments if self.secrets is None else self.secrets.mask(arguments)


@dataclass(frozen=True, slots=True)
class CallRequest:
    """What a caller asks for, before it is checked."""

    tool: str
    arguments: Any = field(default_factory=dict)
    trace_id: str | None = None
    call_id: str | None = None
    parent_id: str | None = None
    idempotency_key: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    timeout_s: float | None = None
    webhook_url: str | None = None
    batch_id: str | None = None
    traceparent: str | None = None  # the caller's trace context, continued by the call's execution


def deadline_for(settings: Settings, spec: ToolSpec, timeout_s: float | None) -> float:
    """Seconds from acceptance to the call's deadline.

    A function tool's ``timeout_s`` is how long its calls wait for the client's result (by default 24 h);
    any other call has ``TOOLRELAY_CALL_DEADLINE_S`` unless the request says otherwise.

    Raises:
        InvalidInput: longer than ``TOOLRELAY_FUNCTION_DEADLINE_MAX_S``.
    """
    deadline = timeout_s or (spec.timeout_s if spec.kind == "function" else settings.call_deadline_s)
    limit = settings.function_deadline_max_s
    if deadline > limit:
        raise InvalidInput(f"timeout_s must be at most {limit:g} seconds",
                           errors=[{"field": "timeout_s", "message": f"must be at most {limit:g} seconds"}])
    return deadline


def prepare(settings: Settings, tenant_id: str, checked: CheckedTool, request: CallRequest, *,
            request_body: dict[str, Any] | None = None, fingerprinted: bool = True) -> NewCall:
    """The call to store for ``request`` to ``checked``'s tool.

    ``request_body`` is what a replay under the same idempotency key must repeat (by default the
    request's own fields). Its ``arguments`` are fingerprinted with their secrets masked and a keyed
    hash of the secrets beside them, so the stored hash tells nothing about a secret. A call whose
    key the caller derived from a request it fingerprinted itself (a batch's calls: the batch's key
    and hash decide its replays) is not fingerprinted again (``fingerprinted=False``).

    Raises:
        InvalidInput: the arguments do not match the tool's schema (every violation, by field), or
            the timeout is out of range.
        SecretKeyMissing: the arguments carry a secret and TOOLRELAY_SECRET_KEY is not set.
    """
    errors = checked.errors(request.arguments)
    if errors:
        raise InvalidInput(f"arguments do not match the schema of {request.tool!r}", errors=errors)
    spec = checked.spec
    deadline_s = deadline_for(settings, spec, request.timeout_s)
    arguments, secret_input, secret_hash = request.arguments, None, None
    if checked.secrets is not None:
        split = checked.secrets.split(request.arguments)
        if split.secrets:
            box = SecretBox(settings.secret_key)
            arguments = split.masked
            secret_input = box.encrypt_json([[list(path), value] for path, value in split.secrets])
            secret_hash = fingerprint_part(settings.secret_key, split.secrets)
    request_hash = None
    if request.idempotency_key is not None and fingerprinted:
        body = request_body if request_body is not None else {
            "tool": request.tool, "trace_id": request.trace_id, "call_id": request.call_id,
            "metadata": request.metadata, "timeout_s": request.timeout_s, "webhook_url": request.webhook_url}
        body = {**body, "arguments": arguments, "secrets": secret_hash}
        request_hash = fingerprint({k: v for k, v in body.items() if v is not None})
    approval_timeout_s = None
    if spec.requires_approval:
        approval_timeout_s = spec.approval_timeout_s or settings.approval_timeout_s
    return NewCall(tenant_id=tenant_id, tool=spec, arguments=arguments, deadline_s=deadline_s,
                   trace_id=request.trace_id, call_id=request.call_id, parent_id=request.parent_id,
                   idempotency_key=request.idempotency_key, request_hash=request_hash, metadata=request.metadata,
                   webhook_url=request.webhook_url, batch_id=request.batch_id, secret_input=secret_input,
                   approval_timeout_s=approval_timeout_s, traceparent=request.traceparent)


def initial_status(spec: ToolSpec) -> str:
    """The status a new call starts in: a client-run (function) tool waits for its client, a tool that
    requires approval for a person's decision."""
    return states.WAITING if spec.kind == "function" or spec.requires_approval else states.PENDING

