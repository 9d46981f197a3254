"""Operator profiles: what each perf test's call ran, by operator and implementation, and two sides compared.

``Profiler`` is the pytest plugin `--gpuperf-profile FILE` registers (plugin.py imports this module only then):
it runs each perf test's call under torch.profiler (CPU, and CUDA where torch sees a GPU) with oneDNN's verbose
log on, and writes one small summary per test (operator names, counts, self times; oneDNN's implementation per
primitive and shape) to FILE at the session's end; each test's summary also goes into its metrics' context
(``PROFILE``), so the results and the baseline store keep it beside the samples. ``kernel_diff`` compares two such
summaries: per test, each operator's change ranked by its share of the test's change, and what runs on one side
only; ``stored_diff`` is the same diff between a metric's stored baseline and this run. torch is imported inside
the plugin's hook only: the plugin stays importable without it. docs/ab.md (profiled sides) says what it can and
cannot see.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import statistics
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.core.record.gate import Gate
from pytest_gpuperf.core.store.testid import stable_test_id
from pytest_gpuperf.machine.contention import TurnWaits

PROFILE_SCHEMA = "gpuperf-profile/1"
TOP_OPS = 40
"""Operators kept per test and side (by self time): a summary stays a few kilobytes."""
MOVER_SHARE = 0.1
"""An operator is a mover when it carries at least this share of what moved its test's way between the sides."""
MIN_CALLS = 3
"""An operator called fewer times on either side is the test's setup (a tensor made once), not its timed calls:
kept in the diff, never a mover (one session's one-off allocation is noise, not a regression)."""
TOP_MOVERS = 3
"""Movers printed under ab's verdict per test; ab.json holds the whole diff."""
PROFILE = "profile"
"""The key of a metric's context (results and baseline runs) that holds its test's summary."""
PROFILE_DIFF = "profile_diff"
"""The key of a judged metric's context that holds the diff of its baseline's summary and this run's."""
PROFILE_NOTE = "profile_note"
"""The key of a judged metric's context that says one of this run and its baseline ran under the profiler."""
CHANGED = {"REGRESSED": 1, "IMPROVED": -1}
"""The verdicts whose change a diff explains, with its direction (``kernel_diff``'s ``changed``)."""


class Profiler:
    """Profiles the call of each test that uses the ``perf`` fixture; writes every summary at the session's end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tests: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self.calls = 0
        """Calls the recorder timed (warm-up included) in the test being profiled: its summary's unit, so two
        sessions that ran a different number of rounds compare per call (``summary_diff``)."""
        # oneDNN reads its verbose setting once, when it first runs a primitive (torch's switch is ignored after
        # that): set before any test runs, its lines outside a profiled call go to the session's own output.
        os.environ.setdefault("ONEDNN_VERBOSE", "1")

    @pytest.hookimpl(wrapper=True, trylast=True)  # innermost: inside pytest's capture, which takes fd 1 per phase
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        if "perf" not in getattr(item, "fixturenames", ()):
            return (yield)
        try:
            import torch
            from torch.profiler import ProfilerActivity, profile
        except ImportError:
            self._note("torch is not importable in this session: nothing was profiled")
            return (yield)
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.calls = 0
        with _stdout_to_file() as verbose:
            with (
                torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON),
                profile(activities=activities) as prof,
            ):
                outcome = yield
            log = verbose()
        ops, implementations = _ops(prof), onednn_implementations(log)
        if not implementations and any("mkldnn" in op["name"] for op in ops):
            self._note(
                "oneDNN ran (aten::mkldnn_* operators) but printed no implementation: its verbose log was off when "
                "it started (ONEDNN_VERBOSE=0 in the environment, or a primitive ran before the session configured)"
            )
        self.tests[stable_test_id(item.path, item.nodeid)] = {  # the id its metrics have
            "activities": [str(a).rsplit(".", 1)[-1].lower() for a in activities],
            "ops": ops,
            "implementations": implementations,
            "calls": self.calls or None,  # None: a timer of the test's own, or figures it recorded itself
        }
        return outcome

    def counting(self, gate: Gate) -> Gate:
        """The session's gate, counting the calls the recorder times (core/session/state.py installs it)."""
        return _CountingGate(gate, self)

    def attach(self, test: str, metrics: Iterable[Any]) -> None:
        """Put ``test``'s summary into each of its metrics' context (``PROFILE``): the results and, saved, the
        baseline runs keep it beside the samples. Nothing when the test was not profiled."""
        summary = self.tests.get(test)
        if summary is not None:
            for metric in metrics:
                metric.context[PROFILE] = summary

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from pytest_gpuperf.core.store.baselines import write_atomic

        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, {"schema": PROFILE_SCHEMA, "tests": self.tests, "notes": self.notes})

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


