"""The training proxies as MLPerf Training runs: a real MLPerf log written through mlperf_logging's ``MLLogger``.

``python -m pytest_gpuperf.training.mlperf_proxy --seed 1 --output result_1.txt`` fine-tunes tiny-lora's
architecture with rank-16, alpha-32 adapters (frozen base pretrained first) on a shifted Markov chain until the
eval loss reaches llama2_70b_lora's 0.925 (closed division, ruleset 5.1.0: only what ran is logged); ``--proxy
pretrain`` pretrains tiny-llama and logs the open division under its own benchmark name, never closed llama31_8b.
Imports torch and mlperf_logging: run as a command (frameworks/mlperf.py reads the log), never from the plugin.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from mlperf_logging.mllog import constants as c
from mlperf_logging.mllog import mllog

from pytest_gpuperf.models.registry import ModelSpec, get_spec
from pytest_gpuperf.training.corpus import MarkovChain
from pytest_gpuperf.training.loop import train
from pytest_gpuperf.training.workload import build_prepared, pretrain_state

LORA_TARGET = 0.925
"""llama2_70b_lora's eval loss target (closed_llama2_70b_lora.yaml of ruleset 5.1.0: eval_accuracy <= 0.925)."""
PRETRAIN_BENCHMARK = "gpuperf_tiny_pretrain"
"""The pretraining proxy's own name: it runs nothing of llama31_8b's closed rules (sequence 8192, its data)."""
PRETRAIN_STEPS = 40
"""Steps of the base model's pretraining (the "checkpoint" the LoRA run loads during init, untimed as MLPerf's)."""
GRADIENT_CLIP = 0.3
"""The reference implementation's max grad norm for llama2_70b_lora; applied here, so logging it is true."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Proxy:
    """One proxy: what it trains, the target it stops at and what its log claims."""

    benchmark: str
    division: str
    spec: ModelSpec
    target: float
    batch_size: int
    lr: float
    eval_every: int
    max_steps: int
    eval_batches: int = 4


def lora_proxy() -> Proxy:
    spec = dataclasses.replace(get_spec("tiny-lora"), name="tiny-lora-r16", lora_rank=16, lora_alpha=32.0)
    return Proxy(benchmark="llama2_70b_lora", division="closed", spec=spec, target=LORA_TARGET, batch_size=8,
                 lr=1e-2, eval_every=10, max_steps=200)  # fmt: skip


def pretrain_proxy() -> Proxy:
    return Proxy(benchmark=PRETRAIN_BENCHMARK, division="open", spec=get_spec("tiny-llama"), target=LORA_TARGET,
                 batch_size=8, lr=3e-3, eval_every=10, max_steps=300)  # fmt: skip


PROXIES = {"lora": lora_proxy, "pretrain": pretrain_proxy}


def run_logger(output: Path | None) -> mllog.MLLogger:
    """An ``MLLogger`` of this run alone: mllog's shared logger adds a file handler at every ``config(filename=)``,
    so two runs in one process would write into each other's files."""
    logger = logging.Logger(f"gpuperf.mlperf.{id(output)}", level=logging.INFO)
    logger.addHandler(logging.StreamHandler(sys.stdout))
    if output is not None:
        logger.addHandler(logging.FileHandler(output, mode="w", encoding="utf-8"))
    return mllog.MLLogger(logger=logger, default_stack_offset=1, root_dir=str(Path(__file__).parents[2]))


