"""Settings: every `--gpuperf-*` option, resolved once into a frozen object kept in ``config.stash``.

Order of precedence: command line, then environment (``GPUPERF_*``), then ini (``gpuperf_*``), then default.
A bad value raises ``pytest.UsageError`` quoting the value and where it came from.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

from pytest_gpuperf.core.store.spread import MachineSpread, SpreadError, read_spread
from pytest_gpuperf.core.verdict.policy import DEVICE_DEFAULTS, JOB_ALPHA, setting

T = TypeVar("T")

DEVICES = ("auto", "cpu", "cuda")
MACHINE_CHECKS = ("on", "record", "off")


class SettingError(ValueError):
    """A value that cannot be parsed; the message says what was expected."""


def parse_percentage(text: str, *, at_most: float | None = None) -> float:
    """'2', '2%' or '2.5' -> 0.02, 0.02, 0.025 (a fraction): above 0 and below 100, or up to ``at_most`` percent
    where given (an injected slowdown may be 100%: twice the work)."""
    raw = text.strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise SettingError("expected a percentage such as 2 or 2%") from None
    if at_most is None and not 0 < value < 100:
        raise SettingError("expected a percentage between 0 and 100 (exclusive)")
    if at_most is not None and not 0 < value <= at_most:
        raise SettingError(f"expected a percentage above 0 and at most {at_most:g}")
    return value / 100


def parse_percentage_or_zero(text: str) -> float:
    """``parse_percentage`` that also takes 0 (a noise term switched off)."""
    if text.strip().removesuffix("%").strip() in {"0", "0.0"}:
        return 0.0
    try:
        return parse_percentage(text)
    except SettingError:
        raise SettingError("expected a percentage from 0 to below 100, such as 0, 8 or 8%") from None


def parse_machine_noise(text: str) -> float | MachineSpread:
    """A percentage (0: the machines of the key do not differ), or the path of a spread file ``gpuperf fleet
    --save-spread`` wrote."""
    try:
        return parse_percentage_or_zero(text)
    except SettingError:
        if not Path(text.strip()).exists():
            raise SettingError(
                "expected a percentage from 0 to below 100, such as 0 or 3%, or an existing spread file written by "
                "`gpuperf fleet --save-spread`"
            ) from None
    try:
        return read_spread(Path(text.strip()))
    except SpreadError as error:
        raise SettingError(str(error)) from None


def parse_count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise SettingError(f"expected a whole number >= {minimum}") from None
        if value < minimum:
            raise SettingError(f"expected a whole number >= {minimum}")
        return value

    return parse


def parse_seconds(text: str) -> float:
    """'600', '90.5', '20s' -> seconds; '0' -> 0 (for a budget: none). Finite and not negative."""
    try:
        value = float(text.strip().removesuffix("s").strip())
    except ValueError:
        raise SettingError("expected a number of seconds such as 20 or 20s (0: none)") from None
    if not math.isfinite(value) or value < 0:
        raise SettingError("expected a finite number of seconds >= 0 (0: none)")
    return value


def parse_positive_seconds(text: str) -> float:
    """Like parse_seconds, for a figure where 0 would mean nothing runs."""
    try:
        value = parse_seconds(text)
    except SettingError:
        value = -1.0
    if value <= 0:
        raise SettingError("expected a positive, finite number of seconds such as 60 or 60s")
    return value


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise SettingError("expected true/false (or 1/0, yes/no, on/off)")


def parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise SettingError(f"expected one of {', '.join(choices)}")
        return value

    return parse


def parse_duration(text: str) -> float:
    """'90', '90s', '15m', '1h', '1h30m' -> seconds; SettingError with what was expected."""
    raw = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        seconds = float(raw)
    else:
        parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?:in)?)?(?:(\d+(?:\.\d+)?)s)?", raw)
        if not raw or parts is None or not any(parts.groups()):
            raise SettingError("expected a duration such as 600, 90s, 15m, 1h or 1h30m")
        hours, minutes, secs = (float(g) if g else 0.0 for g in parts.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if seconds <= 0:
        raise SettingError("expected a duration above zero")
    return seconds


def parse_minutes(text: str) -> float:
    """'30', '0.5', '30m' -> minutes: positive and finite (a fraction of a minute is what a CI run affords)."""
    try:
        value = float(text.strip().removesuffix("m").strip())
    except ValueError:
        raise SettingError("expected a number of minutes such as 30 or 0.5") from None
    if not math.isfinite(value) or value <= 0:
        raise SettingError("expected a positive, finite number of minutes such as 30 or 0.5")
    return value


SLOWDOWN_MAX_PCT = 1000.0
"""The largest injected slowdown, in percent (eleven times the work)."""


def parse_slowdowns(text: str) -> dict[str, float]:
    """'micro=10' or 'micro=10,inference=100' -> {"micro": 0.10, "inference": 1.0}: the suites' injected slowdowns
    (100: twice the work; up to 1000)."""
    slowdowns: dict[str, float] = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        suite, sep, amount = part.partition("=")
        if not sep or not re.fullmatch(r"[a-z_]+", suite.strip()):
            raise SettingError("expected SUITE=PCT[,SUITE=PCT...] such as micro=10 (suites: their markers)")
        try:
            slowdowns[suite.strip()] = parse_percentage(amount, at_most=SLOWDOWN_MAX_PCT)
        except SettingError as error:
            raise SettingError(f"{suite.strip()}={amount.strip()}: {error} (100: twice the work)") from None
    if not slowdowns:
        raise SettingError("expected SUITE=PCT[,SUITE=PCT...] such as micro=10")
    return slowdowns


MAX_CPU = 65535
"""The largest CPU number a CPU list takes (Linux's own limit is 8191): a larger one names no CPU of any machine, and
a range up to it must not build a set of billions (MemoryError) before the CPUs a process may use are checked."""


def parse_cpus(text: str) -> frozenset[int]:
    """CPU numbers as taskset -c writes them: "1", "0,2", "0-3,8"."""
    ranges: list[tuple[int, int]] = []
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            low, high = int(first), int(last or first)
            if low < 0 or high < low:
                raise ValueError
            ranges.append((low, high))
    except ValueError:
        raise SettingError("expected CPU numbers such as 1, 0,2 or 0-3") from None
    beyond = [(low, high) for low, high in ranges if high > MAX_CPU]
    if beyond:
        have = os.cpu_count() or 1
        missing = ",".join(f"{max(low, have)}-{high}" for low, high in beyond)
        raise SettingError(
            f"CPUs {missing} are not CPUs of this machine (it has {have}: 0-{have - 1}); give CPUs it has, such as 0 "
            "or 0-1"
        )
    merged: list[list[int]] = []  # overlapping ranges merged first: the work stays within MAX_CPU + 1 CPUs
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return frozenset(cpu for low, high in merged for cpu in range(low, high + 1))


def parse_text(text: str) -> str:
    if not text.strip():
        raise SettingError("expected a non-empty value")
    return text.strip()


def parse_program(text: str) -> str:
    """A program to run: a path to an executable file, or a name found on PATH; said of the setting that names it,
    not of a command derived from it later (a Python beside the program)."""
    program = parse_text(text)
    found = shutil.which(program) if os.sep not in program else None
    if found is None and not (os.path.isfile(program) and os.access(program, os.X_OK)):
        raise SettingError("no such executable program; give the path of one, or unset the variable")
    return program


@dataclass(frozen=True, slots=True, kw_only=True)
class OptionSpec(Generic[T]):
    """One setting known on the command line, in the environment and in ini files."""

    name: str
    """Suffix after the prefixes: 'threshold' -> --gpuperf-threshold, GPUPERF_THRESHOLD, gpuperf_threshold."""
    help: str
    parse: Callable[[str], T]
    default: T | None
    flag: bool = False
    """A switch on the command line (no value); env and ini still take true/false."""
    metavar: str | None = None

    @property
    def cli(self) -> str:
        return f"--gpuperf-{self.name}"

    @property
    def dest(self) -> str:
        return f"gpuperf_{self.name.replace('-', '_')}"

    @property
    def env(self) -> str:
        return f"GPUPERF_{self.name.replace('-', '_').upper()}"

    @property
    def ini(self) -> str:
        return self.dest


def add_options(parser: pytest.Parser, specs: tuple[OptionSpec[Any], ...]) -> None:
    """Register each spec as a command-line option of the `gpuperf` group and an ini key."""
    group = parser.getgroup("gpuperf", "pytest-gpuperf: performance and convergence baselines")
    for spec in specs:
        text = f"{spec.help} (env {spec.env}, ini {spec.ini})"
        if spec.flag:
            group.addoption(spec.cli, action="store_true", dest=spec.dest, default=None, help=text)
        else:
            group.addoption(spec.cli, action="store", dest=spec.dest, default=None, metavar=spec.metavar, help=text)
        parser.addini(spec.ini, help=spec.help, default=None)


def resolve(config: pytest.Config, spec: OptionSpec[T]) -> tuple[T | None, str]:
    """The value of one setting and where it came from."""
    cli_value = config.getoption(spec.dest, default=None)
    if cli_value is not None:
        if spec.flag:
            return cli_value, spec.cli
        return _parse(spec, str(cli_value), spec.cli), spec.cli
    env_value = os.environ.get(spec.env)
    if env_value is not None and env_value.strip():
        return _parse(spec, env_value, f"environment variable {spec.env}"), spec.env
    ini_value = config.getini(spec.ini)
    if ini_value not in (None, "", []):
        text = " ".join(ini_value) if isinstance(ini_value, list) else str(ini_value)
        return _parse(spec, text, f"ini key {spec.ini} in {config.inipath}"), spec.ini
    return spec.default, "default"


def _parse(spec: OptionSpec[T], text: str, source: str) -> T:
    try:
        return spec.parse(text)
    except SettingError as error:
        raise pytest.UsageError(f"Invalid value {text!r} from {source}: {error}.") from None


OPTIONS: tuple[OptionSpec[Any], ...] = (
    OptionSpec(
        name="baselines",
        help="folder of baseline JSON files (default: baselines/ in the rootdir)",
        parse=parse_text,
        default=None,
        metavar="DIR",
    ),
    OptionSpec(
        name="save",
        help="store this run's measurements as baselines for this hardware, merged with the other entries",
        parse=parse_bool,
        default=False,
        flag=True,
    ),
    OptionSpec(
        name="accept",
        help="with --gpuperf-save, also store metrics that REGRESSED against the entry they would join "
        "(an intended slowdown); without it they are left out and the summary says so",
        parse=parse_bool,
        default=False,
        flag=True,
    ),
    OptionSpec(
        name="machine-id",
        help="a name for this machine (a runner's or node's own): baseline runs saved under another name are "
        "another machine's; default: read from the system (its GPUs' UUIDs where it has GPUs)",
        parse=parse_text,
        default=None,
        metavar="NAME",
    ),
    OptionSpec(
        name="results",
        help="write a JSON document of the run: fingerprint, raw samples, baselines used, verdicts",
        parse=parse_text,
        default=None,
        metavar="FILE",
    ),
    OptionSpec(
        name="threshold",
        help="smallest relative change that matters, in percent (default 2 on CPU, 1 on GPU)",
        parse=parse_percentage,
        default=None,
        metavar="PCT",
    ),
    OptionSpec(
        name="repeats",
        help="timed repetitions per measurement (default 20)",
        parse=parse_count(3),
        default=20,
        metavar="N",
    ),
    OptionSpec(
        name="warmup",
        help="untimed repetitions before each measurement (default 3)",
        parse=parse_count(0),
        default=3,
        metavar="N",
    ),
    OptionSpec(
        name="device",
        help="device the workloads run on: auto (cuda when present; ROCm presents as cuda), cpu or cuda",
        parse=parse_choice(*DEVICES),
        default="auto",
        metavar="auto|cpu|cuda",
    ),
    OptionSpec(
        name="strict",
        help="fail NO_BASELINE, NOISY, AMBIGUOUS and IMPROVED-beyond-threshold too (release gating)",
        parse=parse_bool,
        default=False,
        flag=True,
    ),
    OptionSpec(
        name="noise-limit",
        help="largest robust spread (log Q3/Q1 of the samples) still judged, in percent (10 on CPU, 5 on GPU)",
        parse=parse_percentage,
        default=None,
        metavar="PCT",
    ),
    OptionSpec(
        name="run-noise",
        help="prior between-run standard deviation of a run's median, in percent (default 1.5 on CPU, 0.3 on GPU)",
        parse=parse_percentage,
        default=None,
        metavar="PCT",
    ),
    OptionSpec(
        name="sitting-noise",
        help="prior standard deviation of the machine's shift between sittings (a run an hour or more after its "
        "baseline's runs), in percent; 0 adds none (default 8 on CPU; 0 on GPU, where it is not measured yet)",
        parse=parse_percentage_or_zero,
        default=None,
        metavar="PCT",
    ),
    OptionSpec(
        name="machine-noise",
        help="standard deviation between machines of one hardware key, in percent, as a fleet of them measured it, "
        "or the spread file `gpuperf fleet --save-spread` wrote (each metric's own figure, else the fleet's pooled "
        "one; refused for another hardware key): a baseline recorded on another machine is judged with it added; "
        "default: the device's prior (docs/verdicts.md); 0: machines of the key do not differ",
        parse=parse_machine_noise,
        default=None,
        metavar="PCT|FILE",
    ),
    OptionSpec(
        name="job-alpha",
        help="the chance, in percent, that a job with nothing changed fails on sampling noise: each metric's change "
        "is decided at this level divided by the number of metrics the job judges (Bonferroni; default 1)",
        parse=parse_percentage,
        default=JOB_ALPHA,
        metavar="PCT",
    ),
    OptionSpec(
        name="require-coverage",
        help="fail a gating job (exit status 1) when a suite could not have caught a change of PCT percent in any "
        "metric at its noise, naming the suites and what would decide them (default: off; the summary shows the "
        "coverage figure either way)",
        parse=parse_percentage,
        default=None,
        metavar="PCT",
    ),
    OptionSpec(
        name="baseline-runs",
        help="runs kept per baseline entry; --gpuperf-save appends a run on the same stack (default 5)",
        parse=parse_count(1),
        default=5,
        metavar="N",
    ),
    OptionSpec(
        name="confirm",
        help="attempts that measure a test again before a REGRESSED verdict fails it; each must regress (default 1)",
        parse=parse_count(0),
        default=1,
        metavar="N",
    ),
    OptionSpec(
        name="machine-check",
        help="machine-state signals (steal, run-queue wait, a reference canary): on = record them with every "
        "measurement and judge a contended one or one whose canary moved against the baseline's NOISY; record = "
        "record only; off = neither (default on)",
        parse=parse_choice(*MACHINE_CHECKS),
        default="on",
        metavar="on|record|off",
    ),
    OptionSpec(
        name="extend",
        help="extra rounds of samples a measurement whose verdict is AMBIGUOUS may take before concluding "
        "(sequential sampling; default 2)",
        parse=parse_count(0),
        default=2,
        metavar="N",
    ),
    OptionSpec(
        name="extend-seconds",
        help="time a test may spend on those extra rounds, in seconds (default 20)",
        parse=parse_seconds,
        default=20.0,
        metavar="S",
    ),
    OptionSpec(
        name="measure-only",
        help="measure and write results only: no verdict fails a test, nothing is saved, no confirmation attempt "
        "(the sessions `gpuperf ab` runs)",
        parse=parse_bool,
        default=False,
        flag=True,
    ),
    OptionSpec(
        name="take-turns",
        help="take turns with the other session of a `gpuperf ab --take-turns` pair through the pipes PREFIX.ask "
        "and PREFIX.grant (set by gpuperf ab; not for use by hand)",
        parse=parse_text,
        default=None,
        metavar="PREFIX",
    ),
    OptionSpec(
        name="profile",
        help="run each perf test's call under torch.profiler (CPU, and CUDA where torch sees a GPU) with oneDNN's "
        "verbose log, and write each test's operator summary (names, counts, self times, oneDNN implementations) "
        "to FILE and into its metrics' results and saved baselines: a change judged against a profiled baseline "
        "names the operators that moved (also the profiled sessions of `gpuperf ab --profile`)",
        parse=parse_text,
        default=None,
        metavar="FILE",
    ),
    OptionSpec(
        name="widen-cpus",
        help="the CPUs a `gpuperf ab` session pinned to one core by default runs on instead when its tests start "
        "their own ranks or servers (set by gpuperf ab; not for use by hand)",
        parse=parse_cpus,
        default=None,
        metavar="LIST",
    ),
    OptionSpec(
        name="remeasure",
        help="extra rounds a noisy measurement may take before it is reported NOISY (default 2)",
        parse=parse_count(0),
        default=2,
        metavar="N",
    ),
    OptionSpec(
        name="inject-slowdown",
        help="make a suite's workloads deliberately heavier by PCT percent while reporting their nominal work, to "
        "prove a gate catches a slowdown: SUITE=PCT[,SUITE=PCT...], e.g. micro=10 (never with --gpuperf-save)",
        parse=parse_slowdowns,
        default=None,
        metavar="SUITE=PCT",
    ),
    OptionSpec(
        name="burnin-minutes",
        help="run the burn-in tier (-m burnin): sustained GEMM and memory load for this many minutes per device, "
        "with clocks, throttle reasons, temperature, ECC, retired pages and Xid events read throughout (default: "
        "off, its tests skip and say so)",
        parse=parse_minutes,
        default=None,
        metavar="MINUTES",
    ),
    OptionSpec(
        name="timeout",
        help="time budget of each gpuperf test in seconds, setup to teardown; past it the test fails and the "
        "session goes on (default 600 on CPU, 1200 for the GPU tier; 0: none; marker gpuperf_timeout overrides)",
        parse=parse_seconds,
        default=None,
        metavar="SECONDS",
    ),
)

ENVIRONMENT_ONLY: tuple[OptionSpec[Any], ...] = (
    OptionSpec(
        name="pg-timeout",
        help="process-group timeout of the ranks `launch()` starts, in seconds (gloo's own default is 30 minutes)",
        parse=parse_positive_seconds,
        default=60.0,
        metavar="S",
    ),
    OptionSpec(
        name="max-ranks",
        help="most ranks one `launch()` may spawn on this machine (default: 4 per CPU this process may use, at "
        "least 8)",
        parse=parse_count(1),
        default=None,
        metavar="N",
    ),
    OptionSpec(
        name="allow-compile",
        help="run the distributed strategies that compile DeepSpeed's cpu_adam extension (~40 s on 2 cores) on CPU "
        "too (default: only in the GPU tier)",
        parse=parse_bool,
        default=False,
    ),
    OptionSpec(
        name="slurm-ranks",
        help="inside a Slurm step (srun), each task is a rank: torchrun's variables come from Slurm's, the rendezvous "
        "at the step's first node (default: off; a step's tasks are independent sessions, as node acceptance runs "
        "them)",
        parse=parse_bool,
        default=False,
    ),
    OptionSpec(
        name="maxtext-python",
        help="a Python >= 3.12 that has MaxText, for the frameworks suite's MaxText test (default: this one)",
        parse=parse_program,
        default=None,
        metavar="PYTHON",
    ),
    OptionSpec(
        name="vllm",
        help="the vllm program of the frameworks suite's vllm bench serve test (default: beside this Python, in "
        ".venv-vllm, or on PATH)",
        parse=parse_program,
        default=None,
        metavar="PROGRAM",
    ),
    OptionSpec(
        name="sglang-python",
        help="a Python that has SGLang's benchmark client, for the frameworks suite's SGLang test (default: this "
        "one if it has sglang, else .venv-sglang's)",
        parse=parse_program,
        default=None,
        metavar="PYTHON",
    ),
    OptionSpec(
        name="megatron-lm",
        help="a Megatron-LM checkout holding pretrain_gpt.py, for the frameworks suite's Megatron test (default: "
        "none, the test skips)",
        parse=parse_text,
        default=None,
        metavar="DIR",
    ),
    OptionSpec(
        name="torchtitan",
        help="a TorchTitan checkout holding its debug model config, for the frameworks suite's TorchTitan test "
        "(default: none, the test skips)",
        parse=parse_text,
        default=None,
        metavar="DIR",
    ),
)
"""Settings read from the environment only (``GPUPERF_*``), also outside a pytest session (``launch()`` in a
script): no command-line option or ini key. ``environment_setting`` reads one."""


def environment_spec(name: str) -> OptionSpec[Any]:
    """The declaration of the environment-only setting ``name`` ('max-ranks')."""
    spec = next((spec for spec in ENVIRONMENT_ONLY if spec.name == name), None)
    if spec is None:
        raise KeyError(f"no setting {name!r} in ENVIRONMENT_ONLY")
    return spec


def environment_setting(name: str) -> Any:
    """The value of the environment-only setting ``name``: its variable parsed, else its default.

    SettingError quotes the variable and its value: "GPUPERF_MAX_RANKS='0': expected a whole number >= 1"."""
    spec = environment_spec(name)
    raw = os.environ.get(spec.env)
    if raw is None or not raw.strip():
        return spec.default
    try:
        return spec.parse(raw)
    except SettingError as error:
        raise SettingError(f"{spec.env}={raw!r}: {error}") from None


def option_default(name: str) -> Any:
    """The default of the option ``name`` (as in OPTIONS: 'machine-check'), the one place it is declared."""
    for spec in OPTIONS:
        if spec.name == name:
            return spec.default
    raise KeyError(f"no option {name!r} in OPTIONS")


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The resolved `gpuperf` settings of one pytest session.

    Each field's default is its option's (``option_default``), so a settings object built by hand gets what a user who
    sets nothing gets; tests/unit/test_settings_declared_once.py checks they stay the same."""

    baselines_dir: Path
    """Where baseline JSON files live."""
    save: bool = option_default("save")
    """Store this run's measurements as baselines."""
    accept: bool = option_default("accept")
    """Store REGRESSED measurements too (--gpuperf-accept); without it a save never absorbs a regression."""
    results_path: Path | None = option_default("results")
    """Where the run's JSON document goes, if anywhere."""
    machine_id: str | None = option_default("machine-id")
    """This machine's name as the runner gives it; None: the identity read from the system (or a hook's)."""
    device_request: str = option_default("device")
    """auto, cpu or cuda as asked; the device used is resolved lazily (it needs torch)."""
    threshold: float | None = option_default("threshold")
    """Smallest change that matters (fraction); None: the device's default."""
    noise_limit: float | None = option_default("noise-limit")
    """NOISY above this spread (fraction); None: the device's default."""
    run_noise: float | None = option_default("run-noise")
    """Prior between-run sd (fraction); None: the device's default."""
    sitting_noise: float | None = option_default("sitting-noise")
    """Prior sd of the shift between sittings (fraction); None: the device's default."""
    machine_noise: float | None = option_default("machine-noise")
    """Sd between machines of one hardware key (fraction); None: the device's prior. With a spread file, its pooled
    figure."""
    machine_spread: MachineSpread | None = None
    """The fleet's spread file given as --gpuperf-machine-noise: a figure per test and metric (``noise_for``)."""
    job_alpha: float = option_default("job-alpha")
    """The job's family-wise false-failure level (fraction)."""
    require_coverage: float | None = option_default("require-coverage")
    """Fail a gating job whose suites could not have caught a change this size (fraction worse); None: off."""
    repeats: int = option_default("repeats")
    warmup: int = option_default("warmup")
    strict: bool = option_default("strict")
    baseline_runs: int = option_default("baseline-runs")
    confirm: int = option_default("confirm")
    """Repeated attempts before REGRESSED fails a test (each must regress too)."""
    remeasure: int = option_default("remeasure")
    timeout: float | None = option_default("timeout")
    """Time budget of each gpuperf test in seconds (0: none); None: the tier's default (core/session/budget.py)."""
    machine_check: str = option_default("machine-check")
    """on: record the machine's state with each measurement and judge by it; record: record only; off: neither."""
    extend: int = option_default("extend")
    """Extra rounds an AMBIGUOUS measurement may take (sequential sampling); 0 never extends."""
    extend_seconds: float = option_default("extend-seconds")
    """Time a test may spend on those rounds."""
    measure_only: bool = option_default("measure-only")
    """Measure only (a `gpuperf ab` session): verdicts are recorded but fail nothing, nothing is saved."""
    profile: Path | None = option_default("profile")
    """Where each perf test's operator summary goes (core/record/profiling.py); None: nothing is profiled."""
    widen_cpus: frozenset[int] | None = option_default("widen-cpus")
    """The CPUs a session pinned by `gpuperf ab` widens to when its tests start their own ranks or servers."""
    inject_slowdown: dict[str, float] | None = option_default("inject-slowdown")
    """Suite marker -> fraction of extra work its workloads do while reporting their nominal work (a proof that the
    gate catches a slowdown); None: none."""
    burnin_minutes: float | None = option_default("burnin-minutes")
    """Minutes of sustained load per device in the burn-in tier; None: the tier is off (its tests skip)."""
    take_turns: str | None = option_default("take-turns")
    """The turn channel's path prefix (core/session/turns.py) in a `gpuperf ab --take-turns` session; None: no turns."""

    @property
    def gating(self) -> bool:
        """Whether a verdict may fail a test: not while recording baselines, not in a measure-only session."""
        return not (self.save or self.measure_only)

    def noise_for(self, test: str, metric: str, device: str) -> float:
        """The spread between machines for one test's metric: the spread file's figure, else ``machine_noise``
        (the device's prior where none was given)."""
        if self.machine_spread:
            return self.machine_spread.lookup(test, metric)
        return self.for_device(device, "machine_noise")

    def slowdown(self, suite: str) -> float:
        """The fraction of extra work injected into ``suite``'s workloads (0: none)."""
        return (self.inject_slowdown or {}).get(suite, 0.0)

    def for_device(self, device: str, name: str) -> float:
        """A device-dependent setting: the explicit value, else the device's default (core/verdict/policy.py)."""
        return setting(name, given=getattr(self, name), device=device)

    def as_results(self, device: str) -> dict[str, Any]:
        """The settings a results document records (its "settings" block, which `gpuperf compare`, `report` and
        `ab` read): the device-dependent ones as ``device`` resolved them."""
        recorded = {name: getattr(self, name) for name in RECORDED_AS_SET}
        resolved = {name: self.for_device(device, name) for name in DEVICE_DEFAULTS["cpu"]}
        spread = self.machine_spread.source if self.machine_spread else None
        return {**recorded, **resolved, "machine_spread": spread, "saved": self.save}


def build_settings(config: pytest.Config) -> Settings:
    values: dict[str, Any] = {spec.name.replace("-", "_"): resolve(config, spec)[0] for spec in OPTIONS}
    baselines = values.pop("baselines")
    results = values.pop("results")
    profile = values.pop("profile")
    rootdir = Path(str(config.rootpath))
    if isinstance(values["machine_noise"], MachineSpread):
        values["machine_spread"] = values["machine_noise"]
        values["machine_noise"] = values["machine_spread"].pooled
    if values["measure_only"]:  # a measuring session of `gpuperf ab`: the pairs decide, not this session
        values.update(save=False, strict=False, confirm=0)
    return Settings(
        baselines_dir=(rootdir / baselines) if baselines else rootdir / "baselines",
        results_path=(Path(config.invocation_params.dir) / results) if results else None,
        profile=(Path(config.invocation_params.dir) / profile) if profile else None,
        device_request=values.pop("device"),
        **values,
    )


RECORDED_AS_SET = (
    "job_alpha",
    "repeats",
    "warmup",
    "strict",
    "measure_only",
    "machine_check",
    "extend",
    "extend_seconds",
)
"""Settings a results document records as they are (Settings.as_results adds the device-dependent ones)."""


settings_key = pytest.StashKey[Settings]()


def get_settings(config: pytest.Config) -> Settings:
    """The session's settings, resolved on first use."""
    settings = config.stash.get(settings_key, None)
    if settings is None:
        settings = build_settings(config)
        config.stash[settings_key] = settings
    return settings