class _CountingGate:
    """A gate that passes through to the session's and counts each call the recorder times into its Profiler."""

    def __init__(self, inner: Gate, profiler: Profiler) -> None:
        self.inner = inner
        self.profiler = profiler

    def before_test(self) -> None:
        self.inner.before_test()

    def before_round(self) -> None:
        self.inner.before_round()

    def before_call(self) -> None:
        self.profiler.calls += 1
        self.inner.before_call()

    def waited(self) -> TurnWaits:
        return self.inner.waited()

    def close(self) -> None:
        self.inner.close()


@contextlib.contextmanager
def _stdout_to_file() -> Iterator[Callable[[], str]]:
    """File descriptor 1 into a temporary file while the test runs (oneDNN prints its verbose lines there from C,
    under pytest's own capture or without it, -s); yields what reads it, C's buffer flushed and fd 1 given back."""
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(1)
        restored = False

        def read() -> str:
            nonlocal restored
            if not restored:
                with contextlib.suppress(OSError, AttributeError):
                    ctypes.CDLL(None).fflush(None)
                os.dup2(saved, 1)
                restored = True
            sink.seek(0)
            return sink.read().decode("utf-8", errors="replace")

        os.dup2(sink.fileno(), 1)
        try:
            yield read
        finally:
            read()
            os.close(saved)


def _ops(prof: Any) -> list[dict[str, Any]]:
    """Per operator: calls, self time (torch's totals), and the median CPU self time of one call, from each
    event, so that one call a loaded machine held up for 50 ms does not stand for all of them."""
    per_call: dict[str, list[float]] = {}
    for event in prof.events():
        per_call.setdefault(str(event.name), []).append(float(getattr(event, "self_cpu_time_total", 0.0) or 0.0))
    rows: list[dict[str, Any]] = []
    for event in prof.key_averages():
        cpu = float(getattr(event, "self_cpu_time_total", 0.0) or 0.0)
        device = float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)) or 0.0)
        calls = per_call.get(str(event.key), [])
        if cpu > 0 or device > 0:
            median = statistics.median(calls) if calls else cpu / max(int(event.count), 1)
            row = {"name": str(event.key), "count": int(event.count), "self_cpu_us": cpu,
                   "self_cpu_median_us": median, "self_device_us": device}  # fmt: skip
            rows.append(row)
    rows.sort(key=lambda row: -(row["self_cpu_us"] + row["self_device_us"]))
    return rows[:TOP_OPS]


