"""The request of an ``api_call`` tool: a fixed HTTP request whose holes the call's arguments fill.

A definition (``POST /v1/tools {"kind": "api_call", "request": {...}}``) names a method, a URL, fixed
headers and, optionally, ``query`` and ``body`` templates. ``{name}`` placeholders take the value of
the argument ``name``, and only in three places:

* a **path segment** of the URL: the value is percent-encoded, and a value holding ``/``, ``\\`` or
  ``..`` is refused, so it can never climb out of its segment;
* a **query parameter** value (``query``);
* a string in the **JSON body** (``body``).

The scheme, host and port of the URL, and every header, are fixed at definition time: no argument can
change where the request goes or what it authenticates with. When neither ``query`` nor ``body`` is
given, the arguments not used in the path become query parameters (GET, HEAD, DELETE, OPTIONS) or the
JSON body (POST, PUT, PATCH).

The gateway parses a template when the tool is defined (clear field errors, nothing stored on error);
the worker renders it for each call. Both use this module, so they can never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from receipts.errors import InvalidInput

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
QUERY_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,100}$")
# Headers toolrelay sets itself or that describe the connection: a definition may not set them.
RESERVED_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade",
    "idempotency-key", "proxy-authorization", "proxy-connection",
})
# Header names whose values are credentials: never shown back by the API, encrypted at rest (sealed_headers).
SENSITIVE_HEADER = re.compile(r"auth|token|secret|key|password|cookie|session|credential|signature", re.I)
MASK = "********"
# Key of an api_call definition holding its credential header values, encrypted (receipts.sealed_headers).
SEALED_HEADERS = "sealed_headers"
MAX_TIMEOUT_S = 300.0


class TemplateError(InvalidInput):
    """The request template is not valid."""


class RenderError(InvalidInput):
    """The arguments cannot fill the request template."""


def _fail(field_name: str, message: str) -> TemplateError:
    return TemplateError(f"invalid {field_name}: {message}", errors=[{"field": field_name, "message": message}])


@dataclass(frozen=True, slots=True)
class RequestTemplate:
    """A parsed, validated request template (see the module docstring)."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] | None = None
    body: Any = None
    has_body: bool = False
    timeout_s: float = 30.0
    follow_redirects: bool = False

    @property
    def path_names(self) -> list[str]:
        """Arguments used in the URL path, in order."""
        return PLACEHOLDER.findall(urlsplit(self.url).path)

    @property
    def names(self) -> set[str]:
        """Every argument the template names anywhere."""
        found = set(self.path_names)
        for value in (self.query or {}).values():
            found |= _names_in(value)
        return found | _names_in(self.body)

    @property
    def origin(self) -> tuple[str, str, int | None]:
        parts = urlsplit(self.url)
        return parts.scheme, (parts.hostname or ""), parts.port

    def to_definition(self) -> dict[str, Any]:
        """The JSON stored in the catalogue (and parsed back by :func:`parse`)."""
        data: dict[str, Any] = {"method": self.method, "url": self.url, "headers": dict(self.headers),
                                "timeout_s": self.timeout_s, "follow_redirects": self.follow_redirects}
        if self.query is not None:
            data["query"] = self.query
        if self.has_body:
            data["body"] = self.body
        return data


