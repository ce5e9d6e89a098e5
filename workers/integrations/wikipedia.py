"""``wikipedia``: search articles through the MediaWiki API (``TOOLRELAY_WIKIPEDIA_BASE_URL``)."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import quote, urlsplit

from workers.errors import UpstreamError
from workers.integrations.base import Call, Method, Provider, Values, schema

TAGS = re.compile(r"<[^>]+>")


def page_url(api_url: str, title: str) -> str:
    """The article's address on the wiki the API belongs to (``.../w/api.php`` -> ``.../wiki/Title``)."""
    parts = urlsplit(api_url)
    return f"{parts.scheme}://{parts.netloc}/wiki/{quote(title.replace(' ', '_'))}"


async def search(values: Values, call: Call) -> dict[str, Any]:
    base = call.settings.wikipedia_base_url
    params = {"action": "query", "list": "search", "srsearch": values["query"], "srlimit": values.get("limit", 5),
              "format": "json", "formatversion": 2, "utf8": 1}
    data = await call.get_json(call.trusted.get(), base, params, "Wikipedia")
    if "error" in data:  # MediaWiki reports bad requests with HTTP 200 and an "error" member
        raise UpstreamError("Wikipedia refused the search", retryable=False, details={"error": data["error"]})
    found = data.get("query") or {}
    hits = found.get("search") or []
    return {
        "query": values["query"],
        "total_hits": (found.get("searchinfo") or {}).get("totalhits", len(hits)),
        "results": [
            {"title": hit.get("title", ""), "pageid": hit.get("pageid"), "url": page_url(base, hit.get("title", "")),
             "snippet": html.unescape(TAGS.sub("", hit.get("snippet", ""))), "wordcount": hit.get("wordcount"),
             "timestamp": hit.get("timestamp")}
            for hit in hits
        ],
    }


RESULT = schema({
    "title": {"type": "string"}, "pageid": {"type": ["integer", "null"]}, "url": {"type": "string"},
    "snippet": {"type": "string"}, "wordcount": {"type": ["integer", "null"]},
    "timestamp": {"type": ["string", "null"]},
}, ["title", "url", "snippet"], closed=False)

PROVIDER = Provider(
    name="wikipedia",
    description="Search Wikipedia articles (MediaWiki search API).",
    setup=schema({}),
    methods=(
        Method(
            name="search",
            description="Search Wikipedia and return matching article titles, links and snippets.",
            arguments=schema({
                "query": {"type": "string", "minLength": 1, "maxLength": 300, "description": "What to search for."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
            }, ["query"]),
            output=schema({"query": {"type": "string"}, "total_hits": {"type": "integer"},
                           "results": {"type": "array", "items": RESULT}}, ["results"]),
            run=search,
            timeout_s=30,
        ),
    ),
)