def onednn_implementations(text: str) -> list[dict[str, Any]]:
    """oneDNN's executed primitives from its verbose lines (``onednn_verbose,v1,primitive,exec,cpu,convolution,
    brg_conv_fwd:avx512_core,...,mb8_ic64oc64_...,0.52``): kind, problem, implementation, count, milliseconds."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for line in text.splitlines():
        fields = line.strip().split(",")
        if len(fields) < 9 or fields[0] != "onednn_verbose" or "exec" not in fields[1:4]:
            continue
        start = fields.index("exec") + 1  # engine, kind, implementation follow; the problem and time end the line
        try:
            milliseconds = float(fields[-1])
        except ValueError:
            continue
        kind, implementation, problem = fields[start + 1], fields[start + 2], fields[-2]
        row = found.setdefault((kind, problem, implementation), {"primitive": kind, "problem": problem,
                                                                 "implementation": implementation, "count": 0,
                                                                 "ms": 0.0})  # fmt: skip
        row["count"] += 1
        row["ms"] += milliseconds
    return sorted(found.values(), key=lambda row: -row["ms"])


def read_profile(path: Path) -> dict[str, Any] | str:
    """A summary ``Profiler`` wrote, or why it cannot be read (one line)."""
    from pytest_gpuperf.core.store import schema

    try:
        document = schema.loads(schema.read_file(path))
    except (OSError, schema.SchemaError, schema.UnreadableFile) as error:
        return f"{path}: no operator summary ({error})"
    if not isinstance(document, dict) or document.get("schema") != PROFILE_SCHEMA:
        return f"{path}: not a {PROFILE_SCHEMA} operator summary"
    return document


# -- two sides compared ---------------------------------------------------------------------------------------


def kernel_diff(a: dict[str, Any], b: dict[str, Any], changed: dict[str, int]) -> dict[str, Any]:
    """Per test profiled on both sides: each operator's self time on each side (device time where the test ran
    device kernels, else CPU time), its change, and its share of what moved the test's way (the sum of the
    operators' changes in the direction of the test's change), ranked by share; operators and oneDNN
    implementations present on one side only. CPU time is each operator's calls times its median call (one
    held-up call does not move it). ``changed``: per test with a decided metric, +1 when it REGRESSED (the
    slowdown is explained), -1 when it IMPROVED; only those tests have movers (a profile is one session per side:
    it explains a change the pairs decided, in the direction they decided, and decides nothing)."""
    tests: dict[str, Any] = {}
    for test in sorted(set(a.get("tests", {})) & set(b.get("tests", {}))):
        tests[test] = summary_diff(a["tests"][test], b["tests"][test], changed.get(test, 0))
    only = sorted(set(a.get("tests", {})) ^ set(b.get("tests", {})))
    return {"tests": tests, "profiled_on_one_side_only": only, "notes": sorted(set(a.get("notes", [])) |
                                                                               set(b.get("notes", [])))}  # fmt: skip


def _time(op: dict[str, Any], device: bool) -> float:
    if device:
        return float(op["self_device_us"])
    median = op.get("self_cpu_median_us")
    return float(op["self_cpu_us"] if median is None else median * op["count"])


def stored_diff(baseline: Iterable[dict[str, Any]], context: dict[str, Any], verdict: str) -> dict[str, Any] | None:
    """The diff of a metric's baseline and this run (``kernel_diff``'s entry of one test): the newest of the
    baseline runs' contexts that holds a summary (A) against this run's (B), its movers those of the verdict's
    change (none for a verdict that is no change). None, saying nothing, where either side has no summary."""
    now = context.get(PROFILE)
    before = next((run[PROFILE] for run in reversed(list(baseline)) if isinstance(run.get(PROFILE), dict)), None)
    if not isinstance(now, dict) or before is None:
        return None
    try:
        return summary_diff(before, now, CHANGED.get(verdict, 0))
    except (KeyError, TypeError, ValueError, AttributeError):  # a summary edited by hand: no diff is guessed
        return None


def mixed_note(
    baseline: Iterable[dict[str, Any]],
    context: dict[str, Any],
    *,
    names: tuple[str, str] = ("its baseline", "this run"),
) -> str | None:
    """Where one of this run and the baseline runs it is judged against was measured under the profiler and the
    other was not: that the profiler's own cost per operator call is in the ratio. None where both or neither were.
    ``names``: the baseline's and this run's in the sentence."""
    baseline = list(baseline)
    before = any(isinstance(run.get(PROFILE), dict) for run in baseline)
    now = isinstance(context.get(PROFILE), dict)
    if not baseline or before == now:  # no baseline: nothing is judged against
        return None
    profiled, plain = names[::-1] if now else names
    return (
        f"{profiled} was measured under --gpuperf-profile and {plain} was not: the profiler's cost per operator "
        "call is in the ratio (benchmarks/README.md measures it); compare profiled runs with a profiled baseline"
    )


def stored_lines(test: str, diff: Any, verdict: str) -> list[str]:
    """Under a judged change against a stored baseline, the operators that moved (``mover_lines`` of a
    ``stored_diff``, the baseline as A and this run as B); nothing for another verdict or without a diff."""
    if verdict not in CHANGED or not isinstance(diff, dict):
        return []
    try:
        return mover_lines({"tests": {test: diff}}, sides={"A": "the baseline", "B": "this run"})
    except (KeyError, TypeError, ValueError):  # a results file edited by hand: its diff names nothing
        return []


def summary_diff(a: dict[str, Any], b: dict[str, Any], direction: int) -> dict[str, Any]:
    """One test's diff of two summaries (``kernel_diff``); ``direction`` +1 a slowdown, -1 a gain, 0 none. Where
    both summaries counted the calls their test timed, A's times are scaled to B's number of calls (``a_scale``)."""
    device = any(op["self_device_us"] > 0 for op in [*a["ops"], *b["ops"]])
    sides = [{op["name"]: op for op in side["ops"] if _time(op, device) > 0} for side in (a, b)]
    calls = [side.get("calls") if isinstance(side.get("calls"), int) and side["calls"] > 0 else None for side in (a, b)]
    # two sessions that timed a different number of calls (a round measured again, extended) compare per call:
    # A's times scaled to B's calls
    scale = calls[1] / calls[0] if calls[0] and calls[1] else 1.0
    ops = []
    for name in set(sides[0]) | set(sides[1]):
        one, two = sides[0].get(name), sides[1].get(name)
        us_a, us_b = (_time(op, device) if op else 0.0 for op in (one, two))
        us_a *= scale
        count_a, count_b = (op["count"] if op else 0 for op in (one, two))
        ops.append(
            {
                "name": name,
                "a_us": us_a,
                "b_us": us_b,
                "a_count": count_a,
                "b_count": count_b,
                "a_us_per_call": us_a / scale / count_a if count_a else None,
                "b_us_per_call": us_b / count_b if count_b else None,
                "change_us": us_b - us_a,
                "setup": max(count_a, count_b) < MIN_CALLS,
                "share": None,
                "only_in": None if one and two else ("A" if one else "B"),
            }
        )
    timed = [op for op in ops if not op["setup"]]
    change = sum(op["change_us"] for op in timed)
    way = direction or (1 if change >= 0 else -1)  # the verdict's direction; the profile's own without one
    # the share of what moved the test's way: an op's change over the sum of the changes in that direction
    moved = sum(op["change_us"] for op in timed if op["change_us"] * way > 0)
    for op in timed:
        if moved and op["change_us"] * way > 0:
            op["share"] = op["change_us"] / moved
    ops.sort(key=lambda op: (-(op["share"] or 0.0), -abs(op["change_us"])))
    named = [op["name"] for op in ops if (op["share"] or 0.0) >= MOVER_SHARE]
    return {
        "clock": "device" if device else "cpu",
        "a_calls": calls[0],
        "b_calls": calls[1],
        "a_scale": scale,
        "a_total_us": sum(op["a_us"] for op in ops),
        "b_total_us": sum(op["b_us"] for op in ops),
        "change_us": change,
        "direction": "slowdown" if way > 0 else "gain",
        "ops": ops,
        "movers": named[:TOP_MOVERS] if direction else [],
        "implementations": _implementation_changes(a.get("implementations", []), b.get("implementations", [])),
    }


def _implementation_changes(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per oneDNN primitive and problem, the implementations each side ran, where they differ."""
    keys = {(row["primitive"], row["problem"]) for row in [*a, *b]}
    changes = []
    for kind, problem in sorted(keys):
        ran = [sorted({r["implementation"] for r in side if (r["primitive"], r["problem"]) == (kind, problem)})
               for side in (a, b)]  # fmt: skip
        if ran[0] != ran[1]:
            changes.append({"primitive": kind, "problem": problem, "a": ran[0], "b": ran[1]})
    return changes


