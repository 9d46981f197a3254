"""The clock of the inference end-to-end workloads, as source for their pytester test files.

Time passes only as the workload says: 50 us per reading (prefill and bookkeeping), one decode step's cost per
decode forward, each with seeded jitter, and an open loop's idle waits. The model runs for real; its speed on a
loaded machine cannot move the verdict.
"""

VIRTUAL_CLOCK = """
import random

class VirtualClock:
    def __init__(self, step_s, seed):
        self.now, self.step_s, self.rng = 100.0, step_s, random.Random(seed)
    def __call__(self):
        self.now += 5e-5 * self.rng.uniform(0.9, 1.1)
        return self.now
    def decode_step(self):
        self.now += self.step_s * self.rng.uniform(0.97, 1.03)
    def sleep(self, seconds):
        self.now += seconds
"""
