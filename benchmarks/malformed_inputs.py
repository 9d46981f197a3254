"""Feed damaged results files to the `gpuperf` loaders, then hostile command lines to `gpuperf` itself.

    python benchmarks/malformed_inputs.py [--count N] [--cli-runs N] [--report-runs N] [--records N]
        [--sessions N] [--ab-cases N] [--signals N] [--timeout S] [--seed S] [--write]

Part 1 parses ``--count`` damaged JSON/XML documents in this process (tests/helpers/fuzz_inputs.malformed). Part 2
runs ``--cli-runs`` whole command lines (tests/helpers/fuzz_inputs.cli_case) over a pool of fair and hostile paths:
devices, FIFOs, unwritable and full outputs, markup and surrogates in names, UTF-16 XML with a DTD, duplicate
keys, crafted slugs. Each command runs in a forked child (the CLI's imports are paid once) with its standard
input closed, an address-space limit of 2 GiB over the parent's and ``--timeout`` seconds; a child still
running then is killed and counted as a hang. A traceback, a hang, or exit status 2 with more than one line on
stderr is a defect. It is a fuzz run, not a timing benchmark.

Parts 3-7 generate the shapes of issue 38: malformed ``ab.json``/``bisect.json`` fed to ``gpuperf report``
(``--report-runs``, forked like part 2); ``perf.record`` calls with numpy/torch values, sets, arrays, objects and
units no file holds, carried through the store and the results writer in this process (``--records``); whole
pytest sessions (``--sessions``) whose perf test records such a value, or whose baselines/<key>/ holds a FIFO, a
link to /dev/zero or /dev/urandom, a loop, a folder or garbage; ``gpuperf ab`` with wrapper-script and
FIFO-leaving sides (``--ab-cases``); SIGTERM and SIGHUP to a pytest whose ranks run or start (``--signals``).
Parts 8-10 (benchmarks/malformed_surfaces.py) cover issue 48's surfaces: every adapter on hostile text and files
(``--adapter-inputs``), writer options aimed at their own inputs (``--writer-cases``), and SIGTERM/SIGHUP/SIGINT
at a random moment of a session or a bisect build (``--stop-signals``).
Besides tracebacks and hangs these count data lost (a baseline file that existed before and is gone or
unreadable after, a fair test's baseline or a results file not written) and processes or ``gpuperf-ranks-*``
folders left behind.

--write replaces the '## Malformed inputs' section of benchmarks/README.md with the figures. Exit status 1
when any defect was found.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

import fuzz_inputs  # noqa: E402
import malformed_surfaces  # noqa: E402
from fuzz_inputs import cli_case, hostile_pool, load, malformed  # noqa: E402

from pytest_gpuperf.cli.loading import InputError  # noqa: E402

REPLACEMENTS: list[Any] = [None, 0, -1, 1.5, True, "x", "", [], {}, [1, "a"], {"a": None}, [[]], 10**30]


HISTORY = """The same harness against the command before these fixes (commit 5eefc03, `PYTHONPATH` pointing at its
`pytest_gpuperf`, `--count 1000 --cli-runs 400 --timeout 5`, 2026-12-01, same loaded machine): **67 tracebacks and
88 hangs in 400 command lines** (hangs: FIFOs opened for reading or writing, /dev/zero and /dev/urandom read until
the 2 GiB limit or the clock; tracebacks: names too long, outputs, keygen, markup, surrogates, overflow, 1e999,
duplicate-key bundles). Its loaders also let UTF-16 DTDs through the ASCII byte check: a 3.5 kB file with entities 5
deep expanded to 100,000 copies in 112 ms, 6 or more deep ran ~0.6 s until expat's own amplification limit stopped
it; defusedxml now refuses each in under 0.1 ms. Issue 38's hostile pass over d29cedd found 52 tracebacks, 5 hangs
and 7 cases that lost data in the shapes parts 3-7 now generate.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--cli-runs", type=int, default=1500, help="hostile command lines (default 1500)")
    parser.add_argument("--report-runs", type=int, default=600, help="gpuperf report on ab/bisect.json (600)")
    parser.add_argument("--records", type=int, default=2000, help="perf.record calls in this process (2000)")
    parser.add_argument("--sessions", type=int, default=40, help="whole pytest sessions (default 40)")
    parser.add_argument("--ab-cases", type=int, default=8, help="gpuperf ab runs with hostile sides (default 8)")
    parser.add_argument("--signals", type=int, default=4, help="pytest signalled while ranks run (default 4)")
    parser.add_argument("--adapter-inputs", type=int, default=3000, help="hostile adapter inputs (default 3000)")
    parser.add_argument("--writer-cases", type=int, default=300, help="outputs aimed at inputs (default 300)")
    parser.add_argument("--stop-signals", type=int, default=20, help="runs stopped by a signal (default 20)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a command counts as hung")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", action="store_true", help="update benchmarks/README.md")
    args = parser.parse_args()
    began = time.time()
    rng = random.Random(args.seed)
    outcomes: collections.Counter[str] = collections.Counter()
    problems: collections.Counter[str] = collections.Counter()
    crashes: list[str] = []
    durations: list[float] = []
    for _ in range(args.count):
        kind, data = malformed(rng, rng.choice(REPLACEMENTS))
        start = time.perf_counter()
        try:
            answer = load(kind, data)
        except Exception:  # the defect this benchmark exists to find
            crashes.append(traceback.format_exc(limit=3))
            outcomes[f"{kind}: other exception"] += 1
            continue
        durations.append(time.perf_counter() - start)
        if isinstance(answer, InputError):
            outcomes[f"{kind}: InputError"] += 1
            problem = str(answer).split(": ", 1)[-1]
            problems[re.split(r"[(\d'\"]", problem)[0].strip(" :")[:50]] += 1
        else:
            outcomes[f"{kind}: loaded"] += 1
    durations.sort()
    total = sum(durations)
    parse_lines = [
        f"**Part 1, damaged results files.** {args.count} damaged results JSON and JUnit XML files (truncated, "
        "bytes flipped or inserted, JSON nodes replaced or deleted, XML garbled; see tests/helpers/fuzz_inputs.py) "
        "parsed "
        "by the `gpuperf` loaders in this process.",
        "",
        "| outcome | inputs |",
        "| --- | --- |",
        *[f"| {name} | {count} |" for name, count in sorted(outcomes.items())],
        "",
        f"Exceptions other than the one-line InputError: **{len(crashes)}**. Parse time per input: median "
        f"{durations[len(durations) // 2] * 1e6:.0f} us, 99th percentile "
        f"{durations[int(len(durations) * 0.99)] * 1e6:.0f} us, "
        f"total {total:.2f} s.",
        "",
        "Most frequent errors (message start, by count): "
        + "; ".join(f"{name or '?'} ({count})" for name, count in problems.most_common(6))
        + ".",
        "",
    ]
    for crash in crashes[:5]:
        print(crash, file=sys.stderr)
    cli_lines, cli_defects = command_lines(args)
    parts = [
        ("report on ab.json / bisect.json", report_documents),
        ("perf.record values", record_values),
        ("pytest sessions", pytest_sessions),
        ("gpuperf ab sides", ab_sides),
        ("signals during ranks", rank_signals),
        ("framework adapters", malformed_surfaces.adapters),
        ("outputs aimed at inputs", malformed_surfaces.writers),
        ("stop signals", malformed_surfaces.stop_signals),
    ]
    part_lines: list[str] = []
    tally: list[tuple[str, int, int]] = [("damaged results files (part 1)", args.count, len(crashes))]
    tally.append(("hostile command lines (part 2)", args.cli_runs, cli_defects))
    for number, (name, run_part) in enumerate(parts, start=3):
        lines, inputs, defects = run_part(args)
        part_lines += lines
        tally.append((f"{name} (part {number})", inputs, len(defects)))
        for defect in defects[:8]:
            print(f"DEFECT ({name}): {defect}", file=sys.stderr)
    ended = time.time()
    inputs_total = sum(n for _, n, _ in tally)
    defects_total = sum(d for _, _, d in tally)
    stamp = "%Y-%m-%d %H:%M"
    header = [
        "## Malformed inputs",
        "",
        f"`python benchmarks/malformed_inputs.py --count {args.count} --cli-runs {args.cli_runs} --report-runs "
        f"{args.report_runs} --records {args.records} --sessions {args.sessions} --ab-cases {args.ab_cases} "
        f"--signals {args.signals} --adapter-inputs {args.adapter_inputs} --writer-cases {args.writer_cases} "
        f"--stop-signals {args.stop_signals} --timeout {args.timeout:g} --seed {args.seed}`, "
        f"{time.strftime(stamp, time.gmtime(began))}-{time.strftime('%H:%M', time.gmtime(ended))} UTC on "
        f"{cpu_name()} ({os.cpu_count()} CPUs, {platform.machine()}), Python {platform.python_version()}: "
        f"**{inputs_total} inputs, {defects_total} defects** (a traceback, a hang, a process or a "
        "gpuperf-ranks-* folder left behind, or data lost) in "
        f"{(ended - began) / 60:.0f} min of wall time (a fuzz run, not a timing benchmark).",
        "",
        "| kind | inputs | defects |",
        "| --- | --- | --- |",
        *[f"| {name} | {inputs} | {defects} |" for name, inputs, defects in tally],
        "",
    ]
    section = "\n".join(header + parse_lines + cli_lines + part_lines + [HISTORY])
    print(section)
    if args.write:
        readme = ROOT / "benchmarks" / "README.md"
        text = readme.read_text() if readme.exists() else "# Benchmarks\n\n"
        pattern = re.compile(r"## Malformed inputs\n.*?(?=\n## |\Z)", re.S)
        text = (
            pattern.sub(lambda _: section.rstrip("\n") + "\n", text)
            if pattern.search(text)
            else (text.rstrip("\n") + "\n\n" + section)
        )
        readme.write_text(text)
    return 1 if defects_total else 0


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def command_lines(args: argparse.Namespace) -> tuple[list[str], int]:
    """Part 2: whole `gpuperf` command lines, each in a forked child; (README lines, defects found)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401  (imported once, before forking)

    from pytest_gpuperf.cli import baselines, compare, history, report_html, signing, variance  # noqa: F401
    from pytest_gpuperf.cli import main as cli

    rng = random.Random(args.seed + 1)
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
    messages: collections.Counter[str] = collections.Counter()
    defects: list[str] = []
    noise: list[str] = []
    durations: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gpuperf-fuzz-") as scratch:
        folder = Path(scratch) / "pool"
        pool = hostile_pool(folder)
        keys = folder / "keys"
        keys.mkdir()
        for setup in (
            ["keygen", str(keys / "partner.key")],
            ["sign", "--key", str(keys / "partner.key"), str(folder / "runs"), "-o", str(folder / "bundle.sig")],
        ):
            status, _, err, _ = run_forked(cli.main, setup, args.timeout, Path(scratch))
            assert status == "exit 0", (setup, status, err)
        start = time.perf_counter()
        for number in range(args.cli_runs):
            argv = cli_case(rng, pool, number)
            status, out, err, seconds = run_forked(cli.main, argv, args.timeout, Path(scratch))
            durations.append(seconds)
            name = argv[0] if argv[0] != "baselines" else "baselines diff"
            if status == "hang":
                kind = "hang"
            elif "Traceback" in err or status == "exit 99":
                kind = "traceback"
            elif status == "exit 2" and err.count("\n") == 1 and err.startswith("gpuperf "):
                kind = "one-line error, exit 2"
                problem = err.split(": error: ", 1)[-1].split(": ", 1)[-1]
                messages[re.split(r"[(\d'\"]", problem.strip())[0].strip(" :;")[:48]] += 1
            elif status in ("exit 0", "exit 1"):
                kind = status + (" + stderr" if err.strip() else "")  # e.g. a library's warning: noise, not a defect
                if err.strip():
                    noise.append(f"{status}: gpuperf {' '.join(argv)}\n{err[-600:]}")
            else:
                kind = f"other ({status}, {err.count(chr(10))} stderr lines)"
            outcomes[(name, kind)] += 1
            if kind in ("hang", "traceback") or kind.startswith("other"):
                defects.append(f"{kind}: gpuperf {' '.join(argv)}\n{err[-1500:]}")
        wall = time.perf_counter() - start
    for defect in defects[:8] + noise[:4]:
        print(defect, file=sys.stderr)
    kinds = sorted({kind for _, kind in outcomes})
    commands = sorted({name for name, _ in outcomes})
    tracebacks = sum(n for (_, kind), n in outcomes.items() if kind == "traceback")
    hangs = sum(n for (_, kind), n in outcomes.items() if kind == "hang")
    durations.sort()
    lines = [
        "",
        f"**Part 2, hostile command lines.** {args.cli_runs} `gpuperf` command lines "
        "(tests/helpers/fuzz_inputs.cli_case, seed "
        f"{args.seed}) over a pool of fair and hostile paths (tests/helpers/fuzz_inputs.hostile_pool: /dev/zero, "
        "/dev/urandom, /proc/self/maps, FIFOs as inputs, outputs and keys, a folder or a path under a file or "
        "/dev/full or /proc/version as -o, dangling and looping links, TeX markup and lone surrogates in test "
        "names, UTF-16 XML with a DTD, duplicate keys, 1e999, samples at float range, a crafted hardware slug, "
        f"100,000-deep nesting), each in a forked child with a {args.timeout:g} s limit:",
        "",
        "| command | " + " | ".join(kinds) + " |",
        "| --- |" + " --- |" * len(kinds),
        *[
            f"| {name} | " + " | ".join(str(outcomes.get((name, kind), 0)) for kind in kinds) + " |"
            for name in commands
        ],
        "",
        f"Tracebacks: **{tracebacks}**; hangs: **{hangs}**; other defects (exit 2 with more than one stderr line, "
        f"other exit codes): **{len(defects) - tracebacks - hangs}**. Per command line: median "
        f"{durations[len(durations) // 2] * 1e3:.0f} ms, slowest {durations[-1]:.1f} s, all {wall:.0f} s (a fuzz "
        "run, not a timing benchmark: the machine was shared with other work).",
        "",
        "Most frequent one-line errors: " + "; ".join(f"{m or '?'} ({n})" for m, n in messages.most_common(8)) + ".",
        "",
    ]
    return lines, len(defects)


def run_forked(entry: object, argv: list[str], timeout: float, cwd: Path) -> tuple[str, str, str, float]:
    """(status, stdout, stderr, seconds) of ``entry(argv)`` in a child process; status 'exit N' or 'hang'."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 99
            try:
                os.chdir(cwd)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                limit = _address_space() + (2 << 30)
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                code = int(entry(argv))  # type: ignore[operator]
            except SystemExit as stop:  # argparse's usage errors
                code = stop.code if isinstance(stop.code, int) else 2
            except BaseException:  # noqa: B036  (what this harness exists to count)
                traceback.print_exc()
                code = 99
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        deadline = start + timeout
        status = "hang"
        while time.perf_counter() < deadline:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                status = f"exit {os.waitstatus_to_exitcode(wait_status)}"
                break
            time.sleep(0.005)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        return (
            status,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            seconds,
        )


