"""--gpuperf-inject-slowdown distributed=PCT on CPU: after each timed step, PCT% of the fastest warmup step's wall
time spent as CPU work, so a loaded machine stretches it as it stretches the step (a sleep it would not)."""

from __future__ import annotations

import time

from pytest_gpuperf.distributed.training import _slowed


def test_each_timed_step_spends_the_fastest_warmup_step_s_wall_time_as_cpu_time() -> None:
    # Steps that only wait (as a collective does): no CPU time of their own. The first warmup step is long, as
    # allocation makes it: its time is not the step's.
    waits = iter([0.2, 0.02, 0.03] + [0.02] * 4)

    def step(loss: object, optimizer: object) -> None:
        time.sleep(next(waits))

    slowed = _slowed(step, 0.99, 3, None)
    spent = []
    for _ in range(7):
        start = time.process_time()
        slowed(None, None)
        spent.append(time.process_time() - start)
    assert all(cost < 0.01 for cost in spent[:3]), spent  # warmup: the steps' own (sleeping) time
    for cost in spent[3:]:  # 0.99 x the fastest warmup step (>= 0.02 s of wall time), never the 0.2 s one
        assert 0.99 * 0.02 * 0.95 < cost < 0.1, spent


def test_no_slowdown_is_the_step_itself() -> None:
    def step(loss: object, optimizer: object) -> None:
        pass

    assert _slowed(step, 0.0, 3, None) is step
