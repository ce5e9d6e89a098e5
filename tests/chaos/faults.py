"""The faults, one after another while the load runs, and the receiver's flapping beside them.

Every cycle goes through each kind once, in a shuffled order (the first cycle in a fixed one, so that
a short run has them all):

- ``kill_worker``: SIGKILL a tools worker and its pool children, start it again a moment later;
- ``redis_crash``: ``SHUTDOWN NOSAVE`` (every queued message is lost), start Redis again after a while;
- ``pg_restart``: ``pg_ctl restart -m immediate`` (every connection dropped mid-flight, WAL replayed);
- ``kill_pool_child``: SIGKILL one pool process of a tools worker (its main process replaces it);
- ``pg_outage``: ``pg_ctl stop -m immediate``, PostgreSQL down for a while, then started again;
- ``kill_dispatcher``: SIGKILL the webhooks worker (the dispatcher) and start it again;
- ``pg_long_outage``: PostgreSQL down longer than a request waits for a connection (10 s), so that
  the requests that need it are answered 503 (``long_down_s``).

Blocking steps (``pg_ctl``, waiting for a worker to be ready) run on threads, so the load keeps going.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable

from tests.chaos.deployment import Deployment
from tests.chaos.receiver import FlappingReceiver
from tests.chaos.services import OwnPostgres, OwnRedis

KINDS = ("kill_worker", "redis_crash", "pg_restart", "kill_pool_child", "pg_outage", "kill_dispatcher",
         "pg_long_outage")
RECEIVER_MODES = {"ok": 4, "mixed": 2, "error": 1, "hang": 1, "reset": 1}  # weights of the receiver's phases


class Faults:
    """Injects faults every ``every_s`` (jittered) until stopped; ``done`` counts them by kind."""

    def __init__(self, deployment: Deployment, postgres: OwnPostgres, redis: OwnRedis, receiver: FlappingReceiver,
                 *, every_s: float, down_s: tuple[float, float], long_down_s: float, seed: int,
                 say: Callable[[str], None]) -> None:
        self.deployment = deployment
        self.postgres = postgres
        self.redis = redis
        self.receiver = receiver
        self.every_s = every_s
        self.down_s = down_s
        self.long_down_s = long_down_s
        self.rng = random.Random(seed)
        self.say = say
        self.done: Counter[str] = Counter()
        self.flaps: Counter[str] = Counter()
        self.last_fault_at = 0.0
        self.pg_down: list[tuple[float, float]] = []  # (from, to), Unix time: while nothing could be recorded
        self._stopping = asyncio.Event()
        self._restarting: dict[str, asyncio.Task[None]] = {}

    def stop(self) -> None:
        self._stopping.set()

    async def _pause(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless stopped first; whether to go on."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return True
        return False

    def _down(self) -> float:
        return round(self.rng.uniform(*self.down_s), 1)

    async def run(self) -> None:
        """Fault after fault until :meth:`stop`; a fault under way is carried to its end (services back up,
        killed processes started again)."""
        try:
            await self._faults()
        finally:
            await self.restarted()

    async def _faults(self) -> None:
        order = list(KINDS)
        while True:
            for kind in order:
                if not await self._pause(self.every_s * self.rng.uniform(0.6, 1.4)):
                    return
                await getattr(self, kind)()
                self.done[kind] += 1
                self.last_fault_at = time.monotonic()
            order = self.rng.sample(KINDS, len(KINDS))

    async def flap(self) -> None:
        """Change the receiver's mode every 1.5-5 s until stopped; it answers 200 again afterwards."""
        modes, weights = zip(*RECEIVER_MODES.items(), strict=True)
        while await self._pause(self.rng.uniform(1.5, 5.0)):
            mode = self.rng.choices(modes, weights)[0]
            self.receiver.mode = mode
            self.flaps[mode] += 1
        self.receiver.mode = "ok"

    # -- the faults ------------------------------------------------------------------------------

    def _up(self) -> list[str]:
        """The tools workers not being restarted."""
        return [name for name in self.deployment.tool_workers if name not in self._restarting]

    async def kill_worker(self) -> None:
        up = self._up()
        if not up:  # every one is coming back from a kill: kill a pool process instead when one is
            await self.kill_pool_child()
            return
        await self._kill_and_restart(self.rng.choice(up))

    async def kill_dispatcher(self) -> None:
        if "webhooks" not in self._restarting:
            await self._kill_and_restart("webhooks")

    async def _kill_and_restart(self, name: str) -> None:
        """Kill now; start again in the background (a worker takes seconds to be ready): the faults go on."""
        self.deployment.kill(name)
        down = round(self.rng.uniform(0.2, 2.0), 1)
        self.say(f"fault: kill -9 {name} (with its pool), restart in {down:g} s")
        self._restarting[name] = asyncio.get_running_loop().create_task(self._restart(name, down))

    async def _restart(self, name: str, after_s: float) -> None:
        try:
            await asyncio.sleep(after_s)
            await asyncio.to_thread(self.deployment.start, name)
        finally:
            self._restarting.pop(name, None)

    async def restarted(self) -> None:
        """Wait for the restarts under way (a failed one raises)."""
        await asyncio.gather(*list(self._restarting.values()))

    async def kill_pool_child(self) -> None:
        up = self._up()
        if not up:
            return
        name = self.rng.choice(up)
        pid = self.deployment.kill_pool_child(name, self.rng)
        self.say(f"fault: kill -9 pool process {pid} of {name}")

    async def redis_crash(self) -> None:
        down = self._down()
        await asyncio.to_thread(self.redis.crash)
        self.say(f"fault: Redis SHUTDOWN NOSAVE, down {down:g} s")
        await asyncio.sleep(down)
        await asyncio.to_thread(self.redis.start)

    async def pg_restart(self) -> None:
        began = time.time()
        await asyncio.to_thread(self.postgres.crash_restart)
        self.pg_down.append((began, time.time()))
        self.say(f"fault: pg_ctl restart -m immediate ({time.time() - began:.1f} s)")

    async def pg_long_outage(self) -> None:
        await self.pg_outage(self.long_down_s)

    async def pg_outage(self, down: float | None = None) -> None:
        down = self._down() if down is None else down
        began = time.time()
        await asyncio.to_thread(self.postgres.stop_immediate)
        self.say(f"fault: pg_ctl stop -m immediate, down {down:g} s")
        await asyncio.sleep(down)
        await asyncio.to_thread(self.postgres.start_again)
        self.pg_down.append((began, time.time()))