def _address_space() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 4 << 30


# -- parts 3-7: the shapes of issue 38 --------------------------------------------------------------------------

Defects = list[str]


def report_documents(args: argparse.Namespace) -> tuple[list[str], int, Defects]:
    """Part 3: `gpuperf report` on malformed ab.json / bisect.json (tests/helpers/fuzz_inputs.malformed_comparison)."""
    from pytest_gpuperf.cli import main as cli

    rng = random.Random(args.seed + 3)
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
    defects: Defects = []
    durations: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gpuperf-fuzz-report-") as scratch:
        for number in range(args.report_runs):
            name, data = fuzz_inputs.malformed_comparison(rng)
            folder = Path(scratch) / str(number)
            folder.mkdir()
            (folder / name).write_bytes(data)
            argv = ["report", str(folder / name), "-o", str(folder / "report.html")]
            status, _, err, seconds = run_forked(cli.main, argv, args.timeout, folder)
            durations.append(seconds)
            kind = classify(status, err)
            outcomes[(name, kind)] += 1
            if kind in ("hang", "traceback") or kind.startswith("other"):
                defects.append(f"{kind}: gpuperf {' '.join(argv)}: {data[:300]!r}\n{err[-1500:]}")
            shutil.rmtree(folder, ignore_errors=True)
    durations.sort()
    lines = [
        f"**Part 3, `gpuperf report` on hand-edited ab.json / bisect.json.** {args.report_runs} documents "
        "(tests/helpers/fuzz_inputs.malformed_comparison: a node replaced by another JSON value or deleted, NaN, "
        "Infinity, "
        "1e999 or 400 digits for a number, a key twice, truncated, bytes flipped, 100,000-deep nesting, or whole), "
        f"each drawn in a forked child with a {args.timeout:g} s limit; median {median(durations) * 1e3:.0f} ms:",
        "",
        *outcome_table("file", outcomes),
    ]
    return lines, args.report_runs, defects


