"""A user's Hugging Face architecture on a real serving engine: ``transformers serve`` on the CPU cut of
``hf:qwen3-30b-a3b`` (a MoE: 16 of 128 experts, top-8), launched by servers.py with the weights the in-process
path builds (``HFSpec.build(seed=0)``), so its greedy tokens are the in-process HFEngine's.

One server in all (~10 s to start on this machine): a plugin session runs the inference suite with
``--gpuperf-models hf:... --gpuperf-engine transformers``, as a user would, and in the same session a test file
asks the session's pool for the same model (the running server is reused) and holds its tokens and its folder
against the in-process build. Skipped where transformers' serving extras are not installed.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
# Imported here, before the in-process plugin session: pytester drops the modules a session imported, and
# torch.distributed's operator library (which transformers' model code imports) cannot be imported twice.
pytest.importorskip("transformers.modeling_utils")

from served_engines import session_flags  # noqa: E402

from pytest_gpuperf.inference.servers import EngineChoice, ServerPool, launch_command  # noqa: E402
from pytest_gpuperf.models.hf import get_hf_spec  # noqa: E402

MODEL = "hf:qwen3-30b-a3b"
SUITE = Path(__file__).resolve().parents[2] / "pytest_gpuperf" / "suites" / "test_inference.py"

SERVED_TESTS = '''
    import json
    from pathlib import Path

    import pytest
    import torch
    import transformers

    from pytest_gpuperf.inference.engine import make_prompts
    from pytest_gpuperf.inference.hf_engine import HFEngine
    from pytest_gpuperf.inference.requests import Request
    from pytest_gpuperf.inference.servers import EngineError
    from pytest_gpuperf.models.hf import get_hf_spec

    MODEL = "hf:qwen3-30b-a3b"


    @pytest.fixture
    def spec():
        return get_hf_spec(MODEL, cpu=True)


    @pytest.fixture
    def served(gpuperf_servers, spec):
        return gpuperf_servers.engine(model=MODEL, spec=spec, max_len=128, device="cpu", dtype="float32")


    def test_served_greedy_tokens_are_the_in_process_engines(served, spec):
        """Same architecture, same weights, same greedy decoding: token for token, prompts of two lengths, the
        server's requests two at a time against HFEngine's one wave per request."""
        prompts = make_prompts(count=2, length=20, vocab_size=spec.vocab_size, seed=11)
        prompts += make_prompts(count=2, length=7, vocab_size=spec.vocab_size, seed=12)
        requests = [Request(id=i, prompt=p, max_new_tokens=16) for i, p in enumerate(prompts)]
        remote = served.generate(requests, concurrency=2)
        local = HFEngine(spec.build(seed=0).eval(), max_len=128).generate(requests, concurrency=1)
        assert [c.error for c in remote] == [None] * len(requests)
        assert [c.tokens for c in remote] == [c.tokens for c in local]
        assert all(len(c.tokens) == 16 for c in remote)
        assert len({t for c in remote for t in c.tokens}) > 8  # not one repeated token: that would prove little
        Path("tokens.json").write_text(json.dumps([c.tokens for c in remote]))


    def test_the_folder_holds_the_in_process_weights_and_no_special_tokens(served, spec):
        folder = Path(served.model)  # transformers serve names its preloaded folder by its path
        assert folder.name.startswith("hf-qwen3-30b-a3b-cpu-cut-float32-seed0-")
        config = transformers.AutoConfig.from_pretrained(folder)
        assert config.model_type == "qwen3_moe" and config.num_experts == 16 and config.hidden_size == 128
        for owner in (config, transformers.GenerationConfig.from_pretrained(folder)):
            assert [owner.bos_token_id, owner.eos_token_id, owner.pad_token_id] == [None, None, None]
        assert json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]["t255"] == 255
        loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
        built = spec.build(seed=0).state_dict()
        assert loaded.keys() == built.keys()
        assert [k for k in built if not torch.equal(loaded[k], built[k])] == []


    def test_the_server_is_reused_and_a_sequence_beyond_the_positions_is_one_error(served, gpuperf_servers):
        # the spec looked up from the name (the device's cut) is the same: the same server answers
        assert gpuperf_servers.engine(model=MODEL, max_len=64, device="cpu", dtype="float32") is served
        with pytest.raises(EngineError, match=r"hf:qwen3-30b-a3b has 40960 positions .* 50000 tokens does not fit"):
            gpuperf_servers.engine(model=MODEL, max_len=50000, device="cpu", dtype="float32")
'''


def test_the_inference_suite_serves_an_hf_model_on_transformers_serve(pytester: pytest.Pytester) -> None:
    """The user's command on the suite itself (a short open-loop run: the closed-loop sweeps of this tier take
    minutes on a server that answers one request at a time), plus the token and weight checks in its session."""
    pytester.makepyfile(test_served_hf=textwrap.dedent(SERVED_TESTS))
    results = pytester.path / "results.json"
    result = pytester.runpytest_inprocess(
        str(SUITE), "test_served_hf.py", "-v",
        "-k", "(open_loop and cpu) or served_hf",
        "--gpuperf-models", MODEL, "--gpuperf-engine", "transformers",
        "--gpuperf-request-rate", "8", "--gpuperf-load-requests", "6",
        "--gpuperf-load-warmup", "0", "--gpuperf-load-cooldown", "0",
        *session_flags(pytester, results),
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 4 and result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*::test_open_loop_sweep[[]hf:qwen3-30b-a3b-engine-transformers-cpu[]] PASSED*"])
    version = transformers.__version__
    launches = [line for line in result.outlines if line.startswith("gpuperf engine: ")]
    assert len(launches) == 1, launches  # one server for the suite's test and the three checks
    assert launches[0].startswith(f"gpuperf engine: transformers {version} serving {MODEL}, ready in ")
    assert " -m transformers.cli.transformers serve " in launches[0] and "hf-qwen3-30b-a3b-cpu-cut" in launches[0]
    assert len(json.loads((pytester.path / "tokens.json").read_text())) == 4
    document = json.loads(results.read_text())
    stack = document["fingerprint"]["stack"]
    assert stack["inference_engine"] == "transformers" and stack["inference_engine_version"] == version
    [test] = {m["test"] for m in document["results"]}  # the model and the engine tell its baselines apart
    assert test.endswith("::test_open_loop_sweep[hf:qwen3-30b-a3b-engine-transformers-cpu]"), test
    engines = [m["context"]["engine"] for m in document["results"]]
    assert engines and all(e["engine"] == "transformers" and "hf-qwen3-30b-a3b-cpu-cut" in e["launch"] for e in engines)


def test_vllm_and_sglang_load_an_hf_specs_saved_weights_unless_asked_for_dummy(tmp_path: Path) -> None:
    """No launch (no GPU here): the folder and the command a vLLM or SGLang session would use."""
    spec = get_hf_spec(MODEL, cpu=True)
    saved = ServerPool(choice=EngineChoice("vllm"), workdir=tmp_path / "saved")
    assert not saved.dummy_weights(spec) and saved.dummy_weights(None)  # registry models stay dummy
    folder = saved.model_folder(MODEL, spec=spec, max_len=4096, device="cpu", dtype="float32")
    assert list(folder.glob("*.safetensors"))
    common: dict[str, Any] = {
        "model_dir": folder,
        "served_name": MODEL,
        "port": 1,
        "device": "cuda",
        "dtype": "bfloat16",
    }
    assert "--load-format" not in launch_command("vllm", **common, max_len=4096, dummy_weights=False)
    assert "--load-format" not in launch_command("sglang", **common, max_len=4096, dummy_weights=False)
    dummy = ServerPool(choice=EngineChoice("sglang"), workdir=tmp_path / "dummy", extra_args=("--load-format=dummy",))
    assert dummy.dummy_weights(spec)
    folder = dummy.model_folder(MODEL, spec=spec, max_len=4096, device="cpu", dtype="float32")
    assert folder.name.endswith("-config-only") and not list(folder.glob("*.safetensors"))
    assert transformers.AutoConfig.from_pretrained(folder).num_experts == 16


def test_a_lora_spec_is_served_as_its_base_with_the_same_logits(tmp_path: Path) -> None:
    """peft's wrapped modules would not load as the architecture; the adapters' B is zero, so the base is exact."""
    import torch

    from pytest_gpuperf.inference.model_folder import write_hf_model_folder

    spec = get_hf_spec("hf:llama3.1-8b+lora", cpu=True)
    folder = write_hf_model_folder(tmp_path, spec, dtype="float32", weights=True)
    served = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokens = torch.randint(0, spec.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        assert torch.equal(served(tokens).logits, spec.build(seed=0).eval()(input_ids=tokens).logits)
