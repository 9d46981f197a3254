"""pytest plugin of the training workloads: ``--gpuperf-models``, ``--gpuperf-precisions``, ``--gpuperf-tier`` and
the ``model``, ``precision``, ``training_tier`` and ``gpuperf_model_hook`` fixtures. No torch at import (the tier's
device is resolved only when a collected test asks for these fixtures).

``model`` and ``precision`` are parametrized in ``pytest_generate_tests`` from the options (or the tier's
defaults), so ``-k`` and node ids name them: ``test_pretrain[tiny-moe]``, ``test_precision_ladder[fp4]``. A test
narrows the models it takes with ``@pytest.mark.gpuperf_models("lora")`` (kinds: ``pretrain``, ``dense``,
``moe``, ``lora``). A test that parametrizes ``precision`` or ``model`` itself keeps its own values, and a test
that gets a project's own ``model`` or ``precision`` fixture is left alone (``core/session/parametrize.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.core.config.settings import OptionSpec, SettingError, add_options, parse_choice, resolve
from pytest_gpuperf.core.session.parametrize import uses_own_fixture
from pytest_gpuperf.training.tiers import TIERS, Tier, get_tier

if TYPE_CHECKING:
    from pytest_gpuperf.models.registry import ModelSpec

MODEL_KINDS = ("pretrain", "dense", "moe", "lora")


def _split(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.replace(" ", ",").split(",") if part.strip())
    if not names:
        raise SettingError("expected a comma-separated list of names")
    if len(set(names)) != len(names):
        raise SettingError("a name is listed twice")
    return names


def parse_models(text: str) -> tuple[str, ...]:
    from pytest_gpuperf.models.registry import get_spec, spec_names

    names = _split(text)
    for name in names:
        if name.startswith("hf:"):  # a Hugging Face configuration; transformers is imported only for these
            from pytest_gpuperf.models.hf import HFModelError, get_hf_spec

            try:
                get_hf_spec(name, cpu=True)
                get_hf_spec(name, cpu=False)
            except HFModelError as error:
                raise SettingError(str(error)) from None
            continue
        try:
            get_spec(name)
        except (KeyError, ValueError):
            raise SettingError(f"unknown model {name!r}; known: {', '.join(spec_names())} "
                               "(append @N for a proxy cut to N layers, e.g. llama3-8b@2; hf:NAME or "
                               "hf:PATH/config.json for a Hugging Face architecture)") from None  # fmt: skip
    return names


def parse_precisions(text: str) -> tuple[str, ...]:
    from pytest_gpuperf.training.precision import PRECISIONS

    names = tuple(name.lower() for name in _split(text))
    unknown = [name for name in names if name not in PRECISIONS]
    if unknown:
        raise SettingError(f"unknown precision {unknown[0]!r}; known: {', '.join(PRECISIONS)}")
    return names


OPTIONS: tuple[OptionSpec[Any], ...] = (
    OptionSpec(
        name="models",
        help="model specs the training workloads run, comma-separated: built-in names, hf:NAME (a shipped "
             "Hugging Face configuration, `gpuperf models` lists them) or hf:PATH/config.json, each with @N for "
             "N layers (default: the tier's: tiny-llama, tiny-moe, tiny-lora on cpu; layer-cut real dimensions "
             "on gpu)",
        parse=parse_models, default=None, metavar="NAME[,NAME...]",
    ),
    OptionSpec(
        name="precisions",
        help="training precisions, comma-separated: fp32, tf32, bf16, fp16, fp8, fp8-rowwise, fp4 (default: the "
             "tier's: fp32,bf16,fp8,fp4 on cpu; bf16,fp8 on gpu)",
        parse=parse_precisions, default=None, metavar="NAME[,NAME...]",
    ),
    OptionSpec(
        name="tier",
        help="training tier: cpu (tiny models, ~2 min on 2 cores), full (more seeds and steps), gpu (real "
             "dimensions cut to 1-2 layers); auto picks gpu on a cuda device, else cpu (default auto)",
        parse=parse_choice("auto", *TIERS), default="auto", metavar="auto|" + "|".join(TIERS),
    ),
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingOptions:
    """The training options as given (None: the tier's default)."""

    models: tuple[str, ...] | None
    precisions: tuple[str, ...] | None
    tier_request: str


options_key = pytest.StashKey[TrainingOptions]()
tier_key = pytest.StashKey[Tier]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser, OPTIONS)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gpuperf_models(*kinds): the kinds of model spec a test's model fixture takes from --gpuperf-models "
        f"({', '.join(MODEL_KINDS)}) (pytest-gpuperf)",
    )
    values: dict[str, Any] = {spec.name: resolve(config, spec)[0] for spec in OPTIONS}  # bad values stop the run here
    config.stash[options_key] = TrainingOptions(
        models=values["models"], precisions=values["precisions"], tier_request=values["tier"]
    )