def outcome_table(heading: str, outcomes: collections.Counter[tuple[str, str]]) -> list[str]:
    """A Markdown table of (row, outcome) counts: one row per name, one column per outcome, then a blank line."""
    kinds = sorted({kind for _, kind in outcomes})
    return [
        f"| {heading} | " + " | ".join(kinds) + " |",
        "| --- |" + " --- |" * len(kinds),
        *[
            f"| {name} | " + " | ".join(str(outcomes.get((name, k), 0)) for k in kinds) + " |"
            for name in sorted({name for name, _ in outcomes})
        ],
        "",
    ]


def classify(status: str, err: str) -> str:
    if status == "hang":
        return "hang"
    if "Traceback" in err or status == "exit 99":
        return "traceback"
    if status == "exit 2" and err.count("\n") == 1 and err.startswith("gpuperf "):
        return "one-line error, exit 2"
    if status in ("exit 0", "exit 1"):
        return status
    return f"other ({status}, {err.count(chr(10))} stderr lines)"


def record_values(args: argparse.Namespace) -> tuple[list[str], int, Defects]:
    """Part 4: perf.record calls with a workload's odd values (tests/helpers/fuzz_inputs.hostile_record), and whatever
    is accepted carried through the store (save, then the strict reader) and the results writer's JSON."""
    import warnings

    from _pytest.outcomes import OutcomeException

    from pytest_gpuperf.core.config.settings import Settings
    from pytest_gpuperf.core.record.perf import Perf
    from pytest_gpuperf.core.stats.unpaired import summarize
    from pytest_gpuperf.core.store import schema
    from pytest_gpuperf.core.store.baselines import BaselineStore, MetricRun, NewMetric, NotStorable, read_document

    rng = random.Random(args.seed + 4)
    outcomes: collections.Counter[str] = collections.Counter()
    defects: Defects = []
    key = {"device": "cpu", "accelerator": None, "cpu": {"model": "x", "cores": 2, "ram_gib": 4}, "nodes": 1}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpuperf-fuzz-record-") as scratch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        settings = Settings(baselines_dir=Path(scratch))
        for number in range(args.records):
            call = fuzz_inputs.hostile_record(rng)
            late = call.pop("late", None)
            shown = shorten_repr(call, late)
            nodeid = f"test_m{number}.py::test_t"
            recorder = Perf(nodeid=nodeid, device="cpu", settings=settings, noise_limit=0.1)
            try:
                record = recorder.record(**call)
                if late is not None:  # as GpuperfSession.accept takes a test's records: convert, then refuse nan
                    record.context[late[0]] = late[1]
                    recorder.make_storable([])
                    if schema.non_finite(record.context) is not None:
                        raise NotStorable("a late context value is not a finite number")
            except (ValueError, NotStorable) as error:
                outcomes["refused at the call (ValueError)" if not late else "refused after it (NotStorable)"] += 1
                if not str(error) or "Traceback" in str(error):
                    defects.append(f"refusal without a message: {shown}")
                continue
            except OutcomeException:
                outcomes["test failed: diverged (nan/inf)"] += 1
                continue
            except Exception:  # the defect this part exists to find
                outcomes["other exception"] += 1
                defects.append(f"{shown}\n{traceback.format_exc(limit=4)}")
                continue
            folder = Path(scratch) / str(number)
            store = BaselineStore(folder, "cpu-x", key)
            try:
                run = MetricRun(
                    samples=record.samples,
                    stack={"torch": "2.13.0"},
                    date="2026-12-05",
                    summary=summarize(record.samples).as_dict(),
                    context=record.context,
                )
                new = NewMetric(
                    test=nodeid, name=record.name, unit=record.unit, higher_is_better=record.higher_is_better, run=run
                )
                store.save([new], [], keep_runs=3)
                document = read_document(store.path_for(nodeid))
                reread = BaselineStore(folder, "cpu-x", key).metric(nodeid, record.name)
                assert reread is not None and reread.runs[0].samples == record.samples, "not read back"
                schema.loads(schema.dumps({"results": [{"context": record.context, "unit": record.unit}]}).encode())
                assert document["tests"], "empty baseline file"
            except Exception:  # accepted at the call, refused by the store or the results writer: data lost
                outcomes["accepted, then lost at the save (data lost)"] += 1
                defects.append(f"data lost: {shown}\n{traceback.format_exc(limit=4)}")
            else:
                outcomes["accepted, saved and read back"] += 1
            shutil.rmtree(folder, ignore_errors=True)
    seconds = time.perf_counter() - started
    lines = [
        f"**Part 4, what a workload passes to `perf.record`.** {args.records} calls in this process "
        "(tests/helpers/fuzz_inputs.hostile_record: numpy and torch scalars, 0-d and n-d arrays and tensors, bfloat16, "
        "sets, objects, bytes, complex, Decimal, Fraction, 400-digit integers, NaN, lone surrogates, keys that are "
        "not text, 5,000-deep lists in a context, or set after the call; unit=5 / '' / bytes, higher_is_better=1, "
        "a name of 7, samples as arrays, tensors, strings or generators); each accepted one saved to a baselines "
        f"folder, read back by the strict reader and written as results JSON ({seconds:.0f} s in all):",
        "",
        "| outcome | calls |",
        "| --- | --- |",
        *[f"| {name} | {count} |" for name, count in sorted(outcomes.items())],
        "",
    ]
    return lines, args.records, defects


