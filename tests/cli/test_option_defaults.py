"""The `gpuperf` options' defaults are declared once: by argparse where the command line owns them, else by the
rule or module that uses them (cli/option_defaults.py), and the help shows the declared value, never a copy."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gpuperf.cli import variance
from pytest_gpuperf.cli.ab import plan_from_args
from pytest_gpuperf.cli.main import build_parser
from pytest_gpuperf.cli.option_defaults import DeclaredHelp, given

CLI = Path(__file__).resolve().parents[2] / "pytest_gpuperf" / "cli"
SPELLED_DEFAULT = re.compile(r"\b(default:?|else) \d")
"""A number typed into a help text as the default: it would stay when the declaration changes."""


def every_action(parser: argparse.ArgumentParser, name: str = "gpuperf") -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, subparser in action.choices.items():
                yield from every_action(subparser, f"{name} {command}")
        else:
            yield name, action


def help_of(command: list[str]) -> str:
    parser = build_parser()
    for word in command:
        parser = next(
            action.choices[word] for action in parser._actions if isinstance(action, argparse._SubParsersAction)
        )
    return " ".join(parser.format_help().split())


def test_no_help_text_spells_its_default() -> None:
    """Read in the source: a number typed into a help string stays when the declaration changes; a value put in
    with %(default)s, declared(...) or an f-string from the declaring table follows it."""
    spelled = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"):
                continue
            for keyword in node.keywords:
                if keyword.arg != "help":
                    continue
                typed = [part.value for part in ast.walk(keyword.value) if isinstance(part, ast.Constant)]
                spelled += [
                    f"{path.name}:{node.lineno}: {text!r}" for text in typed if SPELLED_DEFAULT.search(str(text))
                ]
    assert not spelled, "use %(default)s, or declared(...) for a default another module owns: " + "; ".join(spelled)


def test_an_option_whose_default_another_module_declares_defaults_to_none_and_shows_that_value() -> None:
    declared = [
        (command, action) for command, action in every_action(build_parser()) if isinstance(action.help, DeclaredHelp)
    ]
    assert {command for command, _ in declared} == {
        "gpuperf ab",
        "gpuperf bisect",
        "gpuperf fleet",
        "gpuperf variance",
        "gpuperf history",
    }
    for command, action in declared:
        assert action.default is None, f"{command} {action.option_strings}: the owner's default applies when left out"
        value = action.help.declared.value()
        shown = action.help.declared.render(value).replace("%%", "%")
        assert f"{shown}" in help_of(command.split()[1:]), (command, action.option_strings, shown)


def test_the_owners_default_is_what_the_command_gets_and_the_help_says(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpuperf.ab.model import AbPlan
    from pytest_gpuperf.core.stats.fleet import FleetRules

    args = build_parser().parse_args(["ab", "--a", "python", "--b", "python", "--", "tests/perf"])
    plan = plan_from_args(args, command="ab")
    owner = {field.name: field.default for field in dataclasses.fields(AbPlan)}
    assert (plan.min_pairs, plan.max_pairs, plan.alpha, plan.repeats, plan.seed) == (
        owner["min_pairs"], owner["max_pairs"], owner["alpha"], owner["repeats"], owner["seed"]
    )  # fmt: skip
    given_pairs = build_parser().parse_args(
        ["ab", "--a", "p", "--b", "p", "--min-pairs", "6", "--repeats", "0", "--", "t"]
    )
    plan = plan_from_args(given_pairs, command="ab")
    assert plan.min_pairs == 6 and plan.repeats is None  # 0: the suite's own repeats
    fleet = build_parser().parse_args(["fleet", "nodes/"])
    assert FleetRules(**given(fleet, tolerance="tolerance", z="z_threshold", alpha="alpha")) == FleetRules()
    monkeypatch.setattr(variance, "TOLERANCE", 0.025)
    assert "--tolerance PCT default 2.5%" in help_of(["variance"])


def test_a_pair_range_that_is_empty_is_refused_with_the_owners_default_on_the_other_side() -> None:
    from pytest_gpuperf.ab.model import AbPlan
    from pytest_gpuperf.cli.loading import InputError

    max_pairs = next(field.default for field in dataclasses.fields(AbPlan) if field.name == "max_pairs")
    args = build_parser().parse_args(["ab", "--a", "p", "--b", "p", "--min-pairs", "40", "--", "t"])
    with pytest.raises(InputError, match=rf"--min-pairs 40 is more than --max-pairs {max_pairs}$"):
        plan_from_args(args, command="ab")
