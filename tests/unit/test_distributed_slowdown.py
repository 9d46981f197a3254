"""--gpuperf-inject-slowdown distributed=PCT on CPU: each timed step does PCT% more CPU work than the cheapest
warmup step, in process time, so a loaded machine stretches it as it stretches the step (a sleep it would not)."""

from __future__ import annotations

import time

from pytest_gpuperf.distributed.training import _slowed, _spend_cpu


def test_each_timed_step_spends_the_cheapest_warmup_step_again_in_cpu_time() -> None:
    costs = iter([0.06, 0.02, 0.03] + [0.02] * 4)  # the first warmup step allocates: its cost is not the step's

    def step(loss: object, optimizer: object) -> None:
        _spend_cpu(next(costs))

    slowed = _slowed(step, 0.99, 3, None)
    spent = []
    for _ in range(7):
        start = time.process_time()
        slowed(None, None)
        spent.append(time.process_time() - start)
    for cost in spent[3:]:  # 0.02 + 0.99 x 0.02, in CPU time whatever the load
        assert 0.0398 * 0.9 < cost < 0.0398 * 1.25, spent


def test_no_slowdown_is_the_step_itself() -> None:
    def step(loss: object, optimizer: object) -> None:
        pass

    assert _slowed(step, 0.0, 3, None) is step
