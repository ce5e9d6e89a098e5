"""api_call request templates: arguments fill path segments, query and body, never host or headers."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from receipts.outbound.templates import (
    MASK,
    RenderError,
    TemplateError,
    check_arguments,
    parse,
    public_definition,
    render,
)


def template(**request: Any) -> Any:
    return parse({"method": "GET", "url": "https://api.example.com/v1/users/{user}/orders", **request})


@pytest.mark.parametrize(("request_def", "field"), [
    ({"url": "https://{host}/x"}, "request.url"),
    ({"url": "https://api.example.com:{port}/x"}, "request.url"),
    ({"url": "https://api.{domain}.com/x"}, "request.url"),
    ({"url": "https://api.example.com/x?q={q}"}, "request.url"),
    ({"url": "ftp://api.example.com/x"}, "request.url"),
    ({"url": "https://user:pw@api.example.com/x"}, "request.url"),
    ({"url": "https://api.example.com/x y"}, "request.url"),
    ({"url": "https://api.example.com/{unclosed"}, "request.url"),
    ({"url": "https://api.example.com/x#frag"}, "request.url"),
    ({"url": "https://[api.example.com/x"}, "request.url"),  # urlsplit's ValueError
    ({"url": "https://[::1/x"}, "request.url"),
    ({"method": "TRACE"}, "request.method"),
    ({"headers": {"Authorization": "Bearer {token}"}}, "request.headers.Authorization"),
    ({"headers": {"X-Evil": "a\r\nHost: evil.com"}}, "request.headers.X-Evil"),
    ({"headers": {"Host": "evil.com"}}, "request.headers.Host"),
    ({"headers": {"Idempotency-Key": "mine"}}, "request.headers.Idempotency-Key"),
    ({"headers": {"Bad Name": "x"}}, "request.headers.Bad Name"),
    ({"body": {"x": 1}}, "request.body"),
    ({"timeout_s": 0}, "request.timeout_s"),
    ({"timeout_s": 10_000}, "request.timeout_s"),
    ({"follow_redirects": "yes"}, "request.follow_redirects"),
    ({"query": {"q": ["a"]}}, "request.query.q"),
    ({"surprise": 1}, "request.surprise"),
])
def test_invalid_templates_name_the_field(request_def: dict[str, Any], field: str) -> None:
    base = {"method": "GET", "url": "https://api.example.com/x"}
    with pytest.raises(TemplateError) as info:
        parse({**base, **request_def})
    assert info.value.errors[0]["field"] == field


def test_placeholders_must_be_parameters_and_path_ones_required() -> None:
    tpl = template(query={"status": "{status}"})
    with pytest.raises(TemplateError, match="not a property"):
        check_arguments(tpl, {"type": "object", "properties": {"user": {}}, "required": ["user"]})
    with pytest.raises(TemplateError, match="must be a required"):
        check_arguments(tpl, {"type": "object", "properties": {"user": {}, "status": {}}})
    check_arguments(tpl, {"type": "object", "properties": {"user": {}, "status": {}}, "required": ["user"]})


def test_path_values_are_encoded_and_stay_in_their_segment() -> None:
    rendered = render(template(), {"user": "ann smith?&x=1#y"})
    parts = urlsplit(rendered.url)
    assert (parts.scheme, parts.netloc) == ("https", "api.example.com")
    assert parts.path == "/v1/users/ann%20smith%3F%26x%3D1%23y/orders"
    assert parts.query == "" and parts.fragment == ""


@pytest.mark.parametrize("value", ["../admin", "..", ".", "a/b", "a\\b", "x/%2e%2e", "", "..%2f"])
def test_path_traversal_is_refused(value: str) -> None:
    with pytest.raises(RenderError) as info:
        render(template(), {"user": value})
    assert info.value.errors[0]["field"] == "arguments.user"


@pytest.mark.parametrize("value", ["evil.com", "@evil.com", "http://evil.com", "evil.com:80", "//evil.com"])
def test_an_argument_cannot_change_the_host(value: str) -> None:
    tpl = parse({"method": "GET", "url": "https://api.example.com/{user}"})
    try:
        rendered = render(tpl, {"user": value})
    except RenderError:
        return  # refused outright (it held a "/")
    assert urlsplit(rendered.url).netloc == "api.example.com"
    assert urlsplit(rendered.url).path.count("/") == 1


def test_header_like_values_stay_inside_the_query() -> None:
    tpl = parse({"method": "GET", "url": "https://api.example.com/search", "query": {"q": "{q}"}})
    rendered = render(tpl, {"q": "x\r\nAuthorization: stolen"})
    assert "\r" not in rendered.url and "\n" not in rendered.url
    assert parse_qs(urlsplit(rendered.url).query) == {"q": ["x\r\nAuthorization: stolen"]}
    assert rendered.headers == {}


def test_query_templates_fill_scalars_lists_and_skip_missing_optionals() -> None:
    tpl = parse({"method": "GET", "url": "https://api.example.com/s?fixed=1",
                 "query": {"q": "{q}", "tag": "{tags}", "page": "p-{page}", "limit": 10, "opt": "{missing}"}})
    rendered = render(tpl, {"q": "a b", "tags": ["x", "y"], "page": 2, "flag": True})
    assert parse_qs(urlsplit(rendered.url).query) == {"fixed": ["1"], "q": ["a b"], "tag": ["x", "y"],
                                                     "page": ["p-2"], "limit": ["10"]}


def test_without_query_or_body_unused_arguments_go_to_the_query_or_the_body() -> None:
    get = render(parse({"method": "GET", "url": "https://a.example/{id}"}), {"id": 7, "q": "x"})
    assert get.url == "https://a.example/7?q=x" and not get.has_body
    post = render(parse({"method": "POST", "url": "https://a.example/{id}"}), {"id": 7, "name": "n", "n": 2})
    assert post.url == "https://a.example/7" and post.json == {"name": "n", "n": 2}


def test_body_templates_keep_json_types_and_drop_missing_keys() -> None:
    tpl = parse({"method": "POST", "url": "https://a.example/x",
                 "body": {"amount": "{amount}", "meta": {"note": "for {who}", "opt": "{opt}"}, "list": ["{amount}"],
                          "fixed": True}})
    rendered = render(tpl, {"amount": 12.5, "who": "ann"})
    assert rendered.json == {"amount": 12.5, "meta": {"note": "for ann"}, "list": [12.5], "fixed": True}


def test_credentials_in_headers_are_masked_in_public_definitions() -> None:
    tpl = parse({"method": "GET", "url": "https://a.example/x",
                 "headers": {"Authorization": "Bearer s3cret", "X-Api-Key": "k", "Accept": "application/json"}})
    shown = public_definition("api_call", {"request": tpl.to_definition()})
    assert shown["request"]["headers"] == {"Authorization": MASK, "X-Api-Key": MASK, "Accept": "application/json"}
    assert tpl.headers["Authorization"] == "Bearer s3cret"  # the stored definition keeps the value