def _names_in(value: Any) -> set[str]:
    if isinstance(value, str):
        return set(PLACEHOLDER.findall(value))
    if isinstance(value, Mapping):
        return set().union(*(_names_in(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_names_in(v) for v in value)) if value else set()
    return set()


def _check_braces(text: str, field_name: str) -> None:
    """Every ``{`` or ``}`` must belong to a ``{name}`` placeholder (no half-open or odd templates)."""
    if "{" in PLACEHOLDER.sub("", text) or "}" in PLACEHOLDER.sub("", text):
        raise _fail(field_name, "braces are only allowed in {name} placeholders")


def parse(data: Mapping[str, Any], *, prefix: str = "request") -> RequestTemplate:
    """Validate a request definition.

    Raises:
        TemplateError: with the offending field (e.g. ``request.url``).
    """
    if not isinstance(data, Mapping):
        raise _fail(prefix, "must be an object")
    unknown = set(data) - {"method", "url", "headers", "query", "body", "timeout_s", "follow_redirects"}
    if unknown:
        raise _fail(f"{prefix}.{sorted(unknown)[0]}", "unknown field")
    method = str(data.get("method", "GET")).upper()
    if method not in METHODS:
        raise _fail(f"{prefix}.method", f"one of {', '.join(METHODS)}")
    url = data.get("url")
    if not isinstance(url, str) or not url:
        raise _fail(f"{prefix}.url", "a URL is required")
    _check_url(url, f"{prefix}.url")
    headers = _check_headers(data.get("headers") or {}, f"{prefix}.headers")
    query = data.get("query")
    if query is not None:
        if not isinstance(query, Mapping):
            raise _fail(f"{prefix}.query", "must be an object of parameter name to value template")
        for name, value in query.items():
            if not isinstance(value, str | int | float | bool) and value is not None:
                raise _fail(f"{prefix}.query.{name}", "must be a string, number or boolean")
            if isinstance(value, str):
                _check_braces(value, f"{prefix}.query.{name}")
        query = dict(query)
    has_body = "body" in data
    if has_body and method in ("GET", "HEAD"):
        raise _fail(f"{prefix}.body", f"a {method} request has no body")
    timeout = data.get("timeout_s", 30.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise _fail(f"{prefix}.timeout_s", f"a number of seconds, above 0 and at most {MAX_TIMEOUT_S:g}")
    follow = data.get("follow_redirects", False)
    if not isinstance(follow, bool):
        raise _fail(f"{prefix}.follow_redirects", "must be true or false")
    return RequestTemplate(method=method, url=url, headers=headers, query=query, body=data.get("body"),
                           has_body=has_body, timeout_s=float(timeout), follow_redirects=follow)


def _check_url(url: str, field_name: str) -> None:
    if any(ord(ch) < 0x21 or ch in "\\\x7f" for ch in url):
        raise _fail(field_name, "must not contain spaces, control characters or backslashes")
    try:  # urlsplit and hostname raise ValueError for a URL they cannot take apart (``http://[x/``)
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:
        raise _fail(field_name, f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise _fail(field_name, "scheme must be http or https")
    if not host:
        raise _fail(field_name, "missing host")
    if "{" in parts.netloc or "}" in parts.netloc:
        raise _fail(field_name, "placeholders may only fill path segments, never the host or port")
    if parts.username or parts.password:
        raise _fail(field_name, "credentials in the URL are not allowed; use headers")
    try:
        _ = parts.port
    except ValueError:
        raise _fail(field_name, "invalid port") from None
    if PLACEHOLDER.search(parts.query) or PLACEHOLDER.search(parts.fragment):
        raise _fail(field_name, "placeholders in the query string are not allowed; use request.query")
    if parts.fragment:
        raise _fail(field_name, "a URL fragment is never sent; remove it")
    _check_braces(parts.path + parts.query, field_name)


def _check_headers(headers: Any, field_name: str) -> dict[str, str]:
    if not isinstance(headers, Mapping):
        raise _fail(field_name, "must be an object of header name to value")
    checked: dict[str, str] = {}
    for name, value in headers.items():
        where = f"{field_name}.{name}"
        if not isinstance(name, str) or not HEADER_NAME.match(name):
            raise _fail(where, "not a valid header name")
        if name.lower() in RESERVED_HEADERS:
            raise _fail(where, "set by toolrelay or the connection; cannot be defined")
        if not isinstance(value, str) or any(ch in value for ch in "\r\n\x00"):
            raise _fail(where, "must be a string without line breaks")
        if PLACEHOLDER.search(value):
            raise _fail(where, "headers are fixed: arguments can fill the path, query and body only")
        checked[name] = value
    return checked


def check_arguments(template: RequestTemplate, parameters: Mapping[str, Any], *, prefix: str = "request") -> None:
    """Every placeholder must name a property of the tool's ``parameters``; path ones a required one."""
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    for name in sorted(template.names):
        if name not in properties:
            raise _fail(prefix, f"placeholder {{{name}}} is not a property of parameters")
    for name in template.path_names:
        if name not in required:
            raise _fail(f"{prefix}.url", f"path placeholder {{{name}}} must be a required parameter")


# -- rendering ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RenderedRequest:
    """What is sent: the URL (host fixed by the template), headers, and an optional JSON body."""

    method: str
    url: str
    headers: dict[str, str]
    json: Any = None
    has_body: bool = False


def _refuse(name: str, message: str) -> RenderError:
    return RenderError(f"argument {name!r} {message}", errors=[{"field": f"arguments.{name}", "message": message}])


def _path_value(name: str, arguments: Mapping[str, Any]) -> str:
    if name not in arguments or arguments[name] is None:
        raise _refuse(name, "is required: it fills a path segment")
    value = arguments[name]
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str | int | float):
        text = str(value)
    else:
        raise _refuse(name, "must be a string or a number: it fills a path segment")
    if not text:
        raise _refuse(name, "must not be empty: it fills a path segment")
    if "/" in text or "\\" in text or ".." in text or text == ".":
        raise _refuse(name, "must not contain '/', '\\' or '..': it fills one path segment")
    return quote(text, safe="")


def _scalar(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise _refuse(name, "must be a string, number or boolean here")


def _substitute(text: str, arguments: Mapping[str, Any]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if arguments.get(name) is None:
            raise _refuse(name, "is required by the request template")
        return _scalar(name, arguments[name])

    return PLACEHOLDER.sub(one, text)


_MISSING = object()


def _fill(value: Any, arguments: Mapping[str, Any]) -> Any:
    """A body template with its placeholders filled; a whole-string placeholder keeps the JSON type."""
    if isinstance(value, str):
        whole = PLACEHOLDER.fullmatch(value)
        if whole:
            return arguments.get(whole.group(1), _MISSING)
        return _substitute(value, arguments)
    if isinstance(value, Mapping):
        filled = {key: _fill(item, arguments) for key, item in value.items()}
        return {key: item for key, item in filled.items() if item is not _MISSING}
    if isinstance(value, list):
        return [None if item is _MISSING else item for item in (_fill(v, arguments) for v in value)]
    return value


def _query_pairs(template: RequestTemplate, arguments: Mapping[str, Any], unused: list[str]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    items: list[tuple[str, Any]]
    if template.query is not None:
        items = list(template.query.items())
    else:
        items = [(name, "{" + name + "}") for name in unused]
    for key, spec in items:
        if isinstance(spec, str) and (whole := PLACEHOLDER.fullmatch(spec)):
            name = whole.group(1)
            value = arguments.get(name)
            if value is None:
                continue  # an optional argument left out: no parameter
            values = value if isinstance(value, list) else [value]
            pairs.extend((key, _scalar(name, item)) for item in values)
        elif isinstance(spec, str):
            pairs.append((key, _substitute(spec, arguments)))
        elif spec is not None:
            pairs.append((key, _scalar(key, spec)))
    return pairs


def render(template: RequestTemplate, arguments: Mapping[str, Any]) -> RenderedRequest:
    """The request for one call.

    Raises:
        RenderError: an argument cannot go where the template puts it (names the argument).
    """
    parts = urlsplit(template.url)
    path = PLACEHOLDER.sub(lambda m: _path_value(m.group(1), arguments), parts.path)
    used = template.names
    unused = sorted(name for name in arguments if name not in used)
    pairs = _query_pairs(template, arguments, unused if template.method in QUERY_METHODS else [])
    query = parts.query
    if pairs:
        query = "&".join(filter(None, [query, urlencode(pairs)]))
    url = urlunsplit((parts.scheme, parts.netloc, path, query, ""))
    if urlsplit(url).netloc != parts.netloc:  # defence in depth: the origin is the template's, always
        raise RenderError("the arguments would change the request's host", errors=[{"field": "arguments",
                                                                                    "message": "host is fixed"}])
    if template.has_body:
        return RenderedRequest(template.method, url, dict(template.headers), _fill(template.body, arguments), True)
    if template.method not in QUERY_METHODS and template.query is None:
        body = {name: arguments[name] for name in unused}
        return RenderedRequest(template.method, url, dict(template.headers), body, True)
    return RenderedRequest(template.method, url, dict(template.headers))


def public_definition(kind: str, definition: Mapping[str, Any]) -> dict[str, Any]:
    """A tool definition as the API shows it: credential-like header values masked, their ciphertext left out."""
    data = {key: value for key, value in definition.items() if key != SEALED_HEADERS}
    request = data.get("request")
    if kind == "api_call" and isinstance(request, Mapping):
        headers = request.get("headers") or {}
        masked = {name: (MASK if SENSITIVE_HEADER.search(name) else value) for name, value in headers.items()}
        data["request"] = {**request, "headers": masked}
    return data
