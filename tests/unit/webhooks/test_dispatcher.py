"""The dispatcher against a real HTTP receiver on 127.0.0.1 and a real (PostgreSQL) database.

Every request the receiver gets is verified with the ``standardwebhooks`` library.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime

from receipts.store import calls
from receipts.webhooks import endpoints
from receipts.webhooks.records import DELIVERED, FAILED, PENDING
from tests.support.receiver import Receiver, Reply
from tests.unit.webhooks.conftest import Bench


def test_each_subscribed_transition_is_delivered_signed_with_the_receipt_as_data(
        bench: Bench, receiver: Receiver) -> None:
    bench.endpoint(receiver)
    receipt_id = bench.call()
    report = bench.dispatcher().run()
    assert report.delivered == 2
    running = receiver.wait_for(1, type="receipt.running")[0]
    succeeded = receiver.wait_for(1, type="receipt.succeeded")[0]
    for request in (running, succeeded):
        assert request.verified_by == (0,)
        assert request.headers["x-receipt-id"] == receipt_id
        assert request.headers["content-type"] == "application/json"
        assert request.webhook_id.startswith("msg_")
    final = bench.run(calls.get(bench.tenant_id, receipt_id)).to_api()
    assert succeeded.payload["data"] == final
    assert set(succeeded.payload) == {"type", "timestamp", "data"}
    assert running.payload["data"]["status"] == "running"


def test_only_subscribed_event_types_are_sent(bench: Bench, receiver: Receiver) -> None:
    bench.endpoint(receiver, event_types=["receipt.succeeded"])
    bench.call()
    bench.dispatcher().run()
    receiver.wait_for(1)
    assert [r.payload["type"] for r in receiver.requests] == ["receipt.succeeded"]


def test_500_then_200_retries_with_the_same_id_and_a_fresh_signature(bench: Bench, receiver: Receiver) -> None:
    # The retry comes at least 1.3 s less its 20 % jitter after the first attempt was answered: more
    # than a whole second after the first was signed, so the two cannot share a webhook-timestamp.
    bench.configure(webhook_retry_schedule=["0", "1.3"])
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.respond(Reply(500, "boom"))
    bench.call()
    bench.deliver_until_settled()
    first, second = receiver.wait_for(2)
    assert first.webhook_id == second.webhook_id
    assert second.at - first.at >= 1.3 * 0.8 - 0.05  # the schedule's delay, less its jitter
    assert second.timestamp > first.timestamp
    assert first.headers["webhook-signature"] != second.headers["webhook-signature"]  # signed afresh
    assert first.verified_by == second.verified_by == (0,)  # each signature matches its own timestamp
    delivery = bench.run(endpoints.deliveries(bench.tenant_id, endpoint_id=endpoint.id)).items[0]
    assert delivery.status == DELIVERED
    assert [(a.status_code, a.success, a.response) for a in delivery.attempts] == [(500, False, "boom"),
                                                                                   (200, True, "ok")]
    # Each attempt is signed with the second it was sent in, by the time the database recorded for it.
    for request, attempt in zip((first, second), delivery.attempts, strict=True):
        assert -1 < attempt.at.timestamp() - request.timestamp < 2, (request.headers, attempt.at)


def test_schedule_exhausted_fails_the_message(bench: Bench, receiver: Receiver) -> None:
    bench.configure(webhook_retry_schedule=["0", "0.1", "0.1"])
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.default = Reply(503, "down for maintenance")
    bench.call()
    bench.deliver_until_settled()
    delivery = bench.run(endpoints.deliveries(bench.tenant_id, endpoint_id=endpoint.id)).items[0]
    assert delivery.status == FAILED
    assert len(delivery.attempts) == 3 == len(receiver.requests)
    assert bench.run(endpoints.get_endpoint(bench.tenant_id, endpoint.id)).failing_since is not None


def test_receiver_down_then_up_is_delivered(bench: Bench) -> None:
    receiver = Receiver()  # not started: connections are refused
    bench.configure(webhook_retry_schedule=["0", "0.5", "0.5", "0.5"])
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    bench.call()
    bench.dispatcher().run()
    delivery = bench.run(endpoints.deliveries(bench.tenant_id, endpoint_id=endpoint.id)).items[0]
    assert delivery.status == PENDING
    assert delivery.attempts[0].status_code is None and "connect" in (delivery.attempts[0].error or "").lower()
    with receiver:
        bench.deliver_until_settled()
        assert receiver.wait_for(1)[0].verified_by == (0,)
    assert bench.run(endpoints.delivery(bench.tenant_id, delivery.id)).status == DELIVERED


def test_a_receiver_hanging_past_the_timeout_is_a_failed_attempt(bench: Bench, receiver: Receiver) -> None:
    bench.configure(webhook_timeout_s=1.0, webhook_retry_schedule=["0", "0.2"])
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.respond(Reply(200, delay_s=30))
    bench.call()
    started = time.monotonic()
    bench.dispatcher().run(max_s=0.1)
    assert time.monotonic() - started < 10  # bounded by the 1 s timeout, not the 30 s hang
    attempt = bench.run(endpoints.deliveries(bench.tenant_id, endpoint_id=endpoint.id)).items[0].attempts[0]
    assert attempt.error == "timed out after 1 s" and attempt.status_code is None
    assert 900 <= (attempt.latency_ms or 0) < 5000
    bench.deliver_until_settled()
    assert len(receiver.wait_for(2)) == 2


def test_410_fails_the_message_and_disables_the_endpoint(bench: Bench, receiver: Receiver) -> None:
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.respond(Reply(410, "gone"))
    bench.call()
    bench.deliver_until_settled()
    after = bench.run(endpoints.get_endpoint(bench.tenant_id, endpoint.id))
    assert not after.enabled and "410" in (after.disabled_reason or "")
    assert bench.run(endpoints.deliveries(bench.tenant_id, endpoint_id=endpoint.id)).items[0].status == FAILED
    bench.call()  # a disabled endpoint gets no new messages
    bench.deliver_until_settled()
    assert len(receiver.requests) == 1


def test_429_retry_after_is_honoured(bench: Bench, receiver: Receiver) -> None:
    bench.configure(webhook_retry_schedule=["0", "0.1", "0.1"])
    bench.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.respond(Reply(429, "slow down", headers={"Retry-After": "2"}))
    bench.call()
    bench.deliver_until_settled()
    first, second = receiver.wait_for(2)
    assert second.at - first.at >= 1.9  # not the schedule's 0.1 s


def test_retry_after_as_an_http_date(bench: Bench, receiver: Receiver) -> None:
    bench.configure(webhook_retry_schedule=["0", "0.1", "0.1"])
    bench.endpoint(receiver, event_types=["receipt.succeeded"])
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=3), usegmt=True)  # to the second
    receiver.respond(Reply(503, headers={"Retry-After": when}))
    bench.call()
    bench.deliver_until_settled()
    first, second = receiver.wait_for(2)
    # Not before that date, by the clock the database schedules with (the schedule alone: 0.1 s).
    assert second.unix >= parsedate_to_datetime(when).timestamp()


def test_a_redirect_is_a_failure_and_is_not_followed(bench: Bench, receiver: Receiver) -> None:
    bench.configure(webhook_retry_schedule=["0"])
    with Receiver() as elsewhere:
        endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
        receiver.respond(Reply(307, headers={"Location": elsewhere.url}))
        bench.call()
        bench.deliver_until_settled()
        assert elsewhere.requests == []
    delivery = bench.run(endpoints.deliveries(bench.tenant_id, endpoint_id=endpoint.id)).items[0]
    assert delivery.status == FAILED
    assert delivery.attempts[0].status_code == 307 and "not followed" in (delivery.attempts[0].error or "")


def test_loopback_and_metadata_addresses_are_refused_at_delivery_without_an_allow_list(
        bench: Bench, receiver: Receiver) -> None:
    bench.configure(webhook_retry_schedule=["0"])
    loopback = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    by_name = bench.endpoint(receiver, event_types=["receipt.succeeded"],
                             url=receiver.url.replace("127.0.0.1", "localhost"))
    metadata = bench.endpoint(receiver, event_types=["receipt.succeeded"], url="http://169.254.169.254/latest")
    bench.configure(outbound_allow_cidrs=[])  # e.g. the operator removed the allow-list since registration
    bench.call()
    bench.deliver_until_settled()
    assert receiver.requests == []
    for endpoint in (loopback, by_name, metadata):
        attempt = bench.run(endpoints.deliveries(bench.tenant_id, endpoint_id=endpoint.id)).items[0].attempts[0]
        assert attempt.error is not None and "non-public address" in attempt.error, attempt.error


def test_rotation_signs_with_both_secrets_during_the_grace_period(bench: Bench, receiver: Receiver) -> None:
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    _, new_secret, _ = bench.run(bench.endpoints.rotate_endpoint_secret(bench.tenant_id, endpoint.id, grace_s=3600))
    receiver.secrets.append(new_secret)
    bench.call()
    bench.dispatcher().run()
    request = receiver.wait_for(1)[0]
    assert len(request.signatures) == 2 and all(s.startswith("v1,") for s in request.signatures)
    assert request.verified_by == (0, 1)  # the old secret and the new one each verify it alone


def test_after_the_grace_period_only_the_new_secret_signs(bench: Bench, receiver: Receiver) -> None:
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    _, new_secret, _ = bench.run(bench.endpoints.rotate_endpoint_secret(bench.tenant_id, endpoint.id, grace_s=0))
    receiver.secrets.append(new_secret)
    bench.call()
    bench.dispatcher().run()
    request = receiver.wait_for(1)[0]
    assert len(request.signatures) == 1 and request.verified_by == (1,)


def test_a_calls_own_webhook_url_is_signed_with_the_tenant_default_secret(bench: Bench, receiver: Receiver) -> None:
    secret, _ = bench.run(bench.endpoints.create_default_secret(bench.tenant_id))
    receiver.secrets.append(secret)
    receipt_id = bench.call(webhook_url=receiver.url)
    bench.dispatcher().run()
    requests = receiver.wait_for(2)
    assert {r.payload["type"] for r in requests} == {"receipt.running", "receipt.succeeded"}
    assert all(r.verified_by == (0,) and r.headers["x-receipt-id"] == receipt_id for r in requests)
    listed = bench.run(endpoints.deliveries(bench.tenant_id, receipt_id=receipt_id)).items
    assert {d.status for d in listed} == {DELIVERED} and all(d.url == receiver.url for d in listed)


def test_continuous_failure_past_the_limit_disables_the_endpoint_with_the_reason(
        bench: Bench, receiver: Receiver) -> None:
    bench.configure(webhook_retry_schedule=["0", "0.5", "0.5", "0.5", "0.5"], webhook_disable_after_s=1.0)
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.default = Reply(500, "still broken")
    bench.call()
    bench.deliver_until_settled()
    after = bench.run(endpoints.get_endpoint(bench.tenant_id, endpoint.id))
    assert not after.enabled
    assert "every delivery failed from" in (after.disabled_reason or "") and "HTTP 500" in (after.disabled_reason or "")
    assert after.failing_since is not None


def test_a_success_ends_the_failure_streak(bench: Bench, receiver: Receiver) -> None:
    bench.configure(webhook_retry_schedule=["0", "0.2"])
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.respond(Reply(500))
    bench.call()
    bench.dispatcher().run(max_s=0.1)
    assert bench.run(endpoints.get_endpoint(bench.tenant_id, endpoint.id)).failing_since is not None
    bench.deliver_until_settled()
    assert bench.run(endpoints.get_endpoint(bench.tenant_id, endpoint.id)).failing_since is None


def test_manual_retry_and_recover_send_failed_messages_again_with_the_same_id(
        bench: Bench, receiver: Receiver) -> None:
    bench.configure(webhook_retry_schedule=["0"])
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.default = Reply(500)
    since = datetime.now(UTC)
    bench.call()
    bench.call()
    bench.deliver_until_settled()
    failed = bench.run(endpoints.deliveries(bench.tenant_id, endpoint_id=endpoint.id, status=FAILED)).items
    assert len(failed) == 2
    receiver.default = Reply(200)
    retried = bench.run(endpoints.retry(bench.tenant_id, failed[0].id))
    assert retried.status == PENDING
    bench.deliver_until_settled()
    assert bench.run(endpoints.delivery(bench.tenant_id, failed[0].id)).status == DELIVERED
    assert bench.run(endpoints.recover(bench.tenant_id, endpoint.id, since=since)) == 1
    bench.deliver_until_settled()
    assert bench.run(endpoints.delivery(bench.tenant_id, failed[1].id)).status == DELIVERED
    ids = [r.webhook_id for r in receiver.requests]
    assert ids.count(failed[0].id) == 2 and ids.count(failed[1].id) == 2
    assert all(r.verified_by == (0,) for r in receiver.requests)


def test_a_disabled_endpoints_pending_messages_fail_without_a_request(bench: Bench, receiver: Receiver) -> None:
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    bench.call()
    bench.run(endpoints.update_endpoint(bench.tenant_id, endpoint.id, enabled=False))
    bench.deliver_until_settled()
    assert receiver.requests == []
    delivery = bench.run(endpoints.deliveries(bench.tenant_id, endpoint_id=endpoint.id)).items[0]
    assert delivery.status == FAILED and "disabled" in (delivery.attempts[0].error or "")


def test_the_first_kib_of_the_response_is_logged(bench: Bench, receiver: Receiver) -> None:
    endpoint = bench.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.respond(Reply(200, "x" * 5000))
    bench.call()
    bench.dispatcher().run()
    attempt = bench.run(endpoints.deliveries(bench.tenant_id, endpoint_id=endpoint.id)).items[0].attempts[0]
    assert attempt.response == "x" * 1024 and attempt.latency_ms is not None and attempt.latency_ms > 0


def test_many_messages_are_delivered_in_one_run(bench: Bench, receiver: Receiver) -> None:
    bench.configure(webhook_batch=20, webhook_concurrency=8)
    bench.endpoint(receiver, event_types=["receipt.succeeded"])
    for _ in range(50):
        bench.call()
    report = bench.dispatcher().run()
    assert report.delivered == 50
    assert len({r.webhook_id for r in receiver.wait_for(50)}) == 50
