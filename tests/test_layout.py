"""The repository's own layout and the package's import rules."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


PACKAGE = ROOT / "pytest_gpuperf"
WORKLOADS = ("training", "inference", "micro", "distributed", "models", "frameworks")


def _imported_modules(path: Path) -> set[str]:
    """Every pytest_gpuperf module a file imports, at top level or inside a function."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("pytest_gpuperf")}


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
    assert not offending, f"import pytest_gpuperf.core.state (run state) instead of the plugin module: {offending}"


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
