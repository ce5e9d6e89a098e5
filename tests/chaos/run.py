"""One chaos run, phase by phase: set up, load under faults, settle, probe, count.

1. **Set up**: the run's own PostgreSQL and Redis, ``toolrelay migrate``, ``toolrelay keys create``,
   the processes (:mod:`tests.chaos.deployment`), a webhook endpoint for every event, pointed at the
   flapping receiver, and one call through the whole path before any fault.
2. **Load under faults** for ``duration_s``: the steady load (:mod:`tests.chaos.load`), the faults
   and the receiver's flaps (:mod:`tests.chaos.faults`). A fault under way when the time is up is
   carried to its end (everything back up); then the load's calls still being submitted finish.
3. **Settle**: the receiver answers 200, nothing is disturbed; wait until every accepted call has
   ended and every webhook message is delivered, or ``settle_s`` is up.
4. **Probe** that every process came back: new calls, long-polled, must succeed and each of their
   ends arrive as a verified webhook; every tools worker must run some of them; beat must still be
   sending the dispatcher's pump.
5. **Count** (:mod:`tests.chaos.figures`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tests.chaos import figures
from tests.chaos.deployment import Deployment
from tests.chaos.faults import Faults
from tests.chaos.load import Load
from tests.chaos.receiver import FlappingReceiver, summary
from tests.chaos.services import OwnPostgres, OwnRedis
from tests.chaos.tools import TOOL, UNSERVED
from tests.support.stack import free_port

PROBE_WAIT_S = 40.0


@dataclass(frozen=True)
class Options:
    duration_s: float = 300.0
    rate: float = 10.0
    tool_workers: int = 2
    concurrency: int = 2
    gateway_workers: int = 1
    fault_every_s: float = 8.0
    down_s: tuple[float, float] = (1.0, 4.0)
    long_down_s: float = 13.0
    deadlines_s: tuple[float, ...] = (15.0, 30.0, 60.0)
    work_s: tuple[float, float] = (0.02, 0.4)
    poll_share: float = 0.3
    settle_s: float = 120.0
    slack_s: float | None = None  # None: the lease grace + a sweep interval + 1 s
    probes: int = 12
    seed: int = 1
    settings: dict[str, str] = field(default_factory=dict)
    keep_logs: bool = False


# What the run changes from the production defaults, and why: every delay the faults make a call or a
# message wait for must fit in a run of minutes. A setting given with --setting replaces these.
SETTINGS = {
    "webhook_timeout_s": "2",  # the receiver's hangs go past it
    "webhook_retry_schedule": ",".join(["0", "1", "2", "3"] + ["5"] * 16),  # 20 attempts over ~90 s
    "webhook_breaker_cooldown_s": "2",
    "webhook_breaker_max_s": "10",
    "republish_after_s": "5",  # Redis loses its messages: re-send within a run's time
    # A call whose worker dies in its last attempt ends when the lease runs out, up to the grace after its
    # deadline: a few seconds here (the default, 15 s, gives a slow database that long to take a result).
    "lease_grace_s": "5",
}


def deadline_slack(options: Options, settings: dict[str, str]) -> float:
    """How late past its deadline a call may end: what the README promises for a worker that died in the
    call's last attempt (the lease's grace, then the next sweep), plus a second."""
    if options.slack_s is not None:
        return options.slack_s
    return float(settings.get("lease_grace_s", "15")) + float(settings.get("sweep_interval_s", "2")) + 1


class Clock:
    """Seconds since the run began, for its log lines."""

    def __init__(self) -> None:
        self.began = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.began:6.1f}s] {text}", flush=True)


@dataclass
class Report:
    """The figures and whether the run passed; ``document`` is the JSON of it all."""

    figures: list[figures.Figure]
    document: dict[str, Any]

    @property
    def ok(self) -> bool:
        return figures.verdict(self.figures)


async def chaos(options: Options, clock: Clock) -> Report:
    """The whole run; everything it started is stopped and removed when it returns or raises."""
    log_dir = Path(tempfile.mkdtemp(prefix="toolrelay-chaos-"))
    clock.say(f"logs in {log_dir}")
    postgres: OwnPostgres | None = None
    redis: OwnRedis | None = None
    deployment: Deployment | None = None
    receiver: FlappingReceiver | None = None
    ok = False
    try:
        postgres = OwnPostgres()
        await asyncio.to_thread(postgres.start)
        redis = OwnRedis(log_dir)
        await asyncio.to_thread(redis.start)
        clock.say(f"PostgreSQL {postgres.version} on 127.0.0.1:{postgres.port}, Redis on 127.0.0.1:{redis.port}")
        settings = {**SETTINGS, **options.settings}
        options = replace(options, slack_s=deadline_slack(options, settings))
        deployment = Deployment(log_dir, database_url=postgres.url, broker_url=redis.url,
                                effects=log_dir / "effects.jsonl", tool_workers=options.tool_workers,
                                concurrency=options.concurrency, gateway_workers=options.gateway_workers,
                                settings=settings)
        await asyncio.to_thread(deployment.cli, "migrate")
        api_key = await asyncio.to_thread(deployment.create_key, "chaos")
        receiver = FlappingReceiver(free_port(), hang_s=float(settings["webhook_timeout_s"]) + 1.5, seed=options.seed)
        await receiver.start()
        await asyncio.to_thread(deployment.start_all)
        clock.say(f"started {', '.join(deployment.roles)}; settings {settings}")
        report = await _exercise(options, clock, postgres, redis, deployment, receiver, api_key)
        ok = report.ok
        return report
    finally:
        if deployment is not None:
            deployment.stop_all()
        if receiver is not None:
            await receiver.close()
        if redis is not None:
            redis.close()
        if postgres is not None:
            postgres.close()
        if ok and not options.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            clock.say(f"logs kept in {log_dir}")


async def _exercise(options: Options, clock: Clock, postgres: OwnPostgres, redis: OwnRedis, deployment: Deployment,
                    receiver: FlappingReceiver, api_key: str) -> Report:
    async with Load(deployment.base_url, api_key, rate=options.rate, deadlines_s=options.deadlines_s,
                    work_s=options.work_s, poll_share=options.poll_share, seed=options.seed) as load:
        endpoint_id = await _subscribe(load, receiver)
        first = await load.call("warmup", poll=True)
        if first is None:
            raise RuntimeError(f"the first call was not accepted: {load.answers}")
        faults = Faults(deployment, postgres, redis, receiver, every_s=options.fault_every_s, down_s=options.down_s,
                        long_down_s=options.long_down_s, seed=options.seed, say=clock.say)
        clock.say(f"load: {options.rate:g} calls/s for {options.duration_s:g} s, a fault every "
                  f"~{options.fault_every_s:g} s")
        watcher = asyncio.get_running_loop().create_task(_watch_exits(deployment, clock))
        fault_task = asyncio.get_running_loop().create_task(faults.run())
        flap_task = asyncio.get_running_loop().create_task(faults.flap())
        load_task = asyncio.get_running_loop().create_task(load.run(options.duration_s))
        await asyncio.sleep(options.duration_s)
        faults.stop()
        await asyncio.gather(fault_task, flap_task)
        clock.say(f"faults stopped ({dict(faults.done)}); the load finishes its calls in flight")
        await load_task
        load_figures = dict(sent=load.sent, accepted=len(load.accepted), gave_up=load.gave_up, skipped=load.skipped)
        clock.say(f"load done: {load_figures}; settling (up to {options.settle_s:g} s)")
        settled = await _settle(options, postgres, endpoint_id, load)
        clock.say(f"settled in {settled:.1f} s" if settled >= 0 else "not settled in time")
        probes = await _probe(options, clock, deployment, load, receiver)
        watcher.cancel()
        deployment.check_exits()
    return _report(options, postgres, deployment, receiver, load, faults, endpoint_id, probes, settled)


async def _subscribe(load: Load, receiver: FlappingReceiver) -> str:
    """A webhook endpoint for every event at the receiver; its secret goes to the receiver."""
    answer = await load.request("POST", "/v1/webhook-endpoints", expect=(201,),
                                json={"url": receiver.url, "description": "chaos"})
    if answer is None or answer[0] != 201:
        raise RuntimeError(f"could not create the webhook endpoint: {answer}")
    receiver.secret = str(answer[2]["secret"])
    return str(answer[2]["id"])


async def _watch_exits(deployment: Deployment, clock: Clock) -> None:
    """Say when a process exits that nobody killed (a kill reaps its process at once)."""
    known: set[str] = set()
    while True:
        await asyncio.sleep(1)
        for name, status in deployment.check_exits().items():
            if name not in known:
                known.add(name)
                clock.say(f"!! {name} exited by itself (status {status})")


async def _settle(options: Options, postgres: OwnPostgres, endpoint_id: str, load: Load) -> float:
    """Wait until every accepted call ended and no webhook message is pending; seconds taken, or -1."""
    began = time.monotonic()
    accepted = {a.receipt_id for a in load.accepted.values()}
    while time.monotonic() - began < options.settle_s:
        stored = await asyncio.to_thread(figures.receipts, postgres.admin_conninfo(), TOOL)
        messages = await asyncio.to_thread(figures.webhook_messages, postgres.admin_conninfo(), endpoint_id)
        open_calls = [rid for rid in accepted if rid in stored and stored[rid].status not in figures.TERMINAL]
        open_anywhere = [r for r in stored.values() if r.status not in figures.TERMINAL]
        pending = [m for m in messages if m[1] == "pending"]
        if not open_calls and not open_anywhere and not pending:
            return time.monotonic() - began
        await asyncio.sleep(1)
    return -1.0


@dataclass
class Probes:
    """What the probes found: each must hold, or a process did not come back from the faults."""

    sent: int = 0
    succeeded: int = 0  # the gateway accepted, a worker ran, the database recorded
    announced: int = 0  # the dispatcher delivered their ends
    idle_workers: list[str] = field(default_factory=list)  # tools workers that ran none of them
    beat_sweeping: bool = False  # a call nobody serves was expired by the sweeper in time
    beat_pumping: bool = False  # a webhook that failed its first attempt was retried (beat's pump)

    @property
    def failures(self) -> int:
        return ((self.sent - self.succeeded) + (self.sent - self.announced) + len(self.idle_workers)
                + (not self.beat_sweeping) + (not self.beat_pumping))


def _ends_announced(receiver: FlappingReceiver, kind: str) -> set[str]:
    """Receipts whose end ``kind`` the receiver verified and answered 200 to."""
    return {receipt for webhook_id, (event, receipt, _) in receiver.seen.events.items()
            if event == kind and webhook_id in receiver.seen.acked}


async def _announced(receiver: FlappingReceiver, kind: str, ids: set[str], wait_s: float) -> set[str]:
    deadline = time.monotonic() + wait_s
    while not ids <= _ends_announced(receiver, kind) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    return ids & _ends_announced(receiver, kind)


async def _probe(options: Options, clock: Clock, deployment: Deployment, load: Load,
                 receiver: FlappingReceiver) -> Probes:
    """New calls after the faults: do the gateway, every worker, the dispatcher and beat work again?"""
    probes = Probes(sent=options.probes)
    began = time.time()
    calls = [load.call(f"probe-{n}", poll=True) for n in range(options.probes)]
    accepted = [a for a in await asyncio.gather(*calls) if a is not None]
    ids = set()
    for a in accepted:
        answer = await load.request("GET", f"/v1/receipts/{a.receipt_id}")
        if answer is not None and answer[2].get("status") == "success":
            probes.succeeded += 1
            ids.add(a.receipt_id)
    probes.announced = len(await _announced(receiver, "receipt.succeeded", ids, PROBE_WAIT_S))
    ran_by = {line["pid"] for line in figures.effects(deployment.effects) if line["at"] >= began}
    probes.idle_workers = [name for name in deployment.tool_workers if not ran_by & set(deployment.pids(name))]

    # beat's sweeper: a call to a tool nobody serves ends only when the sweeper expires it.
    answer = await load.request("POST", "/v1/tool-calls", json={"tool": UNSERVED, "arguments": {}, "timeout_s": 3})
    if answer is not None and answer[0] == 202:
        unserved = str(answer[2]["id"])
        ended = await _announced(receiver, "receipt.failed", {unserved}, 3 + (options.slack_s or 0))
        probes.beat_sweeping = bool(ended)
    # beat's pump: a message whose first attempt failed is retried only when beat wakes the dispatcher.
    receiver.fail_next = 2  # the call's running and succeeded messages
    pumped = await load.call("probe-pump", poll=True)
    if pumped is not None:
        probes.beat_pumping = bool(await _announced(receiver, "receipt.succeeded", {pumped.receipt_id}, PROBE_WAIT_S))
    clock.say(f"probes: {probes.succeeded}/{probes.sent} succeeded, {probes.announced} announced by webhook, "
              f"idle workers {probes.idle_workers or 'none'}, beat sweeping {probes.beat_sweeping}, "
              f"beat pumping {probes.beat_pumping}")
    return probes


def _report(options: Options, postgres: OwnPostgres, deployment: Deployment, receiver: FlappingReceiver, load: Load,
            faults: Faults, endpoint_id: str, probes: Probes, settled: float) -> Report:
    conninfo = postgres.admin_conninfo()
    stored = figures.receipts(conninfo, TOOL)
    accepted = {a.key: a.receipt_id for a in load.accepted.values()}
    ran = figures.effects(deployment.effects)
    calls, call_details = figures.write_figures(accepted, stored, ran, slack_s=options.slack_s or 0,
                                                  pg_down=faults.pg_down)
    messages = figures.webhook_messages(conninfo, endpoint_id)
    hooks, hook_details = figures.webhook_figures(messages, stored, accepted, receiver.seen.verified,
                                                  receiver.seen.acked, receiver.seen.events, receiver.seen.unverified)
    answers = load.answers
    http = [
        figures.Figure("server_errors", "5xx other than 503", answers.server_errors, True),
        figures.Figure("answers_503", "503s seen", answers.by_status.get(503, 0)),
        figures.Figure("bad_503", "503s without problem+json or Retry-After", answers.bad_503, True),
        figures.Figure("unexpected", "other unexpected answers", answers.unexpected, True),
        figures.Figure("no_answer", "requests with no answer (timeout, connection)", answers.no_answer, True),
        figures.Figure("client_failures", "calls the load client failed on (the script's own errors)",
                       len(load.failures), True),
        figures.Figure("replays_after_503", "accepted on a retry after a 503 or no answer (replayed)",
                       load.replays_after_503),
    ]
    processes = [
        figures.Figure("exited", "processes that exited by themselves", len(deployment.exited), True),
        figures.Figure("not_reconnected", "probes failed (a process did not come back)", probes.failures, True),
        figures.Figure("settle_timeout", "settle period ran out", int(settled < 0), True),
    ]
    everything = calls + hooks + http + processes
    document = {
        "ok": figures.verdict(everything),
        "figures": {f.key: f.value for f in everything},
        "must_be_zero": sorted(f.key for f in everything if f.must_be_zero),
        "failed": sorted(f.key for f in everything if f.failed),
        "calls": call_details, "webhooks": {**hook_details, "receiver": summary(receiver.seen)},
        "answers": {str(k): v for k, v in sorted(answers.by_status.items())},
        "samples": answers.samples + load.failures[:5],
        "faults": dict(faults.done), "receiver_modes": dict(faults.flaps), "kills": deployment.kills,
        "exited": deployment.exited, "probes": probes.__dict__, "settled_s": round(settled, 1),
        "load": {"sent": load.sent, "gave_up": load.gave_up, "skipped": load.skipped},
        "postgres": {"version": postgres.version, "restarts": postgres.restarts,
                     "down_s": round(sum(to - since for since, to in faults.pg_down), 1)},
        "options": {k: v for k, v in options.__dict__.items()}, "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    return Report(everything, document)
