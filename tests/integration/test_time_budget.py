"""The time budget of gpuperf tests (issue 16 item 12), end to end through pytester: a hang in the pytest process
itself ends its test with a clear failure and the session goes on; a call stuck in C ends the process in bounded
time (and under xdist the session still goes on); tests that do not use gpuperf are untouched."""

from __future__ import annotations

import os
import re
import textwrap
import time

import pytest

from pytest_gpuperf.core.session.budget import DEFAULT_BUDGET_S, budget_of, grace_s

HANGS = textwrap.dedent(
    """
    import time
    import pytest

    @pytest.mark.perf
    def test_python_loop_hangs():
        while True:
            sum(range(1000))

    def test_perf_fixture_sleeps(perf):
        time.sleep(600)

    @pytest.fixture
    def slow_setup():
        time.sleep(600)

    @pytest.mark.perf
    def test_setup_hangs(slow_setup):
        pass

    @pytest.mark.perf
    @pytest.mark.gpuperf_timeout(0.3)
    def test_marker_is_tighter():
        time.sleep(600)

    @pytest.mark.perf
    @pytest.mark.gpuperf_timeout(0)
    def test_marker_zero_means_no_budget():
        time.sleep(1.5)

    def test_not_a_gpuperf_test_is_untouched():
        time.sleep(1.5)

    @pytest.mark.perf
    def test_the_session_goes_on():
        pass
    """
)


def test_hangs_in_the_pytest_process_fail_their_test_and_the_session_goes_on(pytester: pytest.Pytester):
    pytester.makepyfile(test_hangs=HANGS)
    started = time.monotonic()
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--gpuperf-timeout", "1")
    elapsed = time.monotonic() - started
    result.assert_outcomes(passed=3, failed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_hangs.py::test_setup_hangs exceeded its 1 s budget (--gpuperf-timeout); stack:",
            '  File "*test_hangs.py", line 14, in slow_setup',
            "*test_hangs.py::test_python_loop_hangs exceeded its 1 s budget (--gpuperf-timeout); stack:",
            '  File "*test_hangs.py", line 7, in test_python_loop_hangs',
            "*test_hangs.py::test_perf_fixture_sleeps exceeded its 1 s budget (--gpuperf-timeout); stack:",
            '  File "*test_hangs.py", line 10, in test_perf_fixture_sleeps',
            "    time.sleep(600)",
            "*test_hangs.py::test_marker_is_tighter exceeded its 0.3 s budget (@pytest.mark.gpuperf_timeout); stack:",
        ]
    )
    # 3 x 1 s + 0.3 s of budgets and 3 s of sleeps that have no budget, not 600 s.
    assert elapsed < 60, elapsed


def test_the_budget_comes_from_the_environment_and_the_ini_file_too(pytester: pytest.Pytester, monkeypatch):
    pytester.makepyfile(test_one="import time, pytest\n\n@pytest.mark.perf\ndef test_sleeps():\n    time.sleep(600)\n")
    monkeypatch.setenv("GPUPERF_TIMEOUT", "0.5")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*test_sleeps exceeded its 0.5 s budget (GPUPERF_TIMEOUT); stack:"])
    monkeypatch.delenv("GPUPERF_TIMEOUT")
    pytester.makeini("[pytest]\ngpuperf_timeout = 0.4\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*test_sleeps exceeded its 0.4 s budget (gpuperf_timeout); stack:"])


