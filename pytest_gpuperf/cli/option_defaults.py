"""Defaults of the `gpuperf` options that another module owns (a rule's dataclass field, a module constant):
declared there once, shown in the help from there, and applied by leaving the option out of the owner's call.
May import nothing of the package at import time (`gpuperf --help` starts without numpy)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from collections.abc import Callable
from typing import Any


def pct_text(value: float) -> str:
    """A fraction as help text shows it: 0.05 -> '5%%' (argparse's escape of %)."""
    return f"{value * 100:g}%%"


@dataclasses.dataclass(frozen=True, slots=True)
class Declared:
    """An option's default where its owner declares it: a dataclass field ("FleetRules.tolerance") or a constant
    ("MAX_PVALUE") of a pytest_gpuperf module. The option itself defaults to None (the command then uses the
    owner's default); the value is read only when the help is printed, so `gpuperf` starts without numpy."""

    module: str
    name: str
    render: Callable[[Any], str] = str

    def value(self) -> Any:
        owner = importlib.import_module(f"pytest_gpuperf.{self.module}")
        holder, _, attribute = self.name.rpartition(".")
        if not holder:
            return getattr(owner, attribute)
        return next(field.default for field in dataclasses.fields(getattr(owner, holder)) if field.name == attribute)


class DeclaredHelp(str):
    """Help text whose ``{default}`` is a Declared default, filled in when argparse expands the help (``%``)."""

    declared: Declared

    def __new__(cls, text: str, declared: Declared) -> DeclaredHelp:
        help_text = super().__new__(cls, text)
        help_text.declared = declared
        return help_text

    def __mod__(self, params: Any) -> str:
        return str.__mod__(self.replace("{default}", self.declared.render(self.declared.value())), params)


def declared(module: str, name: str, text: str, render: Callable[[Any], str] = str) -> DeclaredHelp:
    """``help=declared("core.stats.fleet", "FleetRules.z", "... (default {default})")``."""
    return DeclaredHelp(text, Declared(module, name, render))


def given(args: argparse.Namespace, **names: str) -> dict[str, Any]:
    """The options the user gave, as keyword arguments of their owner (``field=option_dest``): those left out
    keep the owner's declared default."""
    return {field: getattr(args, dest) for field, dest in names.items() if getattr(args, dest) is not None}
