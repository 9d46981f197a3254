"""Helpers for feature plugins that parametrize fixtures from options (no torch).

An installed plugin is loaded into every pytest run of the environment, so it may only act on tests that use it:
a project's own fixture named ``model`` or ``device_mesh`` must get exactly what it got without the plugin.
pytest resolves a fixture name to the closest definition (the test module, then conftest.py files, then
plugins), so the plugin parametrizes a name only when the definition a test gets is the plugin's own, or a
project fixture that overrides it and requests it (the "extend the parent fixture" pattern).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest


def parametrized_by_test(metafunc: pytest.Metafunc, name: str) -> bool:
    """Whether the test parametrizes ``name`` itself: then a plugin leaves that argument alone."""
    for marker in metafunc.definition.iter_markers("parametrize"):
        argnames = marker.args[0] if marker.args else marker.kwargs.get("argnames", "")
        names = argnames.split(",") if isinstance(argnames, str) else list(argnames)
        if name in (part.strip() for part in names):
            return True
    return False


def resolves_to(definitions: Mapping[str, Sequence[Any]] | None, name: str, module: str) -> bool:
    """Whether fixture ``name``, as a test gets it, is (or extends) the one defined in ``module``.

    ``definitions`` is pytest's name -> FixtureDefs (closest last) of the test. Walking from the closest one,
    an override that requests its own name passes the request on to the next; any other override ends it.
    """
    for fixturedef in reversed((definitions or {}).get(name, ())):
        if getattr(fixturedef.func, "__module__", None) == module:
            return True
        if name not in fixturedef.argnames:
            return False
    return False


def uses_own_fixture(metafunc: pytest.Metafunc, name: str, module: str) -> bool:
    """Whether the test requests ``name`` and gets the fixture that ``module`` (a plugin) defines; and does not
    parametrize it itself."""
    if name not in metafunc.fixturenames or parametrized_by_test(metafunc, name):
        return False
    # pytest has no public lookup of the definitions a test sees; Metafunc has held them here since pytest 3.
    return resolves_to(getattr(metafunc, "_arg2fixturedefs", None), name, module)


def item_uses_fixture(item: pytest.Item, name: str, module: str) -> bool:
    """Whether a collected test gets fixture ``name`` from ``module`` (as ``uses_own_fixture``, after collection)."""
    info = getattr(item, "_fixtureinfo", None)  # the same private record, on a collected pytest.Function
    return info is not None and resolves_to(info.name2fixturedefs, name, module)
