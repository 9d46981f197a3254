"""Module docstrings say what a module owns, its invariants and what it may not import: briefly, and nothing that
goes stale. Measurements, dates and rationale belong in docs/design/ and benchmarks/README.md, which a docstring
links to. The files are read with ast, never imported, so this runs without torch."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_gpuperf"
MODULES = sorted(PACKAGE.rglob("*.py"))
MOST_LINES = 15
"""Past this a docstring is a notebook; 10 lines or fewer is the aim (docs/architecture.md)."""

MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?"
DATE = re.compile(
    rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b"  # 2026-12-03
    rf"|\b{MONTH} (?:\d{{1,2}},? )?\d{{4}}\b"  # Dec 2026, December 3, 2026
    rf"|\b\d{{1,2}} {MONTH} \d{{4}}\b"  # 3 Dec 2026
)
"""A calendar date. A bare year, as a citation carries it ("ICPE 2023"), is not one."""

OUTSIDE = re.compile(r"(?<![\w.])(?:/work/|/tmp/|/home/|/root/|/Users/|~/|\.\./)")
"""A path on the machine the code was written on, or up out of the repository. System paths the code reads
(/proc/stat, /dev/shm) and paths inside the repository (core/store/schema.py) are fine."""


def _docstring(path: Path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text(), filename=str(path)))


def _where(path: Path) -> str:
    return str(path.relative_to(ROOT))


DOCUMENTED = [(path, text) for path in MODULES if (text := _docstring(path))]


def test_module_docstrings_are_short() -> None:
    long = [
        f"{_where(path)} ({lines} lines)"
        for path, text in DOCUMENTED
        if (lines := len(text.strip().splitlines())) > MOST_LINES
    ]
    assert not long, (
        f"module docstrings longer than {MOST_LINES} lines: {long}. Keep what the module owns, its invariants and "
        "what it may not import (10 lines or fewer); move measurements and rationale to docs/design/<decision>.md "
        "and figures to benchmarks/README.md, and link there"
    )


def test_module_docstrings_carry_no_dates() -> None:
    dated = [f"{_where(path)}: {match.group(0)!r}" for path, text in DOCUMENTED for match in DATE.finditer(text)]
    assert not dated, (
        f"module docstrings that carry a date: {dated}. A date says when something was measured or decided, which "
        "goes stale in the code; say it in docs/design/ or benchmarks/README.md instead"
    )


def test_module_docstrings_point_inside_the_repository() -> None:
    outside = [
        f"{_where(path)}: {text[max(0, match.start() - 20) : match.end() + 20]!r}"
        for path, text in DOCUMENTED
        for match in OUTSIDE.finditer(text)
    ]
    assert not outside, (
        f"module docstrings that point outside the repository: {outside}. A reader of the package has none of "
        "those files; name a path inside the repository (docs/..., core/store/schema.py) or drop the reference"
    )


@pytest.mark.parametrize(
    ("text", "dated"),
    [
        ("measured on 2026-12-03", True),
        ("as of Dec 2026", True),
        ("on December 3, 2026", True),
        ("on 3 Dec 2026", True),
        ("Daly et al., ICPE 2020", False),
        ("Hu et al. 2021", False),
        ("a decision in 12 pairs", False),
    ],
)
def test_what_counts_as_a_date(text: str, dated: bool) -> None:
    assert bool(DATE.search(text)) is dated


@pytest.mark.parametrize(
    ("text", "outside"),
    [
        ("see /work/main/notes.md", True),
        ("(../shared/CPU-FACTS.md)", True),
        ("written to /tmp/x.json", True),
        ("in ~/runs", True),
        ("the schema in core/store/schema.py", False),
        ("reads /proc/stat", False),
        ("files in /dev/shm", False),
        ("``<out>/sessions/NNN-S.ask``", False),
        ("{dir}/bin/python", False),
    ],
)
def test_what_counts_as_outside_the_repository(text: str, outside: bool) -> None:
    assert bool(OUTSIDE.search(text)) is outside
