"""Harness overhead: what the fixture, the verdict and baseline I/O add to each perf test.

Pytest sessions are timed in fresh processes: sessions where each test records a metric of 20 samples
through `perf` (judged against a stored baseline, so the full compare path and the baseline read run), and
sessions where the same tests compute the same samples without the fixture. Both import torch, as every real
workload does. Each kind runs at two sizes (N and 4N tests): the slope is the marginal cost per test, the
rest is paid once per session (scipy import, fingerprint). Both are set against a micro-suite GEMM test.

    python benchmarks/harness_overhead.py [--tests 40] [--sessions 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BODY_WITH = """
import pytest
import torch

@pytest.mark.perf
@pytest.mark.parametrize("n", range({tests}))
def test_t(perf, n):
    samples = [0.010 + 0.0001 * ((i * 7 + n) % 11) for i in range(20)]
    perf.record("step_time", samples, unit="s", higher_is_better=False)
"""

BODY_WITHOUT = """
import pytest
import torch

@pytest.mark.perf
@pytest.mark.parametrize("n", range({tests}))
def test_t(n):
    samples = [0.010 + 0.0001 * ((i * 7 + n) % 11) for i in range(20)]
    assert len(samples) == 20
"""


def session_seconds(folder: Path, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpuperf-device", "cpu", *args],
        cwd=folder,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=int, default=40)
    parser.add_argument("--sessions", type=int, default=5)
    args = parser.parse_args()
    sizes = (args.tests, 4 * args.tests)
    medians: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "pytest.ini").write_text("[pytest]\n")
        for size in sizes:
            (folder / f"test_with_{size}.py").write_text(BODY_WITH.format(tests=size))
            (folder / f"test_without_{size}.py").write_text(BODY_WITHOUT.format(tests=size))
            session_seconds(folder, f"test_with_{size}.py", "--gpuperf-save")  # a baseline for every test
            for kind, target, extra in (
                ("plain", f"test_without_{size}.py", ()),
                ("judged", f"test_with_{size}.py", ()),
                ("saved", f"test_with_{size}.py", ("--gpuperf-save",)),
            ):
                medians[kind, size] = statistics.median(
                    session_seconds(folder, target, *extra) for _ in range(args.sessions)
                )
    small, large = sizes
    workload = 23 * 0.003  # a micro-suite GEMM test: 3 warm-up + 20 timed calls of ~3 ms
    print(f"median of {args.sessions} sessions each; sessions of {small} and {large} tests")
    for kind in ("judged", "saved"):
        extra_small = medians[kind, small] - medians["plain", small]
        extra_large = medians[kind, large] - medians["plain", large]
        per_test = (extra_large - extra_small) / (large - small)
        once = extra_small - per_test * small
        print(
            f"{kind:>6}: {per_test * 1e3:.1f} ms per test ({per_test / workload:.1%} of a {workload * 1e3:.0f} ms "
            f"GEMM test), {once:.2f} s once per session"
        )
    for (kind, size), seconds in sorted(medians.items()):
        print(f"  {kind} {size} tests: {seconds:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