def shorten_repr(call: dict[str, Any], late: Any) -> str:
    """The call, shortened and bounded in depth (a context may nest 5,000 lists)."""
    import reprlib

    shown = reprlib.Repr()
    shown.maxlevel, shown.maxstring, shown.maxother, shown.maxlist, shown.maxdict = 4, 80, 80, 8, 8
    return shown.repr({**call, **({"late": late} if late is not None else {})})


def pytest_sessions(args: argparse.Namespace) -> tuple[list[str], int, Defects]:
    """Part 5: whole pytest sessions: a perf test recording an odd value between two fair ones
    (tests/helpers/fuzz_inputs.record_module), or a baselines/<key>/ holding a FIFO, a device link, a loop, a folder or
    garbage (tests/helpers/fuzz_inputs.plant_hazard). Each with --gpuperf-save and --gpuperf-results."""
    rng = random.Random(args.seed + 5)
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
    defects: Defects = []
    durations: list[float] = []
    fair = (
        "import pytest\n\n\n@pytest.mark.perf\ndef test_fair(perf):\n"
        '    perf.record("t", [1.0, 1.01, 0.99, 1.0, 1.02], unit="s", higher_is_better=False)\n'
    )
    with tempfile.TemporaryDirectory(prefix="gpuperf-fuzz-sessions-") as scratch:
        template = Path(scratch) / "template"
        template.mkdir()
        (template / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n")
        (template / "test_fair.py").write_text(fair)
        status, output, _ = run_session(template, args.timeout * 4)
        [slug] = (template / "baselines").iterdir()
        assert status == "exit 0", output
        (template / "run.json").unlink()
        for number in range(args.sessions):
            case = Path(scratch) / f"case{number}"
            shutil.copytree(template, case, symlinks=True)
            keys = case / "baselines" / slug.name
            if number % 5 < 3:
                what, source = fuzz_inputs.record_module(rng)
                (case / "test_odd.py").write_text(source)
                kind = "odd perf.record value"
            else:
                what = rng.choice(fuzz_inputs.BASELINE_HAZARDS)
                fuzz_inputs.plant_hazard(keys, what, own="test_fair.json")
                kind = "baselines/<key>/*.json hazard"
            before = {path.name: path.read_bytes() for path in keys.glob("*.json") if is_baseline(path)}
            status, output, seconds = run_session(case, args.timeout * 4)
            durations.append(seconds)
            problems = session_problems(status, output, case, keys, before)
            if kind.startswith("odd") and status != "hang":
                problems += fair_tests_kept(case, keys)
            verdict = "hang" if status == "hang" else status
            outcomes[(kind, verdict + (" (defect)" if problems else ""))] += 1
            if problems:
                defects.append(f"{kind} {what}: {'; '.join(problems)}\n{output[-2000:]}")
            if not problems:
                shutil.rmtree(case, ignore_errors=True)
            else:  # kept for a look, the FIFOs made harmless for the clean-up
                for path in keys.glob("*.json"):
                    if path.is_fifo():
                        path.unlink()
    kinds = sorted({verdict for _, verdict in outcomes})
    durations.sort()
    lines = [
        f"**Part 5, whole pytest sessions.** {args.sessions} `pytest -m perf --gpuperf-device cpu --gpuperf-save "
        "--gpuperf-results run.json` sessions: three in five with a perf test recording an odd value (numpy, torch, "
        "set, object, bytes, complex, NaN; in the context, after the call, or as unit / higher_is_better) between "
        "two fair tests, whose baselines and results must be saved; the rest with a `*.json` under "
        "baselines/<key>/ that is a FIFO (another module's or the measured module's own), a link to /dev/zero, "
        "/dev/urandom or /dev/null, a loop, a dangling link, a folder, empty, garbage or 100,000-deep nesting, "
        "after which every regular baseline file must be whole and the results file written. Limit "
        f"{args.timeout * 4:g} s each; median {median(durations):.1f} s:",
        "",
        "| case | " + " | ".join(kinds) + " |",
        "| --- |" + " --- |" * len(kinds),
        *[
            f"| {name} | " + " | ".join(str(outcomes.get((name, k), 0)) for k in kinds) + " |"
            for name in sorted({name for name, _ in outcomes})
        ],  # fmt: skip
        "",
    ]
    return lines, args.sessions, defects


def is_regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def is_baseline(path: Path) -> bool:
    """A regular file the store reads as a baseline: what a session must leave whole (a planted empty or garbage
    file was never one)."""
    from pytest_gpuperf.core.store.baselines import read_document

    if not is_regular(path):
        return False
    try:
        read_document(path)
    except Exception:  # noqa: BLE001 - not a baseline, whatever the reason
        return False
    return True


def run_session(folder: Path, timeout: float) -> tuple[str, str, float]:
    """A pytest session in ``folder`` (own TMPDIR, own process group, killed whole on a hang)."""
    (folder / "tmp").mkdir(exist_ok=True)
    command = [sys.executable, "-m", "pytest", "-q", "-m", "perf", "--gpuperf-device", "cpu", "--gpuperf-save",
               "--gpuperf-results", "run.json"]  # fmt: skip
    return run_group(command, folder, timeout, {"TMPDIR": str(folder / "tmp")})


MARK = f"gpuperf-fuzz-{uuid.uuid4().hex}"
"""In the environment of every process the harness starts, so a process left behind is found in /proc."""


def run_group(command: list[str], cwd: Path, timeout: float, env: dict[str, str]) -> tuple[str, str, float]:
    """(status 'exit N' or 'hang', output, seconds) of ``command`` in a process group of its own."""
    environment = {**os.environ, "GPUPERF_FUZZ_MARK": MARK, "PYTHONPATH": str(ROOT), **env}
    environment.pop("PYTEST_XDIST_WORKER", None)
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        process = subprocess.Popen(
            command, cwd=cwd, env=environment, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            process.wait(timeout)
            status = f"exit {process.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            status = "hang"
        seconds = time.perf_counter() - start
        log.seek(0)
        return status, log.read().decode("utf-8", "replace"), seconds


def left_behind() -> dict[int, str]:
    """Processes still running with this harness's MARK in their environment: what a run left behind."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if MARK.encode() not in (entry / "environ").read_bytes():
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state not in "ZX":
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:100]
        except OSError:
            continue
    return found


def reap_left_behind(wait: float) -> dict[int, str]:
    """Wait up to ``wait`` s for marked processes to end; kill and return those that did not."""
    deadline = time.monotonic() + wait
    while (found := left_behind()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return found


def session_problems(status: str, output: str, case: Path, keys: Path, before: dict[str, bytes]) -> list[str]:
    from pytest_gpuperf.core.store import schema
    from pytest_gpuperf.core.store.baselines import read_document

    problems = []
    if status == "hang":
        problems.append("hang")
    elif status not in ("exit 0", "exit 1", "exit 4"):
        problems.append(f"exit status {status}")
    if "Traceback (most recent call last)" in output or "INTERNALERROR" in output:
        problems.append("traceback")
    for name, data in before.items():
        path = keys / name
        if not is_regular(path):
            problems.append(f"data lost: {name} is gone")
            continue
        try:
            old, new = schema.loads(data), read_document(path)
        except Exception as error:  # noqa: BLE001 - any failure to read it back is the finding
            problems.append(f"data lost: {name} unreadable after ({error})")
            continue
        if not set(old["tests"]) <= set(new["tests"]):
            problems.append(f"data lost: {name} lost entries {sorted(set(old['tests']) - set(new['tests']))}")
    if status != "hang":
        try:
            schema.loads((case / "run.json").read_bytes())
        except Exception as error:  # noqa: BLE001
            problems.append(f"results not written ({error})")
    stray = reap_left_behind(5.0)
    if stray:
        problems.append(f"processes left: {stray}")
    return problems


def fair_tests_kept(case: Path, keys: Path) -> list[str]:
    """The fair tests of test_odd.py and test_fair.py: baselines saved and in the results, whatever the odd one."""
    from pytest_gpuperf.core.store import schema
    from pytest_gpuperf.core.store.baselines import read_document

    problems = []
    saved: set[str] = set()
    for path in keys.glob("*.json"):
        try:
            saved |= {test.rsplit("::", 1)[-1] for test in read_document(path)["tests"]}
        except Exception:  # noqa: BLE001,S112 - reported by session_problems
            continue
    want = {"test_fair", "test_fair_before", "test_fair_after"}
    if not want <= saved:
        problems.append(f"data lost: fair baselines not saved: {sorted(want - saved)}")
    try:
        measured = {
            entry["test"].rsplit("::", 1)[-1] for entry in schema.loads((case / "run.json").read_bytes())["results"]
        }
    except Exception:  # noqa: BLE001 - reported by session_problems
        return problems
    if not want <= measured:
        problems.append(f"data lost: fair results missing: {sorted(want - measured)}")
    return problems


def ab_sides(args: argparse.Namespace) -> tuple[list[str], int, Defects]:
    """Part 6: `gpuperf ab` with hostile sides (tests/helpers/fuzz_inputs.AB_SIDE_CASES): wrapper scripts, FIFOs left at
    the results path, sleeping past --budget, malformed documents. Nothing of a side may outlive ab."""
    from pytest_gpuperf.core.store import schema

    outcomes: collections.Counter[str] = collections.Counter()
    defects: Defects = []
    durations: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gpuperf-fuzz-ab-") as scratch:
        folder = Path(scratch)
        (folder / "side.py").write_text(fuzz_inputs.AB_SIDE)
        (folder / "wrap.sh").write_text(fuzz_inputs.AB_WRAPPER)
        for number in range(args.ab_cases):
            a_mode, b_mode, wrapped, options = fuzz_inputs.AB_SIDE_CASES[number % len(fuzz_inputs.AB_SIDE_CASES)]
            pids = folder / f"pids{number}.txt"

            def side(mode: str, wrapped: bool = wrapped, pids: Path = pids) -> str:
                runner = "sh wrap.sh" if wrapped else f"{sys.executable} side.py"
                return f"env SIDE_MODE={mode} SIDE_PIDS={pids} {runner}"

            out = folder / f"out{number}"
            turns = "--take-turns" if number % 2 else "--no-take-turns"
            command = [sys.executable, "-m", "pytest_gpuperf.cli", "ab", "--out", str(out), turns, "--max-pairs",
                       "4", *options, "--a", side(a_mode), "--b", side(b_mode), "--", "t.py"]  # fmt: skip
            name = f"{a_mode} / {b_mode}{' (wrapped)' if wrapped else ''} {' '.join(options)}".strip()
            status, output, seconds = run_group(command, folder, 120.0, {"GPUPERF_FUZZ_PYTHON": sys.executable})
            durations.append(seconds)
            problems = []
            if status == "hang":
                problems.append("hang")
            elif status not in ("exit 0", "exit 1", "exit 2", "exit 3"):
                problems.append(f"exit status {status}")
            if "Traceback" in output:
                problems.append("traceback")
            if status != "hang":
                try:
                    schema.loads((out / "ab.json").read_bytes())
                except Exception as error:  # noqa: BLE001
                    problems.append(f"ab.json not written ({error})")
            alive = [pid for pid in read_pids(pids) if running(pid)]
            stray = reap_left_behind(5.0)
            if alive or stray:
                problems.append(f"processes left: {sorted(set(alive) | set(stray))}")
            outcomes[f"{name}: {status}" + (" (defect)" if problems else "")] += 1
            if problems:
                defects.append(f"ab {name}: {'; '.join(problems)}\n{output[-1500:]}")
    lines = [
        f"**Part 6, `gpuperf ab` with hostile sides.** {args.ab_cases} runs "
        "(tests/helpers/fuzz_inputs.AB_SIDE_CASES: a "
        "side that is a wrapper script running the real Python as a grandchild, one that leaves a FIFO at its "
        "results path or does so and sleeps, one that sleeps past --budget, a fingerprint of 5, NaN samples; "
        "`--max-pairs 4`, taking turns and not); ab.json must be strict JSON and no side's process may outlive "
        f"ab. Slowest {max(durations, default=0):.0f} s:",
        "",
        "| sides and options: exit status | runs |",
        "| --- | --- |",
        *[f"| {name} | {count} |" for name, count in sorted(outcomes.items())],
        "",
    ]
    return lines, args.ab_cases, defects


def read_pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in "ZX"


def rank_signals(args: argparse.Namespace) -> tuple[list[str], int, Defects]:
    """Part 7: SIGTERM and SIGHUP to a pytest (alone, not its group) whose 2 gloo ranks run, each with a child,
    or are starting (tests/helpers/fuzz_inputs.RANKS_MODULE): no process and no gpuperf-ranks-* folder may be left."""
    outcomes: collections.Counter[str] = collections.Counter()
    defects: Defects = []
    with tempfile.TemporaryDirectory(prefix="gpuperf-fuzz-ranks-") as scratch:
        for number in range(args.signals):
            sig = (signal.SIGTERM, signal.SIGHUP)[number % 2]
            test = "test_ranks_start" if number % 4 >= 2 else "test_ranks_run"
            case = Path(scratch) / f"case{number}"
            (case / "tmp").mkdir(parents=True)
            (case / "notes").mkdir()
            (case / "test_ranks.py").write_text(fuzz_inputs.RANKS_MODULE)
            environment = {**os.environ, "GPUPERF_FUZZ_MARK": MARK, "PYTHONPATH": str(ROOT),
                           "TMPDIR": str(case / "tmp"), "GPUPERF_FUZZ_NOTES": str(case / "notes")}  # fmt: skip
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                       f"test_ranks.py::{test}"]  # fmt: skip
            with (case / "log").open("wb") as log:
                process = subprocess.Popen(
                    command, cwd=case, env=environment, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
            prefix = "starting" if test == "test_ranks_start" else "rank"
            deadline = time.monotonic() + 120
            problems = []
            while len(list((case / "notes").glob(prefix + "[0-9]"))) < 2:
                if process.poll() is not None or time.monotonic() > deadline:
                    problems.append(f"the ranks never got there ({process.poll()})")
                    break
                time.sleep(0.02)
            if not problems:
                os.kill(process.pid, sig)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                problems.append(f"pytest still running 30 s after {sig.name}")
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            deadline = time.monotonic() + 15
            while (folders := list((case / "tmp").glob("gpuperf-ranks-*"))) and time.monotonic() < deadline:
                time.sleep(0.1)
            stray = reap_left_behind(15.0)
            if stray:
                problems.append(f"processes left: {stray}")
            if folders:
                problems.append(f"folders left: {[f.name for f in folders]}")
            where = "ranks running" if prefix == "rank" else "ranks starting"
            outcomes[f"{sig.name} while {where}" + (" (defect)" if problems else ": nothing left")] += 1
            if problems:
                defects.append(f"{sig.name} {test}: {'; '.join(problems)}\n{(case / 'log').read_text()[-1500:]}")
    lines = [
        f"**Part 7, signals to a pytest whose ranks run.** {args.signals} pytest sessions launching 2 gloo ranks "
        "that each start a sleeping child (or stay in start-up), signalled (pytest alone, not its group) once the "
        "ranks got there; every process carrying the run's mark must be gone and no gpuperf-ranks-* folder left "
        "in its TMPDIR within 15 s:",
        "",
        "| signal, when: outcome | runs |",
        "| --- | --- |",
        *[f"| {name} | {count} |" for name, count in sorted(outcomes.items())],
        "",
    ]
    return lines, args.signals, defects


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else 0.0


if __name__ == "__main__":
    raise SystemExit(main())
