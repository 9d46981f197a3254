"""Helpers for feature plugins that parametrize fixtures from options (no torch)."""

from __future__ import annotations

import pytest


def parametrized_by_test(metafunc: pytest.Metafunc, name: str) -> bool:
    """Whether the test parametrizes ``name`` itself: then a plugin leaves that argument alone."""
    for marker in metafunc.definition.iter_markers("parametrize"):
        argnames = marker.args[0] if marker.args else marker.kwargs.get("argnames", "")
        names = argnames.split(",") if isinstance(argnames, str) else list(argnames)
        if name in (part.strip() for part in names):
            return True
    return False
