"""The repository's own layout and the package's import rules."""

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


PACKAGE = ROOT / "pytest_gpuperf"
WORKLOADS = ("training", "inference", "micro", "distributed", "models", "frameworks")
CORE_LAYERS = ("stats", "verdict", "store", "config", "record", "session")
"""core/'s sub-packages, lowest first: each imports only from its own layer and those before it."""


def _imported_modules(path: Path, *, at_run_time: bool = False) -> set[str]:
    """Every pytest_gpuperf module a file imports, at top level or inside a function (``at_run_time``: leaving out
    the imports under ``if TYPE_CHECKING:``, which never run)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in _nodes(tree, at_run_time=at_run_time):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("pytest_gpuperf")}


def _nodes(tree: ast.AST, *, at_run_time: bool) -> Iterator[ast.AST]:
    for node in ast.iter_child_nodes(tree):
        if at_run_time and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (child for branch in node.orelse for child in (branch, *_nodes(branch, at_run_time=True)))
            continue
        yield node
        yield from _nodes(node, at_run_time=at_run_time)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports when it runs. ``from package import module`` depends on that module
    alone (its package's __init__ is imported first either way and is checked as a module of its own)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported = _imported_modules(path, at_run_time=True)
        graph[name] = {
            target
            for target in imported
            if target in modules
            and target != name
            and not any(other.startswith(f"{target}.") for other in imported if other in modules)
        }
    return graph


def _package_of(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_core_and_machine_import_no_workload_and_no_command_line() -> None:
    offending = []
    for layer in ("core", "machine"):
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            for name in _imported_modules(path):
                if _package_of(name) in (*WORKLOADS, "cli") or (layer == "machine" and _package_of(name) == "core"):
                    offending.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offending, "\n".join(offending)


def test_nothing_imports_the_plugin_module() -> None:
    offending = [
        f"{path.relative_to(ROOT)}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "plugin.py" or path.parent != PACKAGE
        if "pytest_gpuperf.plugin" in _imported_modules(path)
    ]
    assert not offending, (
        f"import pytest_gpuperf.core.session.state (run state) instead of the plugin module: {offending}"
    )


def test_the_suites_ship_as_a_package_nothing_else_imports() -> None:
    """The suites are a subpackage (the wheel carries them; `pytest -m perf` imports them as
    pytest_gpuperf.suites.*, so a tests/ module of the same basename cannot clash), and no module of the package
    imports them: loading the plugin must never import test modules."""
    assert (PACKAGE / "suites" / "__init__.py").is_file()
    assert not (ROOT / "suites").exists(), "the suites live in pytest_gpuperf/suites/"
    offending = [
        f"{path.relative_to(ROOT)}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (PACKAGE / "suites") not in path.parents
        if any(name.startswith("pytest_gpuperf.suites") for name in _imported_modules(path))
    ]
    assert not offending, offending


def test_the_top_level_holds_only_the_entry_points() -> None:
    modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert modules == ["__init__.py", "hooks.py", "plugin.py"], modules


def _core_layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "core" else None


def test_core_is_in_sub_packages_each_importing_only_those_below_it() -> None:
    loose = sorted(path.name for path in (PACKAGE / "core").glob("*.py") if path.name != "__init__.py")
    assert not loose, f"core/ holds sub-packages only, {CORE_LAYERS}: move {loose} into one"
    packages = sorted(path.name for path in (PACKAGE / "core").iterdir() if (path / "__init__.py").is_file())
    assert packages == sorted(CORE_LAYERS), packages
    offending = []
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        layer = _core_layer(_module_name(path))
        for name in _imported_modules(path):
            target = _core_layer(name)
            if layer is not None and target in CORE_LAYERS and CORE_LAYERS.index(target) > CORE_LAYERS.index(layer):
                offending.append(f"{path.relative_to(ROOT)} ({layer}) imports {name} ({target})")
    assert not offending, "\n".join(offending)


def test_ab_sits_above_core_and_below_the_command_line() -> None:
    offending = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in _imported_modules(path)
        if _package_of(name) == "ab"
        if _package_of(_module_name(path)) in ("core", "machine", *WORKLOADS)
    ]
    offending += [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((PACKAGE / "ab").rglob("*.py"))
        for name in _imported_modules(path)
        if _package_of(name) in ("cli", *WORKLOADS)
    ]
    assert not offending, "\n".join(offending)


def test_no_import_cycles() -> None:
    graph = _runtime_graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_only_core_verdict_forms_rules() -> None:
    """``Rules`` and ``PairedRules`` are formed in core/verdict/ alone (policy.py ``policy_for``, the one fallback
    chain from settings), so no command or engine judges by defaults of its own."""
    offending = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (PACKAGE / "core" / "verdict") not in path.parents
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
        if isinstance(node, ast.Call)
        and (node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None))
        in ("Rules", "PairedRules")
    ]
    assert not offending, f"form rules with core/verdict/policy.py policy_for: {offending}"
