"""A tiny perf test for node acceptance on a local Slurm (tests/workloads/test_slurm.py, benchmarks/slurm_fleet.py):
a Python loop timed in thread CPU time, so that four emulated nodes sharing two cores measure their own work, not
each other's; SPIN_FACTOR makes a node's work that many times larger, SPIN_HANG makes it hang."""

import textwrap

SPIN = textwrap.dedent(
    """
    import os
    import time


    def test_spin(perf):
        if os.environ.get("SPIN_HANG"):
            time.sleep(600)  # a node that hangs
        work = int(40000 * float(os.environ.get("SPIN_FACTOR", "1")))
        samples = []
        for _ in range(15):
            start = time.thread_time()
            total = 0
            for i in range(work):
                total += i
            samples.append(time.thread_time() - start)
        perf.record("spin_s", samples, unit="s", higher_is_better=False, context={"device": "cpu"})
    """
)
