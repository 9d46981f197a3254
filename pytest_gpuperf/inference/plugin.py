"""pytest plugin of the inference area: its options and settings fixture. No torch at import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from pytest_gpuperf.core.settings import OptionSpec, SettingError, add_options, parse_count, resolve


def _parse_url(text: str) -> str:
    text = text.strip()
    if not text.startswith(("http://", "https://")):
        raise SettingError("expected an http:// or https:// URL of an OpenAI-compatible server")
    return text.rstrip("/")


def _parse_name(text: str) -> str:
    if not text.strip():
        raise SettingError("expected a non-empty model name")
    return text.strip()


OPTIONS: tuple[OptionSpec[Any], ...] = (
    OptionSpec(
        name="inference-endpoint",
        help="measure an external OpenAI-compatible server (vLLM, SGLang) at this URL instead of the in-process engine",
        parse=_parse_url,
        default=None,
        metavar="URL",
    ),
    OptionSpec(
        name="inference-served-model",
        help="model name the external server serves (default: the suite's model name)",
        parse=_parse_name,
        default=None,
        metavar="NAME",
    ),
    OptionSpec(
        name="inference-devices",
        help="accelerators behind the external server, the denominator of tok/s per device (default 1)",
        parse=parse_count(1),
        default=1,
        metavar="N",
    ),
    OptionSpec(
        name="inference-runs",
        help="repeated runs of every sweep point; each run is one sample of its metrics (default 3)",
        parse=parse_count(3),
        default=3,
        metavar="N",
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceSettings:
    endpoint: str | None
    """URL of an external server, or None for the in-process engine."""
    served_model: str | None
    devices: int
    runs: int


_key = pytest.StashKey[InferenceSettings]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser, OPTIONS)


def pytest_configure(config: pytest.Config) -> None:
    inference_settings(config)  # a bad value stops the run at once


def inference_settings(config: pytest.Config) -> InferenceSettings:
    found = config.stash.get(_key, None)
    if found is None:
        values: dict[str, Any] = {spec.name: resolve(config, spec)[0] for spec in OPTIONS}
        found = InferenceSettings(
            endpoint=values["inference-endpoint"],
            served_model=values["inference-served-model"],
            devices=values["inference-devices"],
            runs=values["inference-runs"],
        )
        config.stash[_key] = found
    return found


@pytest.fixture
def gpuperf_inference(request: pytest.FixtureRequest) -> InferenceSettings:
    """The inference options of this session (external endpoint, runs per sweep point)."""
    return inference_settings(request.config)
