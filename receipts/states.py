"""The receipt state machine, as data.

``TRANSITIONS[a]`` is the set of statuses a receipt in status ``a`` may move to. Terminal states
have no way out: once a receipt is success, failed, partially_succeeded or canceled it never changes.
"""

from __future__ import annotations

from typing import Final

PENDING: Final = "pending"
RUNNING: Final = "running"
WAITING: Final = "waiting"
SUCCESS: Final = "success"
FAILED: Final = "failed"
PARTIALLY_SUCCEEDED: Final = "partially_succeeded"
CANCELED: Final = "canceled"

STATUSES: Final = (PENDING, RUNNING, WAITING, SUCCESS, FAILED, PARTIALLY_SUCCEEDED, CANCELED)
TERMINAL: Final = frozenset({SUCCESS, FAILED, PARTIALLY_SUCCEEDED, CANCELED})
ACTIVE: Final = frozenset(STATUSES) - TERMINAL

TRANSITIONS: Final[dict[str, frozenset[str]]] = {
    PENDING: frozenset({RUNNING, FAILED, CANCELED}),
    RUNNING: frozenset({PENDING, SUCCESS, FAILED, PARTIALLY_SUCCEEDED, CANCELED}),
    WAITING: frozenset({PENDING, SUCCESS, FAILED, CANCELED}),  # pending: a person approved the call
    SUCCESS: frozenset(),
    FAILED: frozenset(),
    PARTIALLY_SUCCEEDED: frozenset(),
    CANCELED: frozenset(),
}

# The webhook event each status change announces (pending is not announced: the 202 says it).
EVENT_TYPES: Final[dict[str, str]] = {
    RUNNING: "receipt.running",
    WAITING: "receipt.waiting",
    SUCCESS: "receipt.succeeded",
    PARTIALLY_SUCCEEDED: "receipt.succeeded",
    FAILED: "receipt.failed",
    CANCELED: "receipt.canceled",
}
APPROVAL_REQUESTED: Final = "receipt.approval_requested"  # a call that waits for a person's decision
BATCH_COMPLETED: Final = "batch.completed"
# A run's end states and its wait for a person, and the events that announce them.
RUN_EVENT_TYPES: Final[dict[str, str]] = {
    "success": "run.succeeded",
    "failed": "run.failed",
    "canceled": "run.canceled",
    "waiting": "run.waiting",
}
# Every event an endpoint can subscribe to: the receipts' transitions, and the other announcements.
WEBHOOK_EVENT_TYPES: Final = frozenset({*EVENT_TYPES.values(), APPROVAL_REQUESTED, BATCH_COMPLETED,
                                        *RUN_EVENT_TYPES.values()})

# error.code vocabulary (DESIGN.md).
ERROR_CODES: Final = frozenset(
    {
        "invalid_arguments",
        "tool_error",
        "timeout",
        "upstream_error",
        "outcome_unknown",
        "expired",
        "canceled",
        "not_found",
        "forbidden",
        "rejected",
        "internal",
    }
)
# A run's error codes: the receipts' and the loop's own rails.
RUN_ERROR_CODES: Final = ERROR_CODES | {"max_iterations", "loop_detected"}


def can_move(current: str, target: str) -> bool:
    """Whether the state machine allows ``current -> target``."""
    return target in TRANSITIONS[current]


def sources_of(target: str) -> frozenset[str]:
    """Every status from which ``target`` may be reached (used in conditional UPDATEs)."""
    return frozenset(state for state, nexts in TRANSITIONS.items() if target in nexts)
