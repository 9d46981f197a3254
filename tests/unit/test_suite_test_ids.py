"""The shipped suites' tests keep one id wherever the package is installed and wherever pytest runs from."""

from pathlib import Path

from pytest_gpuperf.core.store.testid import SUITES_DIR, SUITES_PREFIX, stable_test_id


def test_a_shipped_suite_test_is_named_by_its_place_in_the_package() -> None:
    path = SUITES_DIR / "test_training.py"
    for nodeid in (
        "test_training.py::test_pretrain[tiny-llama]",  # found under --pyargs, outside the rootdir
        "../venv/lib/python3.12/site-packages/pytest_gpuperf/suites/test_training.py::test_pretrain[tiny-llama]",
        "pytest_gpuperf/suites/test_training.py::test_pretrain[tiny-llama]",  # a checkout, from its root
    ):
        assert stable_test_id(path, nodeid) == "pytest_gpuperf/suites/test_training.py::test_pretrain[tiny-llama]"


def test_the_id_of_a_checkout_run_from_its_root_is_the_node_id() -> None:
    """Baselines recorded with `pytest -m perf` in the repository judge installed runs: the ids are equal."""
    assert SUITES_PREFIX == SUITES_DIR.relative_to(SUITES_DIR.parent.parent).as_posix()


def test_other_tests_keep_their_node_id(tmp_path: Path) -> None:
    copy = tmp_path / "pytest_gpuperf" / "suites" / "test_training.py"  # a copy elsewhere is the user's own test
    assert (
        stable_test_id(copy, "pytest_gpuperf/suites/test_training.py::t") == "pytest_gpuperf/suites/test_training.py::t"
    )
    assert stable_test_id(tmp_path / "test_x.py", "test_x.py::TestA::test_b[1]") == "test_x.py::TestA::test_b[1]"
    nested = SUITES_DIR / "extra" / "test_y.py"
    assert stable_test_id(nested, "extra/test_y.py::test_z") == "pytest_gpuperf/suites/extra/test_y.py::test_z"
