"""Each setting is declared once, in core/config/settings.py's OPTIONS: its default, help and parser (issue 35).

The Settings dataclass takes its field defaults from there, so a settings object built by hand (tests, tools)
gets the defaults a user gets; these tests fail where the two drift apart or a setting is declared twice.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.core.config.settings import (
    DEVICE_DEFAULTS,
    ENVIRONMENT_ONLY,
    OPTIONS,
    OptionSpec,
    SettingError,
    Settings,
    environment_setting,
)

FIELD_OF = {"baselines": "baselines_dir", "results": "results_path", "device": "device_request"}
"""Options whose Settings field has another name: build_settings makes the resolved path or request of them."""

DERIVED = {"machine_spread"}
"""Settings fields that are no option of their own (the spread file given as --gpuperf-machine-noise)."""


def field_name(option: str) -> str:
    return FIELD_OF.get(option, option.replace("-", "_"))


def test_no_setting_is_declared_twice() -> None:
    for attribute in ("name", "cli", "env", "ini"):
        values = [getattr(spec, attribute) for spec in OPTIONS]
        twice = sorted({value for value in values if values.count(value) > 1})
        assert not twice, f"declared more than once in OPTIONS ({attribute}): {twice}"


def every_table() -> tuple[OptionSpec[Any], ...]:
    """The settings of every option table the plugin registers, and the environment-only ones."""
    from pytest_gpuperf.core.session.sizing import OPTIONS as SIZING
    from pytest_gpuperf.distributed.plugin import OPTIONS as DISTRIBUTED
    from pytest_gpuperf.inference.plugin import OPTIONS as INFERENCE
    from pytest_gpuperf.training.plugin import OPTIONS as TRAINING

    return (*OPTIONS, *ENVIRONMENT_ONLY, *SIZING, *DISTRIBUTED, *INFERENCE, *TRAINING)


def test_no_setting_is_declared_twice_across_the_plugins_tables() -> None:
    envs = [spec.env for spec in every_table()]
    twice = sorted({env for env in envs if envs.count(env) > 1})
    assert not twice, f"declared in more than one table: {twice}"


def test_each_option_is_a_settings_field_and_each_field_an_option() -> None:
    fields = {field.name for field in dataclasses.fields(Settings)}
    options = {field_name(spec.name) for spec in OPTIONS}
    assert options - fields == set(), "options without a Settings field"
    assert fields - options - DERIVED == set(), "Settings fields that no option declares"


def test_a_settings_field_defaults_to_its_options_default() -> None:
    fields = {field.name: field for field in dataclasses.fields(Settings)}
    for spec in OPTIONS:
        field = fields[field_name(spec.name)]
        if field.default is dataclasses.MISSING:  # a path made from the rootdir: no default to drift
            assert spec.name == "baselines", f"{field.name} has no default; its option's is {spec.default!r}"
            continue
        assert field.default == spec.default, (
            f"Settings.{field.name} defaults to {field.default!r}, but {spec.cli} to {spec.default!r}: "
            "a settings object built by hand would not get what a user gets"
        )


def test_the_results_document_records_each_setting_its_readers_read() -> None:
    block = Settings(baselines_dir=Path("baselines")).as_results("cpu")
    assert set(block) == {
        "threshold", "noise_limit", "run_noise", "sitting_noise", "machine_noise", "machine_spread", "job_alpha",
        "repeats", "warmup", "strict", "saved", "measure_only", "machine_check", "extend", "extend_seconds",
    }  # fmt: skip
    assert block["threshold"] == DEVICE_DEFAULTS["cpu"]["threshold"] and block["machine_check"] == "on"
    assert block["saved"] is False and block["machine_spread"] is None
    assert Settings(baselines_dir=Path("baselines")).as_results("cuda")["noise_limit"] == 0.05


def test_each_environment_variable_the_package_names_is_declared() -> None:
    """Read with os.environ.get or passed by name to a helper that reads it: every GPUPERF_ name in the package's
    code is one a table declares (its parser, default and help)."""
    package = Path(__file__).resolve().parents[2] / "pytest_gpuperf"
    named = {
        name for path in package.rglob("*.py") for name in re.findall(r"GPUPERF_[A-Z][A-Z0-9_]*", path.read_text())
    }
    declared = {spec.env for spec in every_table()}
    assert named - declared == set(), "GPUPERF_ variables the package names but no option table declares"


def test_environment_only_settings_are_declared_once_and_documented() -> None:
    names = [spec.env for spec in (*OPTIONS, *ENVIRONMENT_ONLY)]
    assert len(names) == len(set(names)), "an environment variable declared twice"
    text = (Path(__file__).resolve().parents[2] / "docs" / "settings.md").read_text()
    missing = [spec.env for spec in ENVIRONMENT_ONLY if f"`{spec.env}" not in text]
    assert not missing, f"docs/settings.md does not list {missing}"


def test_an_environment_only_setting_is_parsed_and_a_bad_value_names_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GPUPERF_PG_TIMEOUT", raising=False)
    assert environment_setting("pg-timeout") == 60.0
    monkeypatch.setenv("GPUPERF_PG_TIMEOUT", "30")
    assert environment_setting("pg-timeout") == 30.0
    monkeypatch.setenv("GPUPERF_PG_TIMEOUT", "soon")
    with pytest.raises(SettingError, match=r"GPUPERF_PG_TIMEOUT='soon': expected"):
        environment_setting("pg-timeout")
    monkeypatch.setenv("GPUPERF_ALLOW_COMPILE", "1")
    assert environment_setting("allow-compile") is True


@pytest.mark.parametrize("name", ["vllm", "maxtext-python", "sglang-python"])
def test_a_program_setting_naming_nothing_is_said_of_the_setting(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 48, item 5: GPUPERF_VLLM=/nonexistent/bin/vllm was reported as a missing /nonexistent/bin/python."""
    variable = "GPUPERF_" + name.replace("-", "_").upper()
    monkeypatch.setenv(variable, "/nonexistent/bin/vllm")
    with pytest.raises(SettingError, match=rf"{variable}='/nonexistent/bin/vllm': no such executable program"):
        environment_setting(name)
    monkeypatch.setenv(variable, "sh")  # a name on PATH is a program too
    assert environment_setting(name) == "sh"
