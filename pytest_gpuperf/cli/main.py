"""The `gpuperf` command. Each subcommand is a function taking parsed arguments and returning an exit status."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_gpuperf.cli.accept import add_parser as add_accept
from pytest_gpuperf.cli.option_defaults import declared, pct_text
from pytest_gpuperf.core.verdict.policy import DEVICE_DEFAULTS


def cmd_env(args: argparse.Namespace) -> int:
    from pytest_gpuperf.core.session.session import resolve_device
    from pytest_gpuperf.machine.fingerprint import collect

    try:
        device = resolve_device(args.device)
    except Exception as error:  # pytest.UsageError when cuda is asked for and absent
        print(f"gpuperf env: {error}", file=sys.stderr)
        return 2
    fingerprint = collect(device)
    if args.json:
        print(json.dumps(fingerprint.as_dict(), indent=1, sort_keys=True))
        return 0
    print(f"hardware key: {fingerprint.slug}")
    for name, value in fingerprint.hardware_key.items():
        print(f"  {name}: {json.dumps(value, sort_keys=True)}")
    for name, value in fingerprint.labels.items():
        print(f"  {name} name (not keyed): {value}")
    print("stack:")
    for name, value in fingerprint.stack.items():
        print(f"  {name}: {value}")
    return 0


def _default_pct(name: str, device: str = "cpu") -> str:
    """A plugin default as help text quotes it: 'threshold' -> '2%%' (argparse's escape of %)."""
    return pct_text(DEVICE_DEFAULTS[device][name])


def percentage(text: str) -> float:
    return _setting_value("parse_percentage", text)


def percentage_or_zero(text: str) -> float:
    return _setting_value("parse_percentage_or_zero", text)


def _setting_value(parser: str, text: str) -> float:
    """A value parsed as the plugin's options are (core/config/settings.py, imported only when an option is given)."""
    from pytest_gpuperf.core.config import settings

    try:
        value: float = getattr(settings, parser)(text)
    except settings.SettingError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    return value


def lazy(module: str) -> Callable[[argparse.Namespace], int]:
    """The ``run`` function of pytest_gpuperf.cli.<module>, imported only when that command runs."""

    def call(args: argparse.Namespace) -> int:
        return int(importlib.import_module(f"pytest_gpuperf.cli.{module}").run(args))

    return call


EXAMPLES = """\
examples:
  gpuperf env --json
  gpuperf models hf:qwen3-30b-a3b hf:my-model/config.json --format json
  gpuperf run --baselines ~/gpuperf-baselines --suite training -- -m perf --gpuperf-save
  gpuperf ab --a .venv/bin/python --b 'env MY_FLAG=1 .venv/bin/python' -- pytest_gpuperf/suites/test_micro.py -m perf
  gpuperf bisect --good good.txt --bad 'torch==2.14.1 deepspeed==0.19.8' -- tests/perf
  gpuperf compare runs/rocm-7.0/ runs/rocm-7.1/ --format md
  gpuperf variance --reference ours.json partner-a/ partner-b/ --tolerance 1%
  gpuperf variance --trust partner-keys/ --reference-unsigned --reference ours.json partner-a/ partner-b/
  gpuperf fleet nodes/ --html fleet.html --save-spread fleet-spread.json
  gpuperf accept --out /shared/acceptance --nodes 64     # inside sbatch: examples/slurm/acceptance.sbatch
  gpuperf history nightly/ --accepted accepted-changes.json
  gpuperf report nightly/ --baselines baselines/ -o report.html
  gpuperf baselines diff old-baselines/ baselines/
  gpuperf keygen partner.key && gpuperf sign --key partner.key bundle/
  gpuperf verify --public-key partner.key.pub bundle/
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuperf",
        description="Inspect and analyse pytest-gpuperf runs: results JSON (--gpuperf-results) and JUnit XML "
        "(--junitxml) files, or folders of them. Bad input: a one-line error and exit status 2.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    env = commands.add_parser(
        "env",
        help="print this machine's fingerprint (hardware key and stack); example: gpuperf env --json",
        description="Print the hardware key that baselines are matched on and the stack that is recorded.",
    )
    env.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    env.add_argument("--json", action="store_true", help="print JSON instead of text")
    env.set_defaults(run=cmd_env)

    suites = commands.add_parser(
        "run",
        help="run the shipped suites with pytest (arguments after -- go to pytest); "
        "example: gpuperf run --baselines DIR --suite micro -- -k gemm",
        description="Run the suites shipped in the installed package (pytest --pyargs pytest_gpuperf.suites). "
        "Arguments after -- go to pytest: options (-k, -m, --gpuperf-save, ...) and paths of your own suites, "
        "which run beside the shipped ones. Exit status: pytest's.",
    )
    suites.add_argument(
        "--baselines",
        metavar="DIR",
        help="baseline folder, read and (with --gpuperf-save) written as DIR/<hardware-key>/ "
        "(default: baselines/ in the current folder)",
    )
    suites.add_argument(
        "--suite",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this shipped suite (training, inference, micro, distributed); repeatable (default: all)",
    )
    suites.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS")
    suites.set_defaults(run=lazy("suites"))
    _add_ab(commands)
    _add_bisect(commands)

    models = commands.add_parser(
        "models",
        help="list the model names --gpuperf-models takes, with source and parameter counts; "
        "example: gpuperf models --format json",
        description="Built-in specs and the shipped Hugging Face configurations (hf:NAME), or the hf: names "
        "given (hf:PATH/config.json too): source, total and active parameters of the full model, the published "
        "figures, and the cut the CPU tier builds. Counting hf: models needs torch and transformers "
        "(pip install 'pytest-gpuperf[hf]'). Exit status 2 on a bad name or file.",
    )
    models.add_argument("names", nargs="*", metavar="hf:NAME", help="only these hf: models (default: all)")
    _add_format(models)
    models.set_defaults(run=lazy("models"))

    compare = commands.add_parser(
        "compare",
        help="judge NEW against BASE per test and metric, with the stack changes; exit 1 on REGRESSED; "
        "example: gpuperf compare rocm70/ rocm71/",
        description="Per test and metric: both medians, the ratio with its 95%% interval, p-value, verdict (the "
        "plugin's statistics, BASE's runs as the baseline) and the stack components that differ. Exit status 1 "
        "when anything REGRESSED, 0 otherwise, 2 on bad input.",
    )
    compare.add_argument("base", metavar="BASE", help="results JSON / JUnit XML file, or a folder of them")
    compare.add_argument("new", metavar="NEW", help="results JSON / JUnit XML file, or a folder of them")
    _add_rules(compare)
    _add_format(compare)
    compare.set_defaults(run=lazy("compare"))

    variance = commands.add_parser(
        "variance",
        help="equivalence of each submission to a reference within a tolerance; "
        "example: gpuperf variance --reference ref.json a/ b/ --tolerance 1%%",
        description="Per submission and workload, two one-sided tests: the 90%% bootstrap interval of the ratio "
        "inside 1 +- tolerance is PASS, entirely outside is FAIL, otherwise INCONCLUSIVE with the runs (and "
        "repeats) that would decide it; per submission, the runs it would need to show equivalence on every "
        "workload. With --trust, each bundle must carry a valid signature (SUB.sig, from gpuperf sign) by a "
        "trusted key, or nothing is judged (exit 2). Exit status 1 when any submission FAILs.",
    )
    variance.add_argument("--reference", required=True, metavar="REF", help="the reference run(s)")
    variance.add_argument("submissions", nargs="+", metavar="SUB", help="one file or folder per submission")
    variance.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="KEYS",
        help="a public key (PEM, KEY.pub from gpuperf keygen) or a folder of *.pub files; repeatable. Every SUB "
        "(and REF) must then be signed, as SUB.sig beside it, by one of them and unchanged since",
    )
    variance.add_argument(
        "--reference-unsigned",
        action="store_true",
        help="with --trust: take REF as it is (your own results), checking only the submissions",
    )
    variance.add_argument(
        "--tolerance",
        type=percentage,
        default=None,
        metavar="PCT",
        help=declared("cli.variance", "TOLERANCE", "default {default}", pct_text),
    )
    variance.add_argument(
        "--run-noise",
        type=percentage,
        default=None,
        metavar="PCT",
        help=declared(
            "cli.variance",
            "RUN_NOISE",
            "between-run sd of a run's median (default: the reference's setting, else {default})",
            pct_text,
        ),
    )
    _add_format(variance)
    variance.set_defaults(run=lazy("variance"))

    _add_fleet(commands)
    add_accept(commands)

    history = commands.add_parser(
        "history",
        help="each metric's series over runs and its change points, attributed to stack changes; "
        "example: gpuperf history nightly/",
        description="Runs are ordered by their timestamp. Change points: e-divisive means split with a Student "
        "t-test, then merge (the Hunter/Otava method); reported only with >= --min-after runs after the change "
        "and a magnitude above --threshold.",
    )
    history.add_argument("paths", nargs="+", metavar="PATH", help="results files or folders, one run per file")
    history.add_argument(
        "--threshold",
        type=percentage,
        default=None,
        metavar="PCT",
        help=f"smallest change reported (default: the runs' threshold setting, else {_default_pct('threshold')})",
    )
    history.add_argument(
        "--max-pvalue",
        type=float,
        default=None,
        metavar="P",
        help=declared("cli.changepoints", "MAX_PVALUE", "significance of a split (default {default})"),
    )
    history.add_argument(
        "--min-after",
        type=int,
        default=2,
        metavar="N",
        help="runs needed after a change before it is reported (default %(default)s)",
    )
    history.add_argument(
        "--accepted",
        metavar="FILE",
        help='JSON list of accepted changes [{"run": FILE-NAME, "test": .., "metric": ..}]; '
        "each resets its series at that run",
    )
    _add_format(history)
    history.set_defaults(run=lazy("history"))

    report = commands.add_parser(
        "report",
        help="one self-contained HTML report with plots; example: gpuperf report runs/ -o report.html",
        description="Summary table, throughput per stack version, loss curves against their goldens, inference "
        "Pareto fronts; matplotlib plots embedded as PNG.",
    )
    report.add_argument("paths", nargs="+", metavar="PATH")
    report.add_argument("-o", "--output", required=True, metavar="FILE")
    report.add_argument("--baselines", metavar="DIR", help="baseline folder whose stored curves are the goldens")
    report.set_defaults(run=lazy("report_html"))

    baselines = commands.add_parser(
        "baselines",
        help="baseline folder tools; example: gpuperf baselines diff old/ baselines/",
        description="Tools for baseline folders.",
    )
    baseline_commands = baselines.add_subparsers(dest="baselines_command", metavar="ACTION", required=True)
    diff = baseline_commands.add_parser(
        "diff",
        help="what a baseline regeneration changed, for review before commit",
        description="Entries added, removed and changed between two baseline folders (or files): medians, runs "
        "and stacks.",
    )
    diff.add_argument("old", metavar="OLD")
    diff.add_argument("new", metavar="NEW")
    _add_format(diff)
    diff.set_defaults(run=lazy("baselines"))
    rekey = baseline_commands.add_parser(
        "rekey",
        help="move this machine's baselines from its former hardware key (CPU model name) to its current one",
        description="Renames <baselines>/<former key>/ to <baselines>/<current key>/ (git mv in a git work tree) "
        "and writes the current key into each file. Run it on the machine that recorded them (docs/baselines.md).",
    )
    rekey.add_argument("--baselines", default="baselines", metavar="DIR", help="baseline folder (default baselines)")
    rekey.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    rekey.add_argument("--dry-run", action="store_true", help="say what would move, move nothing")
    rekey.set_defaults(run=lazy("rekey"))

    keygen = commands.add_parser(
        "keygen",
        help="create an ed25519 key pair for signing; example: gpuperf keygen partner.key",
        description="Writes KEY (private, PEM, mode 600) and KEY.pub (public, PEM). Needs the 'sign' extra.",
    )
    keygen.add_argument("key", metavar="KEY")
    keygen.set_defaults(run=lazy("signing"), action="keygen")
    sign = commands.add_parser(
        "sign",
        help="sign a results bundle with an ed25519 key; example: gpuperf sign --key partner.key bundle/",
        description="Signs the canonical JSON of every results file (numbers and fingerprint) in the bundle.",
    )
    sign.add_argument("paths", nargs="+", metavar="PATH", help="results files or a folder")
    sign.add_argument("--key", required=True, metavar="KEY", help="private key (PEM) from gpuperf keygen")
    sign.add_argument("-o", "--output", metavar="SIG", help="signature file (default: PATH.sig for one PATH)")
    sign.set_defaults(run=lazy("signing"), action="sign")
    verify = commands.add_parser(
        "verify",
        help="check a bundle's signature; exit 1 if anything was edited; "
        "example: gpuperf verify --public-key partner.key.pub bundle/",
        description="Exit 0 when the signature is valid for these files and this public key, 1 when not.",
    )
    verify.add_argument("paths", nargs="+", metavar="PATH")
    verify.add_argument("--public-key", required=True, metavar="PUB", help="the signer's public key (PEM)")
    verify.add_argument("--signature", metavar="SIG", help="signature file (default: PATH.sig for one PATH)")
    verify.set_defaults(run=lazy("signing"), action="verify")
    return parser


def _add_fleet(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fleet = commands.add_parser(
        "fleet",
        help="which node, which GPU, is slower than its siblings: each unit against the fleet's median and its "
        "measured spread; exit 1 when one is listed; example: gpuperf fleet nodes/ --html fleet.html",
        description="One results file per node (or folders of them); files of one machine identity are one node. "
        "Nodes are grouped by hardware key and judged among themselves; a result whose context names a device is "
        "that device's unit. A unit is listed when it is worse than the median of the other units by the "
        "tolerance, beyond --z-threshold MADs of them, and its samples separate from theirs (one-sided "
        "Mann-Whitney at --alpha over every placement). Exit status 0: none listed, 1: some listed, 2: bad input "
        "or nothing could be judged. See docs/fleet.md.",
    )
    fleet.add_argument("results", nargs="+", metavar="RESULTS", help="results JSON / JUnit XML files or folders")
    fleet.add_argument(
        "--tolerance",
        type=percentage,
        default=None,
        metavar="PCT",
        help=declared(
            "core.stats.fleet",
            "FleetRules.tolerance",
            "smallest deficit against the other units' median that lists a unit (default {default})",
            pct_text,
        ),
    )
    fleet.add_argument(
        "--z-threshold",
        type=_positive_number,
        default=None,
        metavar="Z",
        help=declared(
            "core.stats.fleet",
            "FleetRules.z",
            "smallest robust z (MADs of the other units, Iglewicz-Hoaglin modified z) that lists a unit (default "
            "{default})",
        ),
    )
    fleet.add_argument(
        "--alpha",
        type=_fraction,
        default=None,
        metavar="P",
        help=declared(
            "core.stats.fleet",
            "FleetRules.alpha",
            "chance that a fleet of equal units lists one, over all units and metrics (default {default})",
        ),
    )
    fleet.add_argument(
        "--spread-prior",
        type=percentage_or_zero,
        default=None,
        metavar="PCT",
        help="prior spread between healthy units, pooled with the fleet's own MAD so that a few units cannot "
        "measure theirs too small (default: the device's between-sittings noise, "
        f"{_default_pct('sitting_noise')} on CPU, none on a GPU; 0: none)",
    )
    fleet.add_argument("--html", metavar="FILE", help="also write an HTML page with a strip plot per metric")
    fleet.add_argument(
        "--save-spread",
        metavar="FILE",
        help="write the fleet's spread per metric (one hardware key) for --gpuperf-machine-noise FILE",
    )
    _add_format(fleet)
    fleet.set_defaults(run=lazy("fleet"))


def _positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e6:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number such as 3.5")
    return value


def _add_ab(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ab = commands.add_parser(
        "ab",
        help="compare two stacks interleaved on this machine (paired sessions, sequential stopping); exit 1 on "
        "REGRESSED; example: gpuperf ab --a .venv-a/bin/python --b .venv-b/bin/python -- "
        "pytest_gpuperf/suites/test_micro.py",
        description="Runs `CMD -m pytest PYTEST_ARGS` for each side in balanced random order (ABBA/BAAB blocks), "
        "judges every metric on the paired log-ratios after each pair (Wilcoxon signed-rank, Hodges-Lehmann "
        "interval, error rates held over the repeated looks) and stops when every metric is PASS (same within "
        "the threshold), REGRESSED or IMPROVED, or at --max-pairs / --budget (the rest AMBIGUOUS). See docs/ab.md.",
    )
    ab.add_argument("--a", required=True, metavar="CMD_A", help="side A's Python as a command prefix (shlex-split)")
    ab.add_argument("--b", required=True, metavar="CMD_B", help="side B's, e.g. 'env VAR=1 /opt/b/bin/python'")
    _add_ab_options(ab)
    ab.add_argument(
        "--profile",
        action="store_true",
        help="after the verdict, one more session per side under torch.profiler (never judged): each test's "
        "operators, their self time per call, and the ones that carry a REGRESSED or IMPROVED test's change",
    )
    ab.add_argument("--out", metavar="DIR", help="where sessions and ab.json go (default gpuperf-ab/<UTC time>)")
    ab.add_argument("--junitxml", metavar="FILE", help="also write the verdicts as JUnit XML")
    ab.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARGS", help="after --: what each session runs")
    ab.set_defaults(run=lazy("ab"))


def _add_bisect(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bisect = commands.add_parser(
        "bisect",
        help="which stack component moved a metric: mixed stacks of two pin sets compared with the ab engine; "
        "example: gpuperf bisect --good good.txt --bad 'numpy==2.1.0 torch==2.14.1' -- tests/perf",
        description="Compares the good stack with the bad one (gpuperf ab), then bisects each metric that "
        "REGRESSED (or each --metric) over the components whose pins differ: each step builds a mixed stack "
        "(by default a venv layered on this environment, the pins pip-installed) and compares it with the good "
        "one. An unbuildable combination is skipped; kernel driver, firmware and CUDA driver are listed, never "
        "bisected. See docs/bisect.md.",
    )
    bisect.add_argument("--good", required=True, metavar="SPEC", help="requirements file or 'name==version ...'")
    bisect.add_argument("--bad", required=True, metavar="SPEC", help="the stack that regressed, the same way")
    bisect.add_argument(
        "--build",
        metavar="TEMPLATE",
        help="shell command that builds a stack into {dir} from {pins} / {requirements} ({python}: this Python); "
        "default: a venv layered on this environment with the pins pip-installed",
    )
    bisect.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="TEST::METRIC",
        help="bisect this metric (repeatable); default: those the good-vs-bad run finds REGRESSED",
    )
    _add_ab_options(bisect)
    bisect.add_argument(
        "--profile",
        action="store_true",
        help="after the search, one more session per side of each culprit's step under torch.profiler (never "
        "judged), as `gpuperf ab --profile`: the operators that carry its change, in bisect.json",
    )
    bisect.add_argument("--out", metavar="DIR", help="steps, envs and bisect.json (default gpuperf-bisect/<UTC time>)")
    bisect.add_argument("--cache", metavar="DIR", help="where built stacks are kept by pin set (default OUT/envs)")
    bisect.add_argument("--junitxml", metavar="FILE", help="also write one testcase per bisected metric as JUnit")
    bisect.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARGS", help="after --: what each session runs")
    bisect.set_defaults(run=lazy("bisect"))


def _add_ab_options(ab: argparse.ArgumentParser) -> None:
    """The statistics options `ab` and `bisect` share."""
    ab.add_argument(
        "--threshold",
        type=percentage,
        default=None,
        metavar="PCT",
        help="smallest change that matters (default: the sessions' setting, "
        f"{_default_pct('threshold')} on CPU, {_default_pct('threshold', 'cuda')} on GPU)",
    )
    ab.add_argument(
        "--min-pairs",
        type=_count(1),
        default=None,
        metavar="N",
        help=declared("ab.model", "AbPlan.min_pairs", "first look (default {default})"),
    )
    ab.add_argument(
        "--take-turns",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run both sessions of a pair at once, taking turns test by test and round by round, so both sides "
        "of a test are measured seconds apart (POSIX named pipes in --out; a container side must mount it); "
        "default: on where this machine has no GPU and PYTEST_ARGS start no xdist workers or ranks",
    )
    ab.add_argument(
        "--cpus",
        type=cpu_list,
        default=None,
        metavar="LIST",
        help="run both sides' sessions on these CPUs only (Linux affinity, e.g. 1 or 0-3,8; all: unpinned): with "
        "--take-turns, the two sides of a one-thread workload then share one core's state (a container side is not "
        "pinned); default when taking turns: the first CPU this process may use, a session whose tests start their "
        "own ranks or servers widening to all of them",
    )
    ab.add_argument(
        "--max-pairs",
        type=_count(1),
        default=None,
        metavar="N",
        help=declared("ab.model", "AbPlan.max_pairs", "last look (default {default})"),
    )
    ab.add_argument(
        "--max-left-out",
        type=_count(0),
        default=None,
        metavar="N",
        help="pairs run beyond --max-pairs to replace pairs the machine's state left out of a metric "
        "(default: as many as --max-pairs; 0: left-out pairs count against --max-pairs)",
    )
    ab.add_argument(
        "--session-figure",
        choices=("best", "median"),
        default=None,
        help="each session's figure for a metric: its best sample (lowest time, highest rate; the default: noise on "
        "a shared machine only adds time) or its median (when a change that slows some calls only must count)",
    )
    ab.add_argument("--budget", type=_duration, default=None, metavar="DURATION", help="e.g. 15m, 1h, 600s")
    ab.add_argument(
        "--alpha",
        type=_fraction,
        default=None,
        metavar="P",
        help=declared(
            "ab.model", "AbPlan.alpha", "chance that an unchanged metric is flagged, over all looks (default {default})"
        ),
    )
    ab.add_argument(
        "--repeats",
        type=_count(0),
        default=None,
        metavar="N",
        help=declared(
            "ab.model",
            "AbPlan.repeats",
            "timed repeats per measurement in each session (default {default}; 0: the suite's own)",
        ),
    )
    ab.add_argument(
        "--max-dropped",
        type=_count(0),
        default=None,
        metavar="N",
        help=declared("ab.model", "AbPlan.max_dropped", "dropped pairs allowed (default {default})"),
    )
    ab.add_argument(
        "--seed",
        type=int,
        default=None,
        help=declared("ab.model", "AbPlan.seed", "seed of the session order (default {default})"),
    )


def cpu_list(text: str) -> frozenset[int]:
    """CPU numbers as taskset -c writes them: "1", "0,2", "0-3,8" (core/config/settings.py ``parse_cpus``); "all"
    (wherever the sessions may run): the empty set."""
    from pytest_gpuperf.core.config.settings import SettingError, parse_cpus

    if text.strip().lower() == "all":
        return frozenset()
    try:
        return parse_cpus(text)
    except SettingError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= {minimum}")
        return value

    return parse


def _duration(text: str) -> float:
    from pytest_gpuperf.core.config.settings import SettingError, parse_duration

    try:
        return parse_duration(text)
    except SettingError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 0.5:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a probability between 0 and 0.5, such as 0.01")
    return value


def _add_rules(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threshold",
        type=percentage,
        default=None,
        metavar="PCT",
        help=f"smallest change that matters (default: BASE's setting, else {_default_pct('threshold')})",
    )
    parser.add_argument(
        "--noise-limit",
        type=percentage,
        default=None,
        metavar="PCT",
        help="NOISY above this spread, log Q3/Q1 of the samples (default: BASE's setting, else "
        f"{_default_pct('noise_limit')})",
    )
    parser.add_argument(
        "--run-noise",
        type=percentage,
        default=None,
        metavar="PCT",
        help="prior between-run sd (default: BASE's setting, else "
        f"{_default_pct('run_noise')}, the plugin's CPU default)",
    )
    parser.add_argument(
        "--sitting-noise",
        type=percentage_or_zero,
        default=None,
        metavar="PCT",
        help="prior sd of the machine's shift between sittings, added where NEW was measured an hour or more "
        f"from BASE's runs (default: BASE's setting, else {_default_pct('sitting_noise')}, the plugin's CPU default)",
    )


def _add_format(parser: argparse.ArgumentParser) -> None:
    from pytest_gpuperf.cli.tables import FORMATS

    parser.add_argument("--format", choices=FORMATS, default="table", help="output format (default %(default)s)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")


OUTPUT_OPTIONS = {"output": "-o/--output", "junitxml": "--junitxml", "html": "--html", "save_spread": "--save-spread"}
"""The options naming a file a command writes: its folder must exist (cli/output.py ``check_folder``), and it may
not be one of the command's inputs (``check_not_an_input``)."""
INPUT_ARGUMENTS = ("base", "new", "old", "reference", "submissions", "trust", "paths", "results", "good", "bad")
"""The arguments naming what a command reads (files, folders; a pin list is no path and is passed over): no
output may be one of them or a results file inside one (cli/output.py ``check_not_an_input``)."""


def _check_outputs(args: argparse.Namespace) -> None:
    """Before any work, for every command alike: an output file whose folder does not exist is refused, and so is
    one that is an input or would be read as one."""
    from pytest_gpuperf.cli.output import check_folder, check_not_an_input

    inputs: list[Path] = []
    for name in INPUT_ARGUMENTS:
        value = getattr(args, name, None)
        inputs.extend(Path(item) for item in ([value] if isinstance(value, str) else value or ()) if item)
    for key in ("key", "public_key", "signature"):  # sign's and verify's inputs (keygen's KEY is its output)
        if args.command in ("sign", "verify") and isinstance(getattr(args, key, None), str):
            inputs.append(Path(getattr(args, key)))
    for name, option in OUTPUT_OPTIONS.items():
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            check_folder(Path(value), what=f"{option} file")
            check_not_an_input(Path(value), inputs, option=option)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    from pytest_gpuperf.cli.loading import InputError

    try:
        _check_outputs(args)
        return int(args.run(args))
    except InputError as error:
        print(f"gpuperf {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader of standard output went away (`gpuperf compare ... | head`): nothing left to say to it
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as error:
        # A path none of the checks foresaw (a name too long, a parent folder without permission): still a
        # fact about the user's files, said in one line.
        where = os.fsdecode(error.filename) if error.filename is not None else "a path given"
        print(
            f"gpuperf {args.command}: error: {where}: {error.strerror or error}; check the path and its folders",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"gpuperf {args.command}: interrupted; no output file was left half-written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
