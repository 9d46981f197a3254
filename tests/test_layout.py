"""The repository's own layout: `pytest -m perf` collects suites/ and tests/ together (rootdir-relative imports),
so a test module basename used in both folders stops collection with an import-file mismatch."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_suite_and_test_module_names_do_not_collide() -> None:
    suites = {path.name for path in (ROOT / "suites").glob("test_*.py")}
    tests = {path.name for path in (ROOT / "tests").glob("test_*.py")}
    assert not suites & tests, f"rename one of each pair: {sorted(suites & tests)}"
