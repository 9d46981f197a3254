"""``gpuperf run``: the shipped suites, run by pytest from wherever the package is installed.

A wheel or index install has no checkout to ``cd`` into, so the suites are found by module name
(``pytest --pyargs pytest_gpuperf.suites``); arguments after ``--`` go to pytest unchanged, so a user's own
suites run beside the shipped ones (``gpuperf run -- my_suites/``) against the same baselines folder. pytest runs
in this process: its exit status is the command's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PACKAGE = "pytest_gpuperf.suites"


def suite_names() -> list[str]:
    """The shipped suites by short name: ``training`` for ``pytest_gpuperf/suites/test_training.py``."""
    from pytest_gpuperf.core.store.testid import SUITES_DIR

    return sorted(path.stem.removeprefix("test_") for path in SUITES_DIR.glob("test_*.py"))


def pytest_arguments(args: argparse.Namespace) -> list[str]:
    """The pytest command line that ``gpuperf run`` stands for."""
    extra = list(args.pytest_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    targets = [f"{PACKAGE}.test_{name}" for name in args.suite] or [PACKAGE]
    command = ["--pyargs", *targets]
    if args.baselines is not None:
        command += ["--gpuperf-baselines", str(Path(args.baselines).resolve())]
    return command + extra


def run(args: argparse.Namespace) -> int:
    import pytest

    unknown = sorted(set(args.suite) - set(suite_names()))
    if unknown:
        print(f"gpuperf run: error: unknown suite {unknown[0]!r}; shipped: {', '.join(suite_names())}", file=sys.stderr)
        return 2
    return int(pytest.main(pytest_arguments(args)))
