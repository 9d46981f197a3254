"""pytest plugin of the inference area: its options, settings fixture and engine servers. No torch at import."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_gpuperf.core.config.settings import (
    OptionSpec,
    SettingError,
    add_options,
    get_settings,
    parse_count,
    parse_positive_seconds,
    parse_seconds,
    resolve,
)
from pytest_gpuperf.core.session.state import reporting
from pytest_gpuperf.inference.metrics import SLO
from pytest_gpuperf.inference.servers import (
    PACKAGES,
    EngineChoice,
    ServerPool,
    engine_stack,
    package_version,
    parse_engine,
)


def _parse_url(text: str) -> str:
    text = text.strip()
    if not text.startswith(("http://", "https://")):
        raise SettingError("expected an http:// or https:// URL of an OpenAI-compatible server")
    return text.rstrip("/")


def _parse_engine(text: str) -> EngineChoice:
    try:
        return parse_engine(text)
    except ValueError as error:
        raise SettingError(str(error)) from None


def _parse_args(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as error:
        raise SettingError(f"not a shell-quoted argument list ({error})") from None


def _parse_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingError("expected seconds, a positive number") from None
    if not value > 0:
        raise SettingError("expected seconds, a positive number")
    return value


def _parse_name(text: str) -> str:
    if not text.strip():
        raise SettingError("expected a non-empty model name")
    return text.strip()


# -- load generation (open loop, lengths, SLOs, interactivity points) -----------------------------------------


def _parse_positives(what: str, example: str) -> Any:
    def parse(text: str) -> tuple[float, ...]:
        values = []
        for part in text.split(","):
            try:
                value = float(part.strip())
            except ValueError:
                raise SettingError(f"expected {what} such as {example}") from None
            if not (value > 0 and value != float("inf")):
                raise SettingError(f"expected positive, finite {what} such as {example}")
            values.append(value)
        if len(set(values)) != len(values):
            raise SettingError(f"expected distinct {what}; a value is given twice")
        return tuple(sorted(values))

    return parse


def _parse_burstiness(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise SettingError(
            "expected the coefficient of variation of inter-arrival gaps, e.g. 1 (Poisson) or 2"
        ) from None
    if not (0 < value <= 10):
        raise SettingError("expected a coefficient of variation in (0, 10]; 1 is Poisson")
    return value


def _parse_slo(text: str) -> SLO:
    limits: dict[str, float] = {}
    for part in text.split(","):
        key, _, raw = part.partition("=")
        key = key.strip().lower()
        if key not in ("ttft", "tpot") or key in limits:
            raise SettingError("expected ttft=MS,tpot=MS (milliseconds, each once)")
        try:
            value = float(raw.strip().removesuffix("ms"))
        except ValueError:
            raise SettingError(f"{key} limit {raw.strip()!r} is not a number of milliseconds") from None
        if not (0 < value < float("inf")):
            raise SettingError(f"{key} limit must be a positive number of milliseconds")
        limits[key] = value / 1000
    if set(limits) != {"ttft", "tpot"}:
        raise SettingError("expected both limits: ttft=MS,tpot=MS")
    return SLO(ttft_s=limits["ttft"], tpot_s=limits["tpot"])


def _parse_lengths(text: str) -> str:
    from pytest_gpuperf.inference.lengths import KINDS

    value = text.strip().lower()
    if value not in KINDS:
        raise SettingError(f"expected one of {', '.join(KINDS)}")
    return value


LOAD_OPTIONS: tuple[OptionSpec[Any], ...] = (
    OptionSpec(
        name="request-rate",
        help="open-loop request rate(s) of the rate sweep, requests/s; a comma list sweeps them (default: the tier's)",
        parse=_parse_positives("requests/s", "4 or 1,2,4"),
        default=None,
        metavar="R[,R...]",
    ),
    OptionSpec(
        name="burstiness",
        help="coefficient of variation of open-loop inter-arrival gaps: 1 Poisson, >1 burstier (gamma) (default 1)",
        parse=_parse_burstiness,
        default=1.0,
        metavar="CV",
    ),
    OptionSpec(
        name="max-concurrency",
        help="most requests in flight in an open loop; a request waits for a slot, in its latency (default: tier)",
        parse=parse_count(1),
        default=None,
        metavar="N",
    ),
    OptionSpec(
        name="load-requests",
        help="requests scheduled per open-loop run, warm-up and cool-down included (default: the tier's)",
        parse=parse_count(1),
        default=None,
        metavar="N",
    ),
    OptionSpec(
        name="load-duration",
        help="seconds of schedule per open-loop run, instead of a request count",
        parse=parse_positive_seconds,
        default=None,
        metavar="SECONDS",
    ),
    OptionSpec(
        name="load-warmup",
        help="first seconds of each open-loop schedule whose requests are sent but not measured (default: the tier's)",
        parse=parse_seconds,
        default=None,
        metavar="SECONDS",
    ),
    OptionSpec(
        name="load-cooldown",
        help="last seconds of each open-loop schedule whose requests are sent but not measured (default: the tier's)",
        parse=parse_seconds,
        default=None,
        metavar="SECONDS",
    ),
    OptionSpec(
        name="lengths",
        help="request lengths of the rate sweep: fixed (the tier's ISL/OSL) or sharegpt (a ShareGPT-shaped "
        "distribution, docs/inference.md) (default fixed)",
        parse=_parse_lengths,
        default="fixed",
        metavar="fixed|sharegpt",
    ),
    OptionSpec(
        name="slo",
        help="goodput SLOs in milliseconds, e.g. ttft=200,tpot=50 (default: the tier's)",
        parse=_parse_slo,
        default=None,
        metavar="ttft=MS,tpot=MS",
    ),
    OptionSpec(
        name="interactivity",
        help="interactivity points (tok/s/user) of the throughput-per-device headline, e.g. 32 or 20,50 "
        "(default: fixed by the first saved baseline)",
        parse=_parse_positives("tok/s/user", "32 or 20,50"),
        default=None,
        metavar="TOKS[,TOKS...]",
    ),
)


OPTIONS: tuple[OptionSpec[Any], ...] = (
    OptionSpec(
        name="engine",
        help="inference engine: builtin (in process, the default), transformers, vllm or sglang (their server "
        "launched on the suite's model, or on the hf: one of --gpuperf-models with its in-process weights) or "
        "openai:URL (a server you run)",
        parse=_parse_engine,
        default=EngineChoice("builtin"),
        metavar="ENGINE",
    ),
    OptionSpec(
        name="engine-args",
        help="extra arguments appended to a launched engine's server command, shell-quoted "
        "(e.g. '--tensor-parallel-size 8')",
        parse=_parse_args,
        default=(),
        metavar="ARGS",
    ),
    OptionSpec(
        name="engine-start-timeout",
        help="seconds a launched engine may take until /health answers (default 180 transformers, 900 vllm/sglang)",
        parse=_parse_seconds,
        default=None,
        metavar="S",
    ),
    OptionSpec(
        name="inference-endpoint",
        help="the same as --gpuperf-engine openai:URL (kept for existing command lines)",
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
    *LOAD_OPTIONS,  # the load generator's block (above)
)


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceSettings:
    engine: EngineChoice
    """builtin, a launched engine, or openai:URL."""
    engine_args: tuple[str, ...]
    engine_start_timeout: float | None
    endpoint: str | None
    """URL of an attached server (openai:URL), or None."""
    served_model: str | None
    devices: int
    runs: int
    # load generation (LOAD_OPTIONS); None: the suite tier's own value
    request_rates: tuple[float, ...] | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = None
    load_requests: int | None = None
    load_duration_s: float | None = None
    load_warmup_s: float | None = None
    load_cooldown_s: float | None = None
    lengths: str = "fixed"
    slo: SLO | None = None
    interactivity: tuple[float, ...] | None = None


_key = pytest.StashKey[InferenceSettings]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser, OPTIONS)


def pytest_configure(config: pytest.Config) -> None:
    engine = inference_settings(config).engine  # a bad value stops the run at once
    if engine.launched and package_version(engine.kind) is None:
        raise pytest.UsageError(
            f"--gpuperf-engine {engine.kind}: the {PACKAGES[engine.kind]} package is not installed in this Python "
            f"({sys.executable}); install it or pick another engine"
        )
    slowdown = get_settings(config).slowdown("inference")
    if slowdown and engine.kind != "transformers":
        raise pytest.UsageError(
            f"--gpuperf-inject-slowdown inference={slowdown * 100:g}: the inference suite slows a launched "
            f"transformers serve only (each forward of its model run again), not --gpuperf-engine {engine}: add "
            "--gpuperf-engine transformers, or drop the inference part"
        )


def inference_settings(config: pytest.Config) -> InferenceSettings:
    found = config.stash.get(_key, None)
    if found is None:
        resolved = {spec.name: resolve(config, spec) for spec in OPTIONS}
        values: dict[str, Any] = {name: value for name, (value, _) in resolved.items()}
        engine: EngineChoice = values["engine"]
        if values["inference-endpoint"] is not None:
            synonym = EngineChoice("openai", values["inference-endpoint"])
            if resolved["engine"][1] != "default" and engine != synonym:
                raise pytest.UsageError(
                    f"--gpuperf-engine {engine} and --gpuperf-inference-endpoint {synonym.url} name different "
                    "engines: give one (--gpuperf-engine openai:URL is the same as --gpuperf-inference-endpoint URL)"
                )
            engine = synonym
        found = InferenceSettings(
            engine=engine,
            engine_args=values["engine-args"],
            engine_start_timeout=values["engine-start-timeout"],
            endpoint=engine.url,
            served_model=values["inference-served-model"],
            devices=values["inference-devices"],
            runs=values["inference-runs"],
            **load_settings(config),
        )
        config.stash[_key] = found
    return found


def load_settings(config: pytest.Config) -> dict[str, Any]:
    """The load-generation fields of InferenceSettings, checked together."""
    load = {spec.name: resolve(config, spec) for spec in LOAD_OPTIONS}
    if load["load-requests"][0] is not None and load["load-duration"][0] is not None:
        raise pytest.UsageError(
            f"{load['load-requests'][1]} and {load['load-duration'][1]} both bound the open-loop runs: give one"
        )
    return {
        "request_rates": load["request-rate"][0],
        "burstiness": load["burstiness"][0],
        "max_concurrency": load["max-concurrency"][0],
        "load_requests": load["load-requests"][0],
        "load_duration_s": load["load-duration"][0],
        "load_warmup_s": load["load-warmup"][0],
        "load_cooldown_s": load["load-cooldown"][0],
        "lengths": load["lengths"][0],
        "slo": load["slo"][0],
        "interactivity": load["interactivity"][0],
    }


@pytest.fixture
def gpuperf_inference(request: pytest.FixtureRequest) -> InferenceSettings:
    """The inference options of this session (engine, runs per sweep point)."""
    return inference_settings(request.config)


_pool_key = pytest.StashKey[ServerPool]()


@pytest.fixture(scope="session")
def gpuperf_servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    """The session's served engines (--gpuperf-engine): launched on first use, stopped at the session's end."""
    settings = inference_settings(request.config)
    pool = ServerPool(
        choice=settings.engine,
        workdir=tmp_path_factory.mktemp("gpuperf-engines"),
        served_model=settings.served_model,
        devices=settings.devices,
        extra_args=settings.engine_args,
        start_timeout=settings.engine_start_timeout,
        slowdown=get_settings(request.config).slowdown("inference"),
    )
    request.config.stash[_pool_key] = pool
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def gpuperf_engine(gpuperf_servers: ServerPool, gpuperf_engine_id: str) -> ServerPool:
    """The served engines for this test. Under --gpuperf-engine other than builtin the test is parametrized by the
    engine (``[...-engine-vllm]``), so its baselines are its own: a server's figures are never judged against
    the in-process engine's (builtin test ids stay as they were)."""
    return gpuperf_servers


@pytest.fixture
def gpuperf_engine_id(request: pytest.FixtureRequest) -> str:
    """The engine part of a test's id (``builtin`` leaves the id alone)."""
    return engine_label(inference_settings(request.config).engine)


def engine_label(engine: EngineChoice) -> str:
    """builtin, transformers, vllm, sglang, or openai for an attached URL (its port is not part of a test id)."""
    return engine.kind


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gpuperf_engine_id" not in metafunc.fixturenames:
        return
    engine = inference_settings(metafunc.config).engine
    if engine.kind != "builtin":
        label = engine_label(engine)
        metafunc.parametrize("gpuperf_engine_id", [label], ids=[f"engine-{label}"])


def pytest_gpuperf_stack(config: pytest.Config) -> dict[str, str] | None:
    """The inference engine's name and version, so a vLLM upgrade reads as a stack change (servers.py)."""
    return engine_stack(inference_settings(config).engine) or None


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    pool = config.stash.get(_pool_key, None)
    if pool is None or not pool.launches or not reporting(config):
        return
    for launch in pool.launches:
        terminalreporter.write_line(
            f"gpuperf engine: {launch.engine} {launch.version} serving {launch.model}, ready in "
            f"{launch.startup_s:.1f} s: {launch.command}"
        )
