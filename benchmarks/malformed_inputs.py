"""Feed 10,000 damaged results files to the `gpuperf` loaders; count clean errors, loads and anything else.

    python benchmarks/malformed_inputs.py [--count N] [--seed S] [--write]

--write replaces the '## Malformed inputs' section of benchmarks/README.md with the figures. Exit status 1
when any input raised something other than the loader's one-line InputError.
"""

from __future__ import annotations

import argparse
import collections
import platform
import random
import re
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fuzz_inputs import load, malformed  # noqa: E402

from pytest_gpuperf.cli.loading import InputError  # noqa: E402

REPLACEMENTS = [None, 0, -1, 1.5, True, "x", "", [], {}, [1, "a"], {"a": None}, [[]], 10**30]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
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
        f"`python benchmarks/malformed_inputs.py --count {args.count} --seed {args.seed}` on {platform.machine()}, "
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
    section = "\n".join(lines)
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
    return 1 if crashes else 0


if __name__ == "__main__":
    raise SystemExit(main())
