"""The execute task when the database does not answer: the same message again a second later, as
long as it keeps not answering (up to EXECUTE_RETRIES), then left to the sweeper. Run eagerly: a
retry of an eager task runs again at once, with the arguments of the first.

The executor is replaced on the class: Celery gives a task to every app made later in the process,
and a later app's task of the same name is the first app's, with that app's services.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest

from receipts.errors import Unavailable
from receipts.messages import EXECUTE_TASK
from receipts.settings import Settings
from workers.celery_app import EXECUTE_RETRIES, EXECUTE_RETRY_S, WorkerServices, make_celery


class Executor:
    """Raises ``failure`` on the first ``failing`` calls, then returns; remembers every call."""

    def __init__(self, failing: int, failure: Exception | None = None) -> None:
        self.failing = failing
        self.failure = failure or Unavailable("the database is unavailable: connection timeout")
        self.calls: list[tuple[str, float | None]] = []

    def execute(self, receipt_id: str, lease_s: float | None) -> None:
        self.calls.append((receipt_id, lease_s))
        if len(self.calls) <= self.failing:
            raise self.failure


@pytest.fixture
def execute_task(monkeypatch: pytest.MonkeyPatch) -> Callable[[Executor], Any]:
    task = make_celery(Settings(broker_url="memory://")).app.tasks[EXECUTE_TASK]

    def with_executor(executor: Executor) -> Any:
        monkeypatch.setattr(WorkerServices, "executor", property(lambda _: executor))
        return task

    return with_executor


def test_an_execute_the_database_did_not_answer_is_sent_again_a_second_later(execute_task: Any) -> None:
    executor = Executor(failing=3)
    task = execute_task(executor)
    with mock.patch.object(task, "retry", wraps=task.retry) as retry:
        result = task.apply(args=("rcpt_1", 12.0))
    assert result.state == "SUCCESS"
    assert executor.calls == [("rcpt_1", 12.0)] * 4  # the same call, the same lease, until it answered
    assert retry.call_count == 3
    assert all(call.kwargs["countdown"] == EXECUTE_RETRY_S for call in retry.call_args_list)
    assert all(isinstance(call.kwargs["exc"], Unavailable) for call in retry.call_args_list)


def test_after_its_retries_the_execute_is_left_to_the_sweeper(execute_task: Any) -> None:
    executor = Executor(failing=EXECUTE_RETRIES + 5)
    result = execute_task(executor).apply(args=("rcpt_2", None))
    assert result.state == "FAILURE" and isinstance(result.result, Unavailable)
    assert len(executor.calls) == EXECUTE_RETRIES + 1  # the first try and every retry, then no more


@pytest.mark.parametrize("failure", [RuntimeError("a bug"), KeyError("receipt")])
def test_any_other_error_is_not_retried(execute_task: Any, failure: Exception) -> None:
    executor = Executor(failing=1, failure=failure)
    result = execute_task(executor).apply(args=("rcpt_3", None))
    assert result.state == "FAILURE" and result.result is failure
    assert executor.calls == [("rcpt_3", None)]
