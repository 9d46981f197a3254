"""A tiny perf test for node acceptance on a local Slurm (tests/workloads/test_slurm.py, benchmarks/slurm_fleet.py):
a Python loop timed in thread CPU time, best of 5 per sample, so that four emulated nodes sharing two cores measure
their own work, not each other's; SPIN_FACTOR makes a node's work that many times larger, SPIN_HANG makes it hang."""

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
            # Best of 5, samples 20 ms apart: on a shared VM a burst of a neighbour's work (or the host taking the
            # vCPU, which the guest still counts as this thread's CPU time) inflates some runs, not the minimum.
            runs = []
            for _ in range(5):
                start = time.thread_time()
                total = 0
                for i in range(work):
                    total += i
                runs.append(time.thread_time() - start)
            samples.append(min(runs))
            time.sleep(0.02)
        perf.record("spin_s", samples, unit="s", higher_is_better=False, context={"device": "cpu"})
    """
)
