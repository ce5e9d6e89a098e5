"""The time an execute task has, from the moment its pool process took the message to its hard time limit.

Celery's hard time limit (:func:`receipts.messages.hard_time_limit`: the tool's timeout plus half the
lease grace) counts from when a pool process took the message, and it kills the process: the
worker's main process then records the attempt ``failed``/``timeout`` (:mod:`workers.hard_limit`).
That record is only true of a tool that overran. So everything else the task does must fit in the
same time, waits for the database included, and the task returns before the limit whatever the
database does:

- the claim waits for a connection at most half the tool's timeout (the database is down: the call
  stays ``pending``, and a message is sent again);
- the attempt's timeout counts from when the task began, as the limit does, less a quarter of the
  grace that a claim may take for free: a claim that waited longer comes out of the tool's time (it
  still gets at least half its timeout), a quick one (every claim while the database is up) not;
- recording the attempt's end has the rest (at least a quarter of the grace), less a margin; a
  database that does not take it by then
  leaves it to the lease: the sweeper settles the call when the lease runs out (``outcome_unknown``
  for a write that is not idempotent, which may have happened and is not run again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from receipts.messages import hard_time_limit

MARGIN_S = 0.5  # the task returns at least this long before its hard time limit (a quarter of the grace if less)


@dataclass(frozen=True)
class Budget:
    """One execute task's time: ``timeout_s`` is the tool's, ``grace_s`` the lease grace."""

    timeout_s: float
    grace_s: float
    began: float = field(default_factory=time.monotonic)

    @property
    def claim_wait_s(self) -> float:
        """The longest the claim waits for a database connection."""
        return self.timeout_s / 2

    def attempt_s(self) -> float:
        """What is left of the tool's timeout, counted from when the task began, plus a quarter of the grace."""
        return self.began + self.timeout_s + self.grace_s / 4 - time.monotonic()

    def record_s(self) -> float:
        """What is left to record the attempt's end before the task must return."""
        margin = min(MARGIN_S, self.grace_s / 4)
        return self.began + hard_time_limit(self.timeout_s, self.grace_s) - margin - time.monotonic()
