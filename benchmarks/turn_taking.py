"""How much of a `gpuperf ab` pair's noise two sessions taking turns would remove, on this machine.

A pair of `gpuperf ab` runs its two sessions one after the other, so whatever the machine does between them (a
host's state that lasts seconds) lands in the pair's ratio. This measures the alternative before the engine is
built for it: both processes alive at once, taking turns call by call (a parent grants the turn; the one not
measuring is blocked on a pipe, not spinning), against the same two processes run one after the other. Each
process times 60 calls of the ab_power.py workload (100 one-thread 128x128 matmuls) after 3 warm-up calls and
reports its best call; the figure is the sd of the pairs' log-ratios of best calls (A/A: both sides do the same
work). Written here, not taken from a library: it drives two processes through pipes and nothing more.

    python benchmarks/turn_taking.py --pairs 16 [--pin CPU]

Prints each pair's four best calls (turns A, B | one after the other A, B), then the two sds.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys

CHILD = r"""
import os, sys, time
if os.environ.get("TURN_PIN"):
    os.sched_setaffinity(0, {int(os.environ["TURN_PIN"])})
import torch
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
a = torch.randn(128, 128, generator=g)
b = torch.randn(128, 128, generator=g)
take_turns = sys.argv[1] == "turns"
def call():
    for _ in range(100):
        torch.mm(a, b)
times = []
for i in range(63):
    if take_turns:  # ask for the turn (ending this process's previous one) and wait for it
        sys.stdout.buffer.write(b"r")
        sys.stdout.buffer.flush()
        if sys.stdin.buffer.read(1) != b"g":
            break
    started = time.perf_counter()
    call()
    times.append(time.perf_counter() - started)
sys.stderr.write(repr(min(times[3:])) + "\n")
"""


def _best(stderr: bytes) -> float:
    return float(stderr.decode().strip().splitlines()[-1])


def pair_taking_turns(env: dict[str, str]) -> tuple[float, float]:
    """Both processes alive; the turn passes A, B, A, B... once both have asked for it."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, "turns"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    for proc in procs:
        assert proc.stdout is not None
        proc.stdout.read(1)  # both have started and asked: neither measures while the other imports torch
    alive = [True, True]
    turn = 0
    while any(alive):
        proc = procs[turn]
        if alive[turn]:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(b"g")
            proc.stdin.flush()
            if proc.stdout.read(1) != b"r":
                alive[turn] = False
        if alive[1 - turn]:
            turn = 1 - turn
    first, second = (_best(proc.communicate()[1]) for proc in procs)
    return first, second


def one_process(env: dict[str, str]) -> float:
    return _best(subprocess.run([sys.executable, "-c", CHILD, "alone"], env=env, capture_output=True).stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--pin", type=int, default=None, help="pin every process to this CPU")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.pin is not None:
        env["TURN_PIN"] = str(args.pin)
    ratios: dict[str, list[float]] = {"turns": [], "one after the other": []}
    for index in range(args.pairs):
        turns = pair_taking_turns(env)
        alone = (one_process(env), one_process(env))
        ratios["turns"].append(math.log(turns[1] / turns[0]))
        ratios["one after the other"].append(math.log(alone[1] / alone[0]))
        print(f"pair {index + 1}: turns {turns[0] * 1e3:.3f} {turns[1] * 1e3:.3f} ms | "
              f"one after the other {alone[0] * 1e3:.3f} {alone[1] * 1e3:.3f} ms", flush=True)  # fmt: skip
    for name, values in ratios.items():
        print(f"{name}: pair log-ratio sd {statistics.stdev(values):.2%}, mean {statistics.mean(values):+.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