def test_defaults_per_tier_and_only_for_gpuperf_tests(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\nmarkers =\n    perf: a gpuperf test\n    gpu_tier: the GPU tier\n")
    pytester.makepyfile(
        test_tiers=textwrap.dedent(
            """
            import pytest

            @pytest.mark.perf
            def test_cpu_tier():
                pass

            @pytest.mark.perf
            @pytest.mark.gpu_tier
            def test_gpu_tier():
                pass

            def test_uses_the_fixture(perf):
                pass

            def test_plain():
                pass
            """
        )
    )
    items = {item.name: item for item in pytester.getitems(pytester.path / "test_tiers.py")}
    cpu, gpu, fixture = (budget_of(items[name]) for name in ("test_cpu_tier", "test_gpu_tier", "test_uses_the_fixture"))
    assert cpu is not None and cpu.seconds == DEFAULT_BUDGET_S["cpu"] == 600
    assert "cpu tier's default" in cpu.source
    assert gpu is not None and gpu.seconds == DEFAULT_BUDGET_S["gpu"]
    assert fixture is not None and fixture.seconds == DEFAULT_BUDGET_S["cpu"]
    assert budget_of(items["test_plain"]) is None
    assert (grace_s(600), grace_s(5), grace_s(1200)) == (60, 2, 60)


@pytest.mark.parametrize(
    ("arguments", "marker", "expected"),
    [
        (["--gpuperf-timeout", "inf"], "", "*Invalid value 'inf' from --gpuperf-timeout: expected a finite*"),
        (["--gpuperf-timeout", "-5"], "", "*Invalid value '-5' from --gpuperf-timeout: expected a finite*"),
        (["--gpuperf-timeout", "soon"], "", "*Invalid value 'soon' from --gpuperf-timeout: expected a number*"),
        ([], "@pytest.mark.gpuperf_timeout('ten')", "*gpuperf_timeout('ten') on test_bad.py::test_x: expected one*"),
        ([], "@pytest.mark.gpuperf_timeout(True)", "*gpuperf_timeout(True) on test_bad.py::test_x: expected one*"),
    ],
)
def test_bad_budgets_stop_the_run_with_one_line(pytester: pytest.Pytester, arguments, marker, expected):
    pytester.makepyfile(test_bad=f"import pytest\n\n@pytest.mark.perf\n{marker}\ndef test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *arguments)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    assert "Traceback" not in result.stderr.str()


STUCK_IN_C = textwrap.dedent(
    """
    import signal
    import time
    import pytest

    @pytest.mark.perf
    def test_a_blocking_call_that_ignores_signals():
        # As C code that blocks signals or retries on EINTR: the handler never runs, the GIL is released.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(600)

    @pytest.mark.perf
    def test_a_c_loop_that_holds_the_gil():
        sum(range(10**15))  # no bytecode runs: no signal handler, no other Python thread

    @pytest.mark.perf
    def test_the_session_goes_on():
        pass
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX signals")
def test_calls_stuck_in_c_end_the_worker_in_bounded_time_and_xdist_goes_on(pytester: pytest.Pytester):
    pytester.makepyfile(test_stuck=STUCK_IN_C)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "1", "--gpuperf-timeout", "1", timeout=240
    )
    elapsed = time.monotonic() - started
    result.assert_outcomes(passed=1, failed=2)
    output = result.stdout.str() + result.stderr.str()
    # Stage 2 (the GIL is free): the message and every thread's stack, then stage 3 ends the worker.
    assert (
        "test_stuck.py::test_a_blocking_call_that_ignores_signals exceeded its 1 s budget (--gpuperf-timeout) "
        "and is still running" in output
    ), output
    assert "line 9 in test_a_blocking_call_that_ignores_signals" in output, output
    # Stage 3 alone (the GIL is held): faulthandler's C watchdog dumps the stack and ends the worker.
    assert "in test_a_c_loop_that_holds_the_gil" in output, output
    # one crashed worker per stuck test (pytest repeats the message in its short summary, in full on CI)
    crashed = set(re.findall(r"worker 'gw\d+' crashed while running '([^']+)'", output))
    assert crashed == {
        "test_stuck.py::test_a_blocking_call_that_ignores_signals",
        "test_stuck.py::test_a_c_loop_that_holds_the_gil",
    }, output
    # Each stuck test ends within budget + 2 x grace (1 + 2 x 2 s), plus worker restarts.
    assert elapsed < 120, elapsed


def test_a_budget_shorter_than_a_launch_timeout_ends_the_test_and_frees_its_ranks(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_ranks=textwrap.dedent(
            """
            import os
            import time
            import pytest
            from pytest_gpuperf import launch

            def rank_1_hangs():
                import torch.distributed as dist
                if dist.get_rank() == 1:
                    while True:
                        time.sleep(0.05)
                dist.barrier()

            def pid():
                return os.getpid()

            @pytest.mark.perf
            @pytest.mark.gpuperf_timeout(20)
            def test_hangs_in_a_rank():
                launch(pid, world_size=2, timeout=120)  # ranks started (~3-10 s) before the hang
                launch(rank_1_hangs, world_size=2, timeout=600)

            @pytest.mark.perf
            def test_next_launch_gets_fresh_ranks():
                assert len(set(launch(pid, world_size=2, timeout=120))) == 2
            """
        )
    )
    started = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", timeout=300)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_hangs_in_a_rank exceeded its 20 s budget (@pytest.mark.gpuperf_timeout); stack:",
            "*in test_hangs_in_a_rank",
        ]
    )
    assert time.monotonic() - started < 200
