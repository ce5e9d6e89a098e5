"""Redis crashing and coming back under the gateway: the first calls accepted afterwards are published.

The Redis here is a server of the test's own (``SHUTDOWN NOSAVE``, then started again on its port),
as the chaos script runs it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis

from gateway.app import make_sender
from gateway.publisher import RedisPublisher
from receipts.db import Database
from receipts.settings import Settings
from receipts.store import calls
from tests.chaos.services import OwnRedis
from tests.support.factories import call

pytestmark = pytest.mark.integration


def test_the_first_receipts_accepted_after_redis_restarted_are_published(db: Database, tmp_path: Path) -> None:
    # The publisher's client keeps its connection from before the crash; the first command on it
    # finds it closed. That batch must go out on a new connection, not wait for the sweeper.
    own = OwnRedis(tmp_path)
    own.start()
    try:
        publisher = RedisPublisher(make_sender(Settings(broker_url=own.url)), grace_s=4)
        before, after = (db.run(calls.create(call()))[0] for _ in range(2))

        async def publish() -> None:
            publisher(before)
            await asyncio.sleep(0.5)  # published: the client and its connection stay
            own.crash()
            own.start()
            publisher(after)
            await publisher.aclose()

        asyncio.run(publish())
        with redis.Redis.from_url(own.url) as client:
            assert client.llen("tools") == 1  # the restarted Redis holds only what came after
    finally:
        own.close()
