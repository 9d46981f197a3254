"""The project's tests are split by directory, and the directory decides whether a module may need torch.

tests/conftest.py names the torch-free directories (TORCH_FREE) and leaves the others out where torch cannot be
imported; these tests hold the split to that rule.
"""

import ast
import importlib.util
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parents[1]
DIRECTORIES = ("unit", "plugin", "cli", "workloads", "integration")
"""Where test modules live: pure units, pytester runs of the plugin, the gpuperf commands, the workload areas (need
torch), and whole runs that need the full development venv."""


def _conftest() -> ModuleType:
    # Loaded by path: "conftest" is not one module's name (the repository root has one too).
    spec = importlib.util.spec_from_file_location("gpuperf_tests_conftest", TESTS / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _test_modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_module_is_in_one_directory_of_the_split() -> None:
    misplaced = [
        str(path.relative_to(TESTS))
        for path in _test_modules()
        if len(path.relative_to(TESTS).parts) < 2 or path.relative_to(TESTS).parts[0] not in DIRECTORIES
    ]
    assert not misplaced, f"test modules outside {DIRECTORIES} (helpers/ holds shared modules only): move {misplaced}"


def test_test_module_names_are_unique_across_directories() -> None:
    # pytest's default "prepend" import mode imports each test module by its basename.
    places: dict[str, list[str]] = defaultdict(list)
    for path in _test_modules():
        places[path.name].append(str(path.relative_to(TESTS)))
    twice = {name: where for name, where in places.items() if len(where) > 1}
    assert not twice, f"one basename per test module, found {twice}: rename one after what it tests"


def test_the_torch_free_directories_are_directories_of_the_split() -> None:
    torch_free = _conftest().TORCH_FREE
    assert torch_free <= set(DIRECTORIES), f"TORCH_FREE {sorted(torch_free)} names a directory not in {DIRECTORIES}"
    assert not torch_free & {"workloads", "integration"}, f"TORCH_FREE {sorted(torch_free)}: these need torch"


def test_the_directory_decides_what_is_left_out_without_torch() -> None:
    conftest = _conftest()
    for name in DIRECTORIES:
        folder = TESTS / name
        expected = name not in conftest.TORCH_FREE
        assert conftest._needs_torch(folder) is expected, folder
        assert all(conftest._needs_torch(path) is expected for path in folder.glob("test_*.py")), folder
    assert not conftest._needs_torch(TESTS / "conftest.py")
    assert not conftest._needs_torch(TESTS.parent / "pytest_gpuperf" / "suites" / "test_micro.py")


def _run_at_import(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``node`` that run when the module is imported: not the bodies of its functions and classes."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        yield child
        yield from _run_at_import(child)


def _needs_torch_at_import(tree: ast.Module) -> list[int]:
    """Lines that import torch, or skip the whole module without it, when the module is imported."""
    found = []
    for node in _run_at_import(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and "importorskip" in ast.unparse(node.func) and node.args:
            names = [ast.unparse(node.args[0]).strip("'\"")]
        if any(name == "torch" or name.startswith("torch.") for name in names):
            found.append(getattr(node, "lineno", 0))
    return found


def test_no_module_in_a_torch_free_directory_needs_torch_to_import() -> None:
    offending = []
    for name in sorted(_conftest().TORCH_FREE):
        for path in sorted((TESTS / name).glob("test_*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            offending += [f"{path.relative_to(TESTS)}:{line}" for line in _needs_torch_at_import(tree)]
    assert not offending, (
        f"torch imported (or the module skipped without it) at import time in a torch-free directory: {offending}; "
        "move the module to workloads/, or import torch inside the one test that needs it (pytest.importorskip)"
    )
