"""Request bodies read by the store's JSON codec (:func:`receipts.jsoncodec.loads`): the values
``json.loads`` reads, and its errors (FastAPI answers those with a problem), in orjson's time.

FastAPI reads a JSON body with ``await request.json()``; the routes of :class:`JSONBodyRoute` that
take a body hand their handler a request whose ``json()`` is the codec's, the way FastAPI's
documentation customises a request ("Custom Request and APIRoute class").
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from receipts import jsoncodec


class JSONBodyRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = jsoncodec.loads(await self.body())
        return self._json


class JSONBodyRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:  # a route without a body (a GET) is left as it is
            return handler

        async def read_by_the_codec(request: Request) -> Response:
            return await handler(JSONBodyRequest(request.scope, request.receive))

        return read_by_the_codec