def training_tier(config: pytest.Config) -> Tier:
    """The session's tier, resolved on first use (``auto`` asks the foundation which device the run uses)."""
    tier = config.stash.get(tier_key, None)
    if tier is None:
        request = config.stash[options_key].tier_request
        if request == "auto":
            from pytest_gpuperf.core.session.state import gpuperf_session

            request = "gpu" if gpuperf_session(config).device == "cuda" else "cpu"
        tier = get_tier(request)
        config.stash[tier_key] = tier
    return tier


def selected_models(config: pytest.Config) -> tuple[str, ...]:
    return config.stash[options_key].models or training_tier(config).models


def selected_precisions(config: pytest.Config) -> tuple[str, ...]:
    return config.stash[options_key].precisions or training_tier(config).precisions


def resolve_spec(config: pytest.Config, name: str) -> ModelSpec:
    """The spec a name stands for in this session: an ``hf:`` name is cut for the session's tier (layers and
    width on the CPU tiers, layers only on the GPU tier; ``models/hf.py``)."""
    if name.startswith("hf:"):
        from pytest_gpuperf.models.hf import get_hf_spec

        return get_hf_spec(name, cpu=training_tier(config).name != "gpu")  # type: ignore[return-value]
    from pytest_gpuperf.models.registry import get_spec

    return get_spec(name)


def selected_hf_models(config: pytest.Config) -> tuple[str, ...]:
    """The ``hf:`` names given with ``--gpuperf-models`` (the inference suite serves these besides its own)."""
    return tuple(name for name in config.stash[options_key].models or () if name.startswith("hf:"))


def model_kinds(spec: ModelSpec) -> set[str]:
    if spec.is_lora:
        return {"lora"}
    return {"pretrain", "moe" if spec.family == "moe" else "dense"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    config = metafunc.config
    if uses_own_fixture(metafunc, "model", __name__):
        marker = metafunc.definition.get_closest_marker("gpuperf_models")
        kinds = set(marker.args) if marker else set(MODEL_KINDS)
        unknown = kinds - set(MODEL_KINDS)
        if unknown:
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: gpuperf_models{tuple(sorted(unknown))}: "
                                    f"unknown kind; use {', '.join(MODEL_KINDS)}")  # fmt: skip
        names = selected_models(config)
        specs = [spec for spec in (resolve_spec(config, name) for name in names) if model_kinds(spec) & kinds]
        if specs:
            metafunc.parametrize("model", specs, ids=[spec.name for spec in specs], indirect=True)
        else:
            reason = f"no {'/'.join(sorted(kinds))} model among the selected models ({', '.join(names)})"
            metafunc.parametrize(
                "model", [pytest.param(None, marks=pytest.mark.skip(reason=reason))], ids=["none"], indirect=True
            )
    if uses_own_fixture(metafunc, "precision", __name__):
        names = selected_precisions(config)
        metafunc.parametrize("precision", names, ids=list(names), indirect=True)


@pytest.fixture(name="training_tier")
def training_tier_fixture(request: pytest.FixtureRequest) -> Tier:
    """The tier this run uses: models, precisions, seeds and step budgets (``pytest_gpuperf.training.tiers``)."""
    return training_tier(request.config)


@pytest.fixture
def gpuperf_model_hook() -> Any:
    """Called on every model a training workload builds, before its precision is prepared; None here. Override
    it in a conftest.py to instrument models (the must-catch tests inject numerical noise or extra work)."""
    return None


@pytest.fixture
def model(request: pytest.FixtureRequest) -> ModelSpec:
    """A model spec from ``--gpuperf-models`` (not built: a workload builds it per seed with ``spec.build``)."""
    spec: ModelSpec = request.param
    return spec


@pytest.fixture
def precision(request: pytest.FixtureRequest) -> str:
    """A precision from ``--gpuperf-precisions``; skipped, naming device and precision, where it cannot run."""
    from pytest_gpuperf.core.session.state import gpuperf_session
    from pytest_gpuperf.training.precision import unsupported_reason

    name: str = request.param
    reason = unsupported_reason(name, gpuperf_session(request.config).device)
    if reason is not None:
        pytest.skip(reason)
    return name
