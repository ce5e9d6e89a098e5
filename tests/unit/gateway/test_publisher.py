"""The gateway's batch publisher: every accepted receipt's message reaches the broker (real Redis)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import uuid as uuids
from typing import Any

import pytest
import redis
from celery import Celery

from gateway.publisher import BatchPublisher, ExecuteMessages, RedisPublisher, publisher_for, task_message, uuid
from receipts.db import Database
from receipts.messages import EXECUTE_TASK, publish_execute, transport_options
from receipts.settings import Settings
from receipts.store import calls
from tests.support import services
from tests.support.factories import call, spec

PER_MESSAGE = {"id", "root_id", "correlation_id", "delivery_tag", "reply_to", "ignore_result"}


def shape(message: dict[str, Any]) -> dict[str, Any]:
    """A message without what differs from one message to the next (ids, tags), its body decoded."""
    return {**{k: v for k, v in message.items() if k not in ("headers", "properties", "body")},
            "body": json.loads(base64.b64decode(message["body"])),
            "headers": {k: v for k, v in message["headers"].items() if k not in PER_MESSAGE},
            "properties": {k: v for k, v in message["properties"].items() if k not in PER_MESSAGE}}


def test_every_queued_receipt_is_published_once_with_its_lease(db: Database) -> None:
    prefix = services.redis_prefix()
    settings = Settings(broker_url=services.REDIS_URL, broker_key_prefix=prefix)
    app = Celery("publisher-test", broker=settings.broker_url, set_as_current=False)
    app.conf.update(broker_transport_options=transport_options(settings), task_serializer="json")
    accepted = [db.run(calls.create(call()))[0] for _ in range(250)]
    publisher = BatchPublisher(app, grace_s=4)
    try:
        for receipt in accepted:
            publisher(receipt)
        publisher.close()
        client = redis.Redis.from_url(services.REDIS_URL)
        raw = client.lrange(f"{prefix}tools", 0, -1)
        client.close()
        messages = [json.loads(item) for item in raw]
        assert len(messages) == len(accepted)
        assert {m["headers"]["task"] for m in messages} == {EXECUTE_TASK}
        bodies = [json.loads(base64.b64decode(m["body"])) for m in messages]
        assert sorted(body[0][0] for body in bodies) == sorted(r.id for r in accepted)
        assert {body[0][1] for body in bodies} == {accepted[0].timeout_s + 4}
    finally:
        services.clear_redis_prefix(prefix)


def test_a_broker_that_is_down_is_reported_and_left_to_the_sweeper(db: Database,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    app = Celery("publisher-test", broker="redis://127.0.0.1:1/0", set_as_current=False)
    app.conf.update(broker_connection_retry=False, broker_connection_max_retries=0,
                    broker_transport_options={"max_retries": 0})
    receipt, _ = db.run(calls.create(call()))
    publisher = BatchPublisher(app, grace_s=4)
    publisher(receipt)
    with caplog.at_level(logging.WARNING, logger="gateway.publisher"):
        publisher.close(timeout=30)
    assert "could not publish 1 accepted receipts" in caplog.text
    assert "the sweeper will send them" in caplog.text


def test_a_batched_message_is_the_message_send_task_would_send(db: Database) -> None:
    prefix = services.redis_prefix()
    settings = Settings(broker_url=services.REDIS_URL, broker_key_prefix=prefix)
    app = Celery("publisher-test", broker=settings.broker_url, set_as_current=False)
    app.conf.update(broker_transport_options=transport_options(settings), task_serializer="json",
                    task_ignore_result=True)
    receipt, _ = db.run(calls.create(call()))
    publisher = BatchPublisher(app, grace_s=4)
    try:
        publish_execute(app, receipt, grace_s=4)
        publisher(receipt)
        publisher.close()
        client = redis.Redis.from_url(services.REDIS_URL)
        sent, batched = [json.loads(item) for item in reversed(client.lrange(f"{prefix}tools", 0, -1))]
        client.close()
        assert shape(batched) == shape(sent)
        assert batched["headers"]["id"] == batched["headers"]["root_id"] == batched["properties"]["correlation_id"]
        assert batched["headers"]["timelimit"] == [receipt.timeout_s + 2, None]
        assert batched["headers"]["ignore_result"] is True
    finally:
        services.clear_redis_prefix(prefix)


def redis_app(prefix: str) -> Celery:
    settings = Settings(broker_url=services.REDIS_URL, broker_key_prefix=prefix)
    app = Celery("publisher-test", broker=settings.broker_url, set_as_current=False)
    app.conf.update(broker_transport_options=transport_options(settings), task_serializer="json",
                    task_ignore_result=True)
    return app


def queued(prefix: str) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(services.REDIS_URL)
    try:
        return [json.loads(item) for item in reversed(client.lrange(f"{prefix}tools", 0, -1))]
    finally:
        client.close()


def test_the_event_loop_publisher_sends_what_send_task_sends(db: Database) -> None:
    prefix = services.redis_prefix()
    app = redis_app(prefix)
    receipts = [db.run(calls.create(call()))[0] for _ in range(300)]
    publisher = RedisPublisher(app, grace_s=4)

    async def publish_all() -> None:
        for receipt in receipts:
            publisher(receipt)
            if len(publisher._pending) % 50 == 0:
                await asyncio.sleep(0)  # let a flush start: later receipts go in the next batch
        await publisher.aclose()

    try:
        publish_execute(app, receipts[0], grace_s=4)
        asyncio.run(publish_all())
        sent, *published = queued(prefix)
        assert len(published) == len(receipts)
        assert shape(published[0]) == shape(sent)  # the same receipt: the same message
        for message in published:
            same_but_receipt = shape(message)
            same_but_receipt["headers"]["argsrepr"] = shape(sent)["headers"]["argsrepr"]
            assert same_but_receipt == shape(sent) | {"body": shape(message)["body"]}
            assert message["headers"]["id"] == message["headers"]["root_id"] == message["properties"]["correlation_id"]
            assert message["headers"]["ignore_result"] is True
        bodies = [json.loads(base64.b64decode(m["body"])) for m in published]
        assert [body[0][0] for body in bodies] == [r.id for r in receipts]
        assert [m["headers"]["argsrepr"] for m in published] == [repr(body[0]) for body in bodies]
        assert len({m["headers"]["id"] for m in published}) == len(receipts)
        assert len({m["properties"]["delivery_tag"] for m in published}) == len(receipts)  # kombu acks by it
    finally:
        services.clear_redis_prefix(prefix)


def test_the_event_loop_publisher_reports_a_broker_that_is_down(db: Database,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    app = Celery("publisher-test", broker="redis://127.0.0.1:1/0", set_as_current=False)
    receipt, _ = db.run(calls.create(call()))
    publisher = RedisPublisher(app, grace_s=4)

    async def publish() -> None:
        publisher(receipt)
        await publisher.aclose()

    with caplog.at_level(logging.WARNING, logger="gateway.publisher"):
        asyncio.run(publish())
    assert "could not publish 1 accepted receipts" in caplog.text
    assert "the sweeper will send them" in caplog.text


def test_redis_gets_the_event_loop_publisher_unless_the_fast_path_is_off() -> None:
    def chosen(**settings: Any) -> type:
        config = Settings(**settings)
        return type(publisher_for(config, Celery(broker=config.broker_url, set_as_current=False)))

    assert chosen(broker_url="redis://127.0.0.1:6379/0") is RedisPublisher
    assert chosen(broker_url="redis://127.0.0.1:6379/0", redis_fast_path=False) is BatchPublisher
    assert chosen(broker_url="amqp://guest@127.0.0.1//") is BatchPublisher


def test_each_message_after_the_first_has_its_own_id_arguments_and_time_limit(db: Database) -> None:
    app = redis_app(services.redis_prefix())
    receipts = [db.run(calls.create(call(spec(timeout_s=timeout))))[0] for timeout in (5, 1.5, 30, 5)]
    messages = ExecuteMessages(app, grace_s=4)
    for receipt in receipts:
        queue_name, (headers, properties, body, _) = messages(receipt)
        celery_queue, (celery_headers, celery_properties, celery_body, _) = task_message(app, receipt, 4)
        assert queue_name == celery_queue
        assert headers["id"] == headers["root_id"] == properties["correlation_id"] != celery_headers["id"]
        assert {**headers, "id": "", "root_id": ""} == {**celery_headers, "id": "", "root_id": ""}
        assert {**properties, "correlation_id": ""} == {**celery_properties, "correlation_id": ""}
        assert list(body) == list(celery_body) and body[0] == [receipt.id, receipt.timeout_s + 4]
        assert headers["timelimit"] == [receipt.timeout_s + 2, None]


def test_message_ids_are_version_4_uuids_that_a_forked_process_does_not_repeat() -> None:
    ids = [uuid() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuids.UUID(value)
        assert str(parsed) == value and parsed.version == 4 and parsed.variant == uuids.RFC_4122
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child writes the ids it makes, the parent makes its own: none may be the same
        os.write(write, " ".join(uuid() for _ in range(100)).encode())
        os._exit(0)
    os.close(write)
    mine = {uuid() for _ in range(100)}
    os.waitpid(child, 0)
    with os.fdopen(read) as pipe:
        theirs = set(pipe.read().split())
    assert len(theirs) == 100 and not mine & theirs
