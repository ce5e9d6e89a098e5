"""Reading the API's answers: one parser per response shape, shared by both clients.

A parser takes the ``httpx.Response`` as it came (no I/O happens here: the body is already read) and
returns a record, or raises the :mod:`~toolrelay.client.errors` class the status stands for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from toolrelay.client.errors import UnexpectedResponse, from_response
from toolrelay.client.records import Page, R, record


def json_body(response: httpx.Response) -> Any:
    """The JSON of a successful answer; an error status raises its error class."""
    if response.status_code >= 400:
        raise from_response(response)
    if not 200 <= response.status_code < 300:
        raise UnexpectedResponse(f"unexpected {response.status_code} {response.reason_phrase}",
                                 status=response.status_code)
    try:
        return response.json()
    except ValueError as exc:
        raise UnexpectedResponse(f"the answer is not JSON: {response.text[:200]!r}",
                                 status=response.status_code) from exc


def one(cls: type[R]) -> Callable[[httpx.Response], R]:
    """The parser of an answer that is one ``cls`` object (a receipt, a batch, a run...)."""

    def parse(response: httpx.Response) -> R:
        return record(cls, json_body(response))

    return parse


def page(cls: type[R]) -> Callable[[httpx.Response], Page[R]]:
    """The parser of a listing, ``{"data": [objects], "next_cursor": str | null}``."""

    def parse(response: httpx.Response) -> Page[R]:
        body = json_body(response)
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            raise UnexpectedResponse(f"expected a listing ({{data, next_cursor}}), got {body!r:.200}")
        cursor = body.get("next_cursor")
        return Page(items=tuple(record(cls, item) for item in body["data"]),
                    next_cursor=cursor if isinstance(cursor, str) and cursor else None)

    return parse


def json_array(response: httpx.Response) -> list[Any]:
    """The parser of an answer that is a bare JSON array (the catalogue in a vendor's format)."""
    body = json_body(response)
    if not isinstance(body, list):
        raise UnexpectedResponse(f"expected a JSON array, got {body!r:.200}")
    return body
