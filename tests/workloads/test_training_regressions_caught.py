"""What the training suite must catch, proven on the suite itself (pytest_gpuperf/suites/test_training.py run by
pytester).

Goldens and baselines are recorded for ``test_pretrain[tiny-llama]``; then a conftest.py overrides the suite's
``gpuperf_model_hook`` fixture:

* a numerics regression: every linear layer's output is multiplied by ``1 + 0.1 * noise`` (noise ~ N(0, 1)
  per element), a small relative error, so the loss curve leaves the golden band and the test fails on convergence;
* a speed regression: every step takes ~4x as long (each forward first sleeps three times the previous step's
  work; numerics untouched), so step time and tokens/s are REGRESSED while convergence still passes. This is
  real timing, so the effect is one a loaded machine cannot hide: doubling the linear layers' work (the former
  version) slowed a step by less than 2x, which a burst of load during the baseline recording could cancel.

The regression runs use generous thresholds so that a loaded 2-core machine's jitter cannot decide them.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[2] / "pytest_gpuperf" / "suites" / "test_training.py"
SUITE_CONFTEST = SUITE.with_name("conftest.py")
"""The suites' fixtures (cpu_threads): a copy of the suite needs them, and a test's overrides are added to them."""


def _copy_suite(root: Path, overrides: str = "") -> None:
    (root / "test_training.py").write_text(SUITE.read_text())
    (root / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    (root / "conftest.py").write_text(SUITE_CONFTEST.read_text() + "\n" + overrides)


PERTURB = """
import pytest
import torch
from torch import nn

EPS = {eps}

@pytest.fixture
def gpuperf_model_hook():
    def perturb(model):
        def noisy(module, inputs, output):
            return output * (1 + EPS * torch.randn_like(output))
        for module in model.modules():
            if type(module) is nn.Linear:
                module.register_forward_hook(noisy)
    return perturb
"""

SLOWER = """
import time
import pytest

@pytest.fixture
def gpuperf_model_hook():
    def slower(model):
        # Three times the work of the step before (the time between two forwards less the sleep in it), slept
        # before each forward: every step takes ~4x as long whatever the machine's load.
        state = {"start": None, "slept": 0.0}
        def sleep_first(module, inputs):
            now = time.perf_counter()
            if state["start"] is not None:
                state["slept"] = 3 * max(0.0, now - state["start"] - state["slept"])
                time.sleep(state["slept"])
            state["start"] = now
        model.register_forward_pre_hook(sleep_first)
    return slower
"""

SELECT = ("-p", "no:randomly", "--gpuperf-device", "cpu", "-k", "test_pretrain and tiny-llama")


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the suite with goldens and baselines of test_pretrain[tiny-llama] recorded, once per run: under
    pytest-xdist the two tests that read it may run on different workers, and each recording costs a whole run of
    the suite's test (their shared base folder and a lock make the second worker wait for the first's)."""
    import os
    import subprocess
    import sys

    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        shared = shared.parent  # this run's folder, above each worker's own (without xdist: that of every run)
    root = shared / "training-recorded"
    with FileLock(str(shared / "training-recorded.lock")):
        if not (root / "recorded").exists():
            shutil.rmtree(root, ignore_errors=True)  # a worker that failed to record left a part
            root.mkdir()
            _copy_suite(root)
            done = subprocess.run([sys.executable, "-m", "pytest", *SELECT, "--gpuperf-save", "-q"], cwd=root,
                                  capture_output=True, text=True, timeout=600)  # fmt: skip
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            assert list((root / "baselines").glob("*/test_training.json"))
            (root / "recorded").touch()
    return root


@pytest.fixture
def suite(recorded: Path, tmp_path: Path) -> Path:
    """This test's own copy of the recorded suite: its conftest.py overrides must not reach another test's run."""
    copy = tmp_path / "suite"
    shutil.copytree(recorded, copy)
    return copy