def mover_lines(diff: dict[str, Any], *, sides: dict[str, str] | None = None) -> list[str]:
    """The lines under ab's verdict: per test with movers, each with its share and its times per test and per
    call; each implementation that changed; what one side only profiled. ``sides`` names A and B otherwise."""
    lines = []
    for test, entry in diff.get("tests", {}).items():
        ops = {op["name"]: op for op in entry["ops"]}
        for name in entry["movers"]:
            op = ops[name]
            lines.append(
                f"{test}: {name} carries {op['share']:.0%} of the profiled {entry['direction']} "
                f"({us_text(op['a_us'])} -> {us_text(op['b_us'])} {entry['clock']} self time{_per(entry)}; "
                f"{_calls(op, entry)}, "
                f"{us_text(op['a_us_per_call'])} -> {us_text(op['b_us_per_call'])} per call)"
                + (f"; only in {(sides or {}).get(op['only_in'], op['only_in'])}" if op["only_in"] else "")
            )
        if entry["movers"]:
            for change in entry["implementations"]:
                lines.append(
                    f"{test}: oneDNN {change['primitive']} {change['problem']}: {', '.join(change['a']) or '(none)'}"
                    f" replaced by {', '.join(change['b']) or '(none)'}"
                )
    return lines


def _per(entry: dict[str, Any]) -> str:
    """How the times are counted: over B's timed calls where the two sides timed a different number."""
    return f" over {entry['b_calls']} timed calls" if entry.get("a_scale", 1.0) != 1.0 else ""


def _calls(op: dict[str, Any], entry: dict[str, Any]) -> str:
    """An operator's calls: per timed call of the test where both sides counted them, else in all."""
    if entry.get("a_calls") and entry.get("b_calls"):
        return f"{op['a_count'] / entry['a_calls']:.3g} -> {op['b_count'] / entry['b_calls']:.3g} calls per timed call"
    return f"{op['a_count']} -> {op['b_count']} calls"


def us_text(value: float | None) -> str:
    """Microseconds in the unit that reads best: '481 us', '21.5 ms', '-' for none."""
    if value is None:
        return "-"
    if value < 0:
        return f"-{us_text(-value)}"
    for scale, unit in ((1e6, "s"), (1e3, "ms"), (1.0, "us")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} us"
