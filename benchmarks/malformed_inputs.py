"""Feed damaged results files to the `gpuperf` loaders, then hostile command lines to `gpuperf` itself.

    python benchmarks/malformed_inputs.py [--count N] [--cli-runs N] [--timeout S] [--seed S] [--write]

Part 1 parses ``--count`` damaged JSON/XML documents in this process (tests/fuzz_inputs.malformed). Part 2
runs ``--cli-runs`` whole command lines (tests/fuzz_inputs.cli_case) over a pool of fair and hostile paths:
devices, FIFOs, unwritable and full outputs, markup and surrogates in names, UTF-16 XML with a DTD, duplicate
keys, crafted slugs. Each command runs in a forked child (the CLI's imports are paid once) with its standard
input closed, an address-space limit of 2 GiB over the parent's and ``--timeout`` seconds; a child still
running then is killed and counted as a hang. A traceback, a hang, or exit status 2 with more than one line on
stderr is a defect. It is a fuzz run, not a timing benchmark.

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
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fuzz_inputs import cli_case, hostile_pool, load, malformed  # noqa: E402

from pytest_gpuperf.cli.loading import InputError  # noqa: E402

REPLACEMENTS = [None, 0, -1, 1.5, True, "x", "", [], {}, [1, "a"], {"a": None}, [[]], 10**30]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--cli-runs", type=int, default=1500, help="hostile command lines (default 1500)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a command counts as hung")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", action="store_true", help="update benchmarks/README.md")
    args = parser.parse_args()
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
    lines = [
        "## Malformed inputs",
        "",
        f"`python benchmarks/malformed_inputs.py --count {args.count} --cli-runs {args.cli_runs} --seed {args.seed}` "
        f"on {platform.machine()}, "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}: {args.count} damaged results JSON and "
        "JUnit XML files (truncated, bytes flipped or inserted, JSON nodes replaced or deleted, XML garbled; "
        "see tests/fuzz_inputs.py) parsed by the `gpuperf` loaders.",
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
    cli_lines, cli_defects = command_lines(args)
    section = "\n".join(lines + cli_lines)
    print(section)
    for crash in crashes[:5]:
        print(crash, file=sys.stderr)
    if args.write:
        readme = ROOT / "benchmarks" / "README.md"
        text = readme.read_text() if readme.exists() else "# Benchmarks\n\n"
        pattern = re.compile(r"## Malformed inputs\n.*?(?=\n## |\Z)", re.S)
        text = (
            pattern.sub(section.rstrip("\n") + "\n", text)
            if pattern.search(text)
            else (text.rstrip("\n") + "\n\n" + section)
        )
        readme.write_text(text)
    return 1 if crashes or cli_defects else 0


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
        f"**Hostile command lines.** {args.cli_runs} `gpuperf` command lines (tests/fuzz_inputs.cli_case, seed "
        f"{args.seed}) over a pool of fair and hostile paths (tests/fuzz_inputs.hostile_pool: /dev/zero, "
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


if __name__ == "__main__":
    raise SystemExit(main())