def _rerun(root: Path, conftest: str, *extra: str) -> tuple[int, str]:
    import subprocess
    import sys

    _copy_suite(root, overrides=conftest)
    done = subprocess.run([sys.executable, "-m", "pytest", *SELECT, "-q", *extra], cwd=root,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_small_relative_error_in_linear_outputs_fails_convergence(suite: Path) -> None:
    # Not confirmed in a fresh process: that re-run of the suite's test is the speed test's below (a second whole
    # training run here would check the same path again); the convergence verdict is the subject here.
    code, out = _rerun(suite, PERTURB.format(eps=0.1), "--gpuperf-threshold", "50",
                       "--gpuperf-noise-limit", "90", "--gpuperf-confirm", "0")  # fmt: skip
    assert code == 1, out[-3000:]
    assert "final_loss: REGRESSED" in out and "left the golden band" in out, out[-3000:]
    assert "converges slower" in out, out[-3000:]  # steps to target: olympic mean vs reference, t-test


def test_steps_four_times_as_long_are_regressed(suite: Path) -> None:
    code, out = _rerun(suite, SLOWER, "--gpuperf-threshold", "10", "--gpuperf-noise-limit", "90")
    assert code == 1, out[-3000:]
    # same numerics: only the speed changed
    assert not re.search(r"(final_loss|steps_to_target):? REGRESSED", out), out[-3000:]
    # tokens/s and step_time are the same clock per step, so they share one verdict. With two busy loops beside
    # it step_time once read AMBIGUOUS while tokens_per_s REGRESSED: by the code, a tail of slow steps spread the
    # times past the noise limit (IQR/median) but not the rates, so step_time was NOISY in the first attempt and
    # its REGRESSED in the second unconfirmed. The NOISY rule now reads log Q3/Q1, the same for a time and its rate
    assert "tokens_per_s: REGRESSED" in out, out[-3000:]
    # the summary shortens long test ids in the middle to fit 120 columns: match the row by its end and metric
    assert re.search(r"pretrain\[tiny-llama\]\s+step_time\s.*\sREGRESSED\s", out), out[-3000:]


LADDER_NOISE = """
import pytest
import torch
from torch import nn

@pytest.fixture
def gpuperf_model_hook():
    def noisy_linears(model):  # far more numerical error than any real precision: no seed can reach the target
        def noisy(module, inputs, output):
            return output * (1 + 0.5 * torch.randn_like(output))
        for module in model.modules():
            if type(module) is nn.Linear:
                module.register_forward_hook(noisy)
    return noisy_linears

@pytest.fixture
def training_tier(request):
    # A ladder of 30 steps, not 120: under the noise no seed reaches the target either way, and the fp4 rung's
    # emulated GEMMs then fit the sizing budget on a CPU without native bf16 too (AVX2 only: ~1.5 GFLOP/s, where
    # 120 steps were estimated at ~346 s and skipped), so the optional rung is run and reported, not skipped
    import dataclasses
    from pytest_gpuperf.training.plugin import training_tier as resolve

    tier = resolve(request.config)
    return dataclasses.replace(tier, ladder=dataclasses.replace(tier.ladder, steps=30, curve_warmup=10))
"""


def test_precision_ladder_shows_a_precision_failing_to_converge(tmp_path: Path) -> None:
    """The ladder reports a precision that misses the target: an optional one (fp4) as xfail with the loss it
    reached, a required one (fp32) as a failure."""
    import subprocess
    import sys

    _copy_suite(tmp_path, overrides=LADDER_NOISE)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "--gpuperf-device", "cpu", "-rxfs",
                           "--gpuperf-precisions", "fp32,fp4", "-k", "test_precision_ladder", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "1 failed" in out, out[-3000:]  # the required precision, on every CPU
    if "1 xfailed" not in out:
        # The capability sizing leaves the fp4 rung out on CPUs too slow for it (an AVX2-only VM): what ran is the
        # fp32 failure above, and the skip must name the rung and why.
        assert "1 skipped" in out and "fp4" in out.split("short test summary")[-1], out[-3000:]
        return
    assert "not production-ready here: fp4 (emulated): reached the target" in out, out[-3000:]
