"""The ranks of a `torchrun -m pytest` job take the same rounds of a measurement (core/record/ranks.py).

A measurement whose calls are collectives must make the same calls on every rank: a round measured again by one
rank alone (its spread above the noise limit, the other's not) waited for a partner that had moved on.
"""

from __future__ import annotations

import sys

import pytest

PROJECT = """
import torch
import torch.distributed as dist
import pytest

@pytest.mark.perf
def test_step(perf):
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    # rank 1 alone finds each round too noisy and asks for another; rank 0 finds each one quiet enough
    perf._noise_limit = 0.0 if dist.get_rank() == 1 else 1e9
    calls = [0]
    tensor = torch.ones(4)

    def step():
        calls[0] += 1
        dist.all_reduce(tensor)

    perf.measure("step", step, warmup=1, repeats=5)
    with open(f"calls-{dist.get_rank()}", "w") as out:
        out.write(str(calls[0]))
"""


def test_a_round_one_rank_asks_for_is_taken_by_every_rank(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    pytester.makepyfile(test_ranked=PROJECT)
    done = pytester.run(
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "pytest",
        "-p", "no:cacheprovider", "-q", "--gpuperf-device", "cpu", "--gpuperf-remeasure", "2", timeout=120,
    )  # fmt: skip
    out = done.stdout.str() + done.stderr.str()
    assert done.ret == 0, out
    calls = [int((pytester.path / f"calls-{rank}").read_text()) for rank in (0, 1)]
    assert calls == [1 + 3 * 5, 1 + 3 * 5], out  # the warm-up and three rounds of five on both ranks