def run(proxy: Proxy, *, seed: int, output: Path | None, slowdown: float = 1.0) -> bool:
    """Train ``proxy`` with ``seed``, logging it; True when the eval loss reached the target."""
    torch.set_num_threads(1)
    log = run_logger(output)
    spec = proxy.spec
    log.event(c.CACHE_CLEAR, value=True)
    log.start(c.INIT_START)
    log.event(c.SUBMISSION_BENCHMARK, value=proxy.benchmark)
    log.event(c.SUBMISSION_DIVISION, value=proxy.division)
    log.event(c.SUBMISSION_ORG, value="pytest-gpuperf proxy")
    log.event(c.SUBMISSION_PLATFORM, value=f"1x{platform.machine()} CPU, torch {torch.__version__}")
    log.event(c.SUBMISSION_STATUS, value="research")
    log.event(c.SEED, value=seed)
    log.event(c.GLOBAL_BATCH_SIZE, value=proxy.batch_size)
    log.event(c.GRADIENT_ACCUMULATION_STEPS, value=1)
    log.event(c.OPT_BASE_LR, value=proxy.lr)
    log.event(c.OPT_LR_TRAINING_STEPS, value=proxy.max_steps)
    log.event(c.OPT_ADAMW_WEIGHT_DECAY, value=0.0)
    log.event(c.OPT_GRADIENT_CLIP_NORM, value=GRADIENT_CLIP)
    log.event("max_sequence_length", value=spec.seq_len)
    if spec.is_lora:
        log.event("lora_rank", value=spec.lora_rank)
        log.event("lora_alpha", value=spec.lora_alpha)
    log.event(c.TRAIN_SAMPLES, value=proxy.max_steps * proxy.batch_size)
    log.event(c.EVAL_SAMPLES, value=proxy.eval_batches * proxy.batch_size)
    source = MarkovChain.random(vocab_size=spec.vocab_size, branching=2, seed=0)
    chain = source.shifted(fraction=0.5) if spec.is_lora else source
    state = None
    if spec.is_lora:  # the base model is the "pretrained checkpoint": loaded during init, as the reference does
        state = pretrain_state(spec.base_spec(), seed=0, device="cpu", steps=PRETRAIN_STEPS, lr=3e-3,
                               batches=lambda step: source.batch(step, batch_size=8, seq_len=spec.seq_len))  # fmt: skip
    prepared = build_prepared(spec, seed=seed, precision="fp32", device="cpu", state=state)
    model = prepared.model
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=proxy.lr, weight_decay=0.0)

    def step(loss: torch.Tensor, opt: torch.optim.Optimizer) -> None:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, GRADIENT_CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)

    log.end(c.INIT_STOP)
    log.start(c.RUN_START)
    done, reached = 0, False
    while done < proxy.max_steps and not reached:
        samples = done * proxy.batch_size
        log.start(c.BLOCK_START, metadata={c.SAMPLES_COUNT: samples})
        began = time.perf_counter()
        result = train(model, loss_fn=spec.loss, optimizer=optimizer, step=step, steps=proxy.eval_every,
                       first_step=done, batches=lambda i: chain.batch(i, batch_size=proxy.batch_size,
                                                                      seq_len=spec.seq_len, stream=1))  # fmt: skip
        if slowdown > 1.0:  # a system `slowdown` times slower: each block of steps takes that much longer
            time.sleep((time.perf_counter() - began) * (slowdown - 1.0))
        done += proxy.eval_every
        samples = done * proxy.batch_size
        log.event("tracked_stats", value={"throughput": proxy.eval_every * proxy.batch_size /
                                          (time.perf_counter() - began), "train_loss": result.losses[-1]},
                  metadata={"step": done})  # fmt: skip
        log.end(c.BLOCK_STOP, metadata={c.SAMPLES_COUNT: samples})
        log.start(c.EVAL_START, metadata={c.SAMPLES_COUNT: samples})
        loss = evaluate(proxy, model, chain)
        log.event(c.EVAL_ACCURACY, value=round(loss, 4), metadata={c.SAMPLES_COUNT: samples, "epoch_num": done})
        log.end(c.EVAL_STOP, metadata={c.SAMPLES_COUNT: samples})
        reached = loss <= proxy.target
    status = c.SUCCESS if reached else c.ABORTED
    log.end(c.RUN_STOP, metadata={"status": status, c.SAMPLES_COUNT: done * proxy.batch_size})
    return reached


def evaluate(proxy: Proxy, model: torch.nn.Module, chain: MarkovChain) -> float:
    """Mean loss on held-out batches (their own stream, the same ones at every eval)."""
    with torch.no_grad():
        losses = [
            float(
                proxy.spec.loss(
                    model, *chain.batch(i, batch_size=proxy.batch_size, seq_len=proxy.spec.seq_len, stream=7)
                )
            )  # fmt: skip
            for i in range(proxy.eval_batches)
        ]
    return sum(losses) / len(losses)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_gpuperf.training.mlperf_proxy", description=__doc__)
    parser.add_argument("--proxy", choices=sorted(PROXIES), default="lora")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", type=Path, default=None, help="the log file (result_N.txt); stdout as well")
    parser.add_argument("--slowdown", type=float, default=1.0, help="make every step this many times as long")
    args = parser.parse_args(argv)
    run(PROXIES[args.proxy](), seed=args.seed, output=args.output, slowdown=args.slowdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
