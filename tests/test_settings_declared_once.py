"""Each setting is declared once, in core/settings.py's OPTIONS: its default, help and parser (issue 35).

The Settings dataclass takes its field defaults from there, so a settings object built by hand (tests, tools)
gets the defaults a user gets; these tests fail where the two drift apart or a setting is declared twice.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pytest_gpuperf.core.settings import DEVICE_DEFAULTS, OPTIONS, Settings

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
