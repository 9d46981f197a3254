"""Hugging Face architectures as model specs (models/hf.py): parameter counts against the published figures, the
cut rule, deterministic initial weights, LoRA through peft, training, the in-process engine, bad names."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402

from pytest_gpuperf.models import hf, init  # noqa: E402

# Published figures are rounded; each tolerance is half a unit of the last digit the source gives unless a
# reason is stated. (total, active) relative tolerances; None: no published active figure.
TOLERANCE: dict[str, tuple[float, float | None]] = {
    "llama3.1-8b": (0.0, None),  # the model page's safetensors count is exact
    "llama3.1-70b": (0.0, None),
    "mixtral-8x7b": (0.0011, 0.004),  # 46.7B, 12.9B
    "qwen3-8b": (0.0061, None),  # 8.2B
    # 30.5B; "3.3B activated" is 3.353B truncated, not rounded: 2%
    "qwen3-30b-a3b": (0.0017, 0.02),
    # 671B main model (the Hub's 685B adds the 14B MTP module transformers does not build); "37B activated" is
    # 37.55B truncated: 2%
    "deepseek-v3": (0.00075, 0.02),
    # The report's 1,416M embedding is 6.4M above vocab x hidden (1,409.6M); its 25,600M non-embedding matches
    # the build's 25,599.7M: 0.05% on the total.
    "gemma3-27b": (0.0005, None),
    # The card's 355B follows from the config to 0.6% only: the main model is 352.8B, with its MTP layer ~356.8B;
    # no breakdown is published. Its 32B active counts no embeddings (33.63B - 2 x 0.776B = 32.08B): compared so.
    "glm-4.5": (0.01, 0.005),
    "glm-4.6": (0.01, 0.005),
}
ACTIVE_WITHOUT_EMBEDDINGS = {"glm-4.5", "glm-4.6"}


def test_every_shipped_config_has_a_tolerance_and_its_source() -> None:
    names = [name.removeprefix("hf:") for name in hf.shipped_names()]
    assert sorted(names) == sorted(TOLERANCE)
    for name in names:
        fields, meta = hf.read_config(name)
        assert meta["source"].startswith("https://huggingface.co/"), name
        assert meta["published_params"] > 0 and meta["published_params_source"], name


@pytest.mark.parametrize("name", sorted(TOLERANCE))
def test_full_parameter_counts_match_the_published_figures(name: str) -> None:
    _, meta = hf.read_config(name)
    counts = hf.get_hf_spec(f"hf:{name}", cpu=False).full_counts()
    total_tol, active_tol = TOLERANCE[name]
    assert abs(counts.total / meta["published_params"] - 1) <= total_tol, (name, counts.total)
    if active_tol is None:
        assert "published_active_params" not in meta and counts.active == counts.total
        return
    active = counts.active - (2 * counts.embedding if name in ACTIVE_WITHOUT_EMBEDDINGS else 0)
    assert abs(active / meta["published_active_params"] - 1) <= active_tol, (name, counts.active)


def test_exact_counts_of_two_models() -> None:
    """Hand-computed from the configs: Llama 3.1 8B, and Mixtral's routed experts at 2 of 8."""
    d, f, v, layers = 4096, 14336, 128256, 32
    llama = 2 * v * d + layers * (2 * d * d + 2 * d * 1024 + 3 * d * f + 2 * d) + d
    assert hf.get_hf_spec("hf:llama3.1-8b", cpu=False).full_counts().total == llama == 8_030_261_248
    mixtral = hf.get_hf_spec("hf:mixtral-8x7b", cpu=False).full_counts()
    experts = layers * 8 * 3 * d * f
    assert mixtral.routed == experts and mixtral.active == mixtral.total - experts + experts // 4


def test_cpu_cut_keeps_the_architectures_shape() -> None:
    for name in hf.shipped_names():
        fields, _ = hf.read_config(name.removeprefix("hf:"))
        cut = hf.get_hf_spec(name, cpu=True).fields
        assert cut["hidden_size"] == 128 and cut["vocab_size"] == 256 and cut["num_hidden_layers"] == 2, name
        ratio = fields["num_attention_heads"] // fields["num_key_value_heads"]
        assert cut["num_attention_heads"] == ratio * cut["num_key_value_heads"], name
        assert cut.get("num_experts_per_tok") == fields.get("num_experts_per_tok"), name
        for key in ("head_dim", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if key in fields:
                assert cut[key] * 4 == fields[key], (name, key)
    deepseek = hf.get_hf_spec("hf:deepseek-v3", cpu=True).fields
    assert deepseek["first_k_dense_replace"] == 1  # one dense layer, one MoE layer
    assert deepseek["n_routed_experts"] == 16 and deepseek["n_routed_experts"] % deepseek["n_group"] == 0
    gemma = hf.get_hf_spec("hf:gemma3-27b", cpu=True).fields
    assert gemma["layer_types"] == ["sliding_attention", "full_attention"] and gemma["sliding_window"] == 16
    assert hf.get_hf_spec("hf:qwen3-30b-a3b", cpu=True).fields["num_experts"] == 16  # 2 x top-8


def test_layer_cut_names_and_gpu_width() -> None:
    spec = hf.get_hf_spec("hf:deepseek-v3@8", cpu=False)
    assert (spec.name, spec.n_layers, spec.full_n_layers, spec.d_model) == ("hf:deepseek-v3@8", 8, 61, 7168)
    assert spec.fields["first_k_dense_replace"] == 1  # max(1, round(3 * 8 / 61))
    gemma = hf.get_hf_spec("hf:gemma3-27b@7", cpu=False).fields["layer_types"]
    assert gemma == ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"]  # the full pattern's
    assert hf.get_hf_spec("hf:llama3.1-8b", cpu=False).n_layers == 32  # no @N on the GPU tier: full depth
    assert hf.get_hf_spec("hf:llama3.1-8b", cpu=True).with_layers(1).name == "hf:llama3.1-8b@1"
    with pytest.raises(hf.HFModelError, match="32 layers"):
        hf.get_hf_spec("hf:llama3.1-8b@33", cpu=False)


def test_flops_follow_the_builtin_formula() -> None:
    from pytest_gpuperf.models.registry import get_spec

    ours, builtin = hf.get_hf_spec("hf:llama3.1-8b", cpu=False), get_spec("llama3-8b")
    # Same architecture at the same sequence: the built-in counts its RMSNorm weights as matmul weights too.
    assert ours.training_flops_per_token(8192) == builtin.training_flops_per_token(8192)
    moe = hf.get_hf_spec("hf:qwen3-30b-a3b@2", cpu=False)
    counts = moe.counts()
    attention = 2 * 6 * 4096 * 32 * (128 + 128)
    assert moe.training_flops_per_token() == 6 * (counts.active - counts.embedding) + attention


def test_initial_weights_are_deterministic_and_from_init_py() -> None:
    spec = hf.get_hf_spec("hf:qwen3-8b", cpu=True)
    torch.manual_seed(1)
    first = spec.build(seed=3)
    torch.manual_seed(2)  # torch's RNG plays no part
    second = spec.build(seed=3)
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values()):
        assert torch.equal(a, b), name
    key = "model.layers.1.mlp.down_proj.weight"
    u = init.uniform_open(0, 4, seed=3, key=key, device=torch.device("cpu")).tolist()
    expected = [statistics.NormalDist(0.0, 0.02).inv_cdf(x) for x in u]
    assert first.get_parameter(key).flatten()[:4].tolist() == pytest.approx(expected, rel=1e-6, abs=1e-9)
    assert not torch.equal(first.get_parameter(key), spec.build(seed=4).get_parameter(key))
    assert torch.all(first.model.norm.weight == 1) and torch.all(first.model.layers[0].self_attn.q_norm.weight == 1)
    inv_freq = first.model.rotary_emb.inv_freq
    assert inv_freq.device.type == "cpu"
    assert inv_freq.tolist() == pytest.approx([1e6 ** (-i / 32) for i in range(0, 32, 2)], rel=1e-6)


def test_gemma_norms_start_at_zero_and_glm_biases_at_zero_and_ties_hold() -> None:
    gemma = hf.get_hf_spec("hf:gemma3-27b", cpu=True).build(seed=0)
    assert torch.all(gemma.model.layers[0].input_layernorm.weight == 0)  # Gemma's RMSNorm scales by 1 + weight
    assert gemma.lm_head.weight is gemma.model.embed_tokens.weight
    assert gemma.model.embed_tokens.embed_scale.item() == pytest.approx(math.sqrt(128))
    glm = hf.get_hf_spec("hf:glm-4.5", cpu=True).build(seed=0)
    assert torch.all(glm.model.layers[0].self_attn.q_proj.bias == 0)
    deepseek = hf.get_hf_spec("hf:deepseek-v3", cpu=True).build(seed=0)
    assert torch.all(deepseek.model.layers[1].mlp.gate.e_score_correction_bias == 0)
    assert all(torch.isfinite(p).all() for p in deepseek.parameters())


def test_built_counts_are_the_specs() -> None:
    for name in ("hf:deepseek-v3", "hf:mixtral-8x7b", "hf:gemma3-27b"):
        spec = hf.get_hf_spec(name, cpu=True)
        assert sum(p.numel() for p in spec.build(seed=0).parameters()) == spec.param_count, name


@pytest.mark.parametrize(("name", "seq_len"), [("hf:llama3.1-8b", 16), ("hf:qwen3-30b-a3b", 32)])
def test_a_tiny_hf_model_trains(name: str, seq_len: int) -> None:
    from pytest_gpuperf.training.corpus import MarkovChain
    from pytest_gpuperf.training.workload import run_seed

    spec = hf.get_hf_spec(name, cpu=True)
    chain = MarkovChain.random(vocab_size=spec.vocab_size, seed=0)
    run = run_seed(spec, seed=0, precision="fp32", device="cpu", steps=30, lr=3e-3,
                   batches=lambda step: chain.batch(step, batch_size=4, seq_len=seq_len))  # fmt: skip
    assert run.losses[0] == pytest.approx(math.log(256), abs=0.1)  # random init predicts near uniform
    assert sum(run.losses[-5:]) / 5 < run.losses[0] - 0.5


def test_lora_through_peft_trains_only_the_adapters() -> None:
    from pytest_gpuperf.training.workload import build_prepared

    spec = hf.get_hf_spec("hf:llama3.1-8b+lora", cpu=True)
    fields = spec.fields
    d, q, kv = fields["hidden_size"], fields["num_attention_heads"] * 32, fields["num_key_value_heads"] * 32
    f = fields["intermediate_size"]
    # every linear of the layers on the CPU cut: q, k, v, o, gate, up, down
    expected = spec.n_layers * spec.lora_rank * ((d + q) + 2 * (d + kv) + (q + d) + 3 * (d + f))
    assert spec.trainable_param_count == expected and spec.is_lora and spec.family == "dense"
    full = hf.get_hf_spec("hf:llama3.1-8b+lora", cpu=False)  # attention only at full width (MLPerf's recipe)
    assert full.trainable_param_count == 32 * 16 * ((4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096))
    model = spec.build(seed=0)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert sum(p.numel() for p in trainable.values()) == expected
    assert all(".lora_A." in n or ".lora_B." in n for n in trainable)
    tokens = torch.randint(0, spec.vocab_size, (2, 16))
    spec.loss(model, tokens, tokens).backward()
    assert {n for n, p in model.named_parameters() if p.grad is not None} == set(trainable)
    # The fine-tune path: a pretrained base (plain names) loaded, then adapters put on in place.
    state = spec.base_spec().build(seed=5).state_dict()
    prepared = build_prepared(spec, seed=1, precision="fp32", device="cpu", state=state)
    base = prepared.model.get_submodule("model.layers.0.self_attn.q_proj")
    assert torch.equal(base.base_layer.weight, state["model.layers.0.self_attn.q_proj.weight"])
    assert torch.all(base.lora_B["default"].weight == 0)


def test_the_hf_engine_matches_plain_greedy_decoding() -> None:
    from pytest_gpuperf.inference.engine import make_prompts, sequential_greedy
    from pytest_gpuperf.inference.hf_engine import HFEngine, HFLogits
    from pytest_gpuperf.inference.requests import Request

    model = HFLogits(hf.get_hf_spec("hf:gemma3-27b", cpu=True).build(seed=0).eval())
    prompts = make_prompts(count=2, length=20, vocab_size=256, seed=1) + make_prompts(
        count=1, length=9, vocab_size=256, seed=2
    )
    engine = HFEngine(model, max_len=40)
    requests = [Request(id=i, prompt=p, max_new_tokens=6) for i, p in enumerate(prompts)]
    requests.append(Request(id=9, prompt=(1,) * 39, max_new_tokens=2))
    done = engine.generate(requests, concurrency=2)
    # Mixed prompt lengths share a left-padded wave; Gemma's 16-token sliding window is crossed.
    for completion, prompt in zip(done, prompts):
        assert completion.error is None and completion.tokens == sequential_greedy(model, prompt, 6)
    assert "exceed the engine's max_len 40" in (done[3].error or "")
    assert engine.waves == [2, 1] and engine.decode_steps == 10


def test_the_hf_engine_in_an_open_loop_waves_only_what_is_due() -> None:
    """A virtual clock: requests due at 0, 0, 0 and 10 s with a cap of 2. The first wave takes two of the three
    due, the third waits for the next wave (its latency from ``scheduled`` holds that wait), and the engine sleeps
    until the fourth is due."""
    from pytest_gpuperf.inference.engine import make_prompts
    from pytest_gpuperf.inference.hf_engine import HFEngine, HFLogits
    from pytest_gpuperf.inference.requests import Request

    now = [100.0]

    def clock() -> float:
        now[0] += 0.001  # every reading takes 1 ms of virtual time
        return now[0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    model = HFLogits(hf.get_hf_spec("hf:llama3.1-8b", cpu=True).build(seed=0).eval())
    prompts = make_prompts(count=4, length=8, vocab_size=256, seed=3)
    requests = [Request(id=i, prompt=p, max_new_tokens=3) for i, p in enumerate(prompts)]
    engine = HFEngine(model, max_len=16, clock=clock, sleep=sleep)
    done = engine.generate(requests, concurrency=2, schedule=[0.0, 0.0, 0.0, 10.0])
    assert engine.waves == [2, 1, 1]
    began = done[0].scheduled
    assert began is not None and [d.scheduled for d in done] == [began, began, began, began + 10.0]
    assert all(d.error is None and len(d.tokens) == 3 for d in done)
    assert done[2].sent >= done[0].token_times[-1]  # queued behind the first wave
    assert done[3].sent >= began + 10.0  # slept until due
    with pytest.raises(ValueError, match="nondecreasing"):
        engine.generate(requests, concurrency=2, schedule=[1.0, 0.0, 0.0, 0.0])


def test_a_users_config_builds_like_a_shipped_one(tmp_path: Path) -> None:
    fields, _ = hf.read_config("llama3.1-8b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    spec = hf.get_hf_spec(f"hf:{path}@2", cpu=False)
    assert spec.n_layers == 2 and spec.source == str(path) and spec.d_model == 4096


def test_bad_configs_give_one_line(tmp_path: Path) -> None:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{")
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"model_type": "no-such-arch", "num_hidden_layers": 2}))
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": "two"}))
    cases = {
        f"hf:{wrong}": "transformers rejects the configuration .*num_hidden_layers",
        "hf:llama3.1-8b@0": "cut to 1..32",
        f"hf:{tmp_path / 'missing.json'}": "no such file",
        f"hf:{bad_json}": "not valid JSON",
        f"hf:{unknown}": "model_type 'no-such-arch' is unknown",
        "hf:nope": "no shipped configuration hf:nope",
    }
    for name, words in cases.items():
        with pytest.raises(hf.HFModelError, match=words) as error:
            hf.get_hf_spec(name, cpu=True)
        assert "\n" not in str(error.value)


def test_without_transformers_the_option_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpuperf.core.config.settings import SettingError
    from pytest_gpuperf.training.plugin import parse_models

    monkeypatch.setitem(__import__("sys").modules, "transformers", None)
    with pytest.raises(SettingError, match=r"pip install 'pytest-gpuperf\[hf\]'"):
        parse_models("hf:llama3.1-8b")


def test_a_bad_hf_path_stops_the_run_with_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing(model):\n    pass\n")
    result = pytester.runpytest("--gpuperf-models", f"hf:{pytester.path / 'nope' / 'config.json'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert "nope/config.json: no such file" in text and "Traceback" not in text
    assert len([line for line in text.splitlines() if line.strip()]) == 1


def test_hf_models_parametrize_the_model_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpuperf_models("moe")
        def test_moe(model):
            assert model.family == "moe" and model.d_model == 128

        @pytest.mark.gpuperf_models("lora")
        def test_lora(model):
            assert model.is_lora
        """
    )
    result = pytester.runpytest(
        "--gpuperf-models", "hf:qwen3-8b,hf:qwen3-30b-a3b,hf:llama3.1-8b+lora", "--gpuperf-tier", "cpu", "-v"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_moe?hf:qwen3-30b-a3b? PASSED*", "*test_lora?hf:llama3.1-8b+lora? PASSED*"])


def test_gpuperf_models_lists_counts(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_gpuperf.cli.main import main

    assert main(["models", "hf:llama3.1-8b", "hf:mixtral-8x7b@2", "--format", "json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["hf:llama3.1-8b"]["param_count"] == 8_030_261_248
    assert rows["hf:mixtral-8x7b@2"]["active_param_count"] == 12_879_925_248  # the full model's
    assert rows["hf:mixtral-8x7b@2"]["cpu_cut"].startswith("2 of 32 layers, width 128")
    assert main(["models", "hf:nope"]) == 2
    assert "no shipped configuration hf:nope" in capsys.readouterr().err


def test_gpuperf_models_without_transformers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gpuperf.cli.main import main

    monkeypatch.setitem(__import__("sys").modules, "transformers", None)
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "tiny-llama" in out and "hf:deepseek-v3" in out and "pip install 'pytest-gpuperf[hf]'" in out


def test_the_inference_suite_serves_hf_models(pytester: pytest.Pytester) -> None:
    """``--gpuperf-models hf:...`` makes the shipped inference tests serve that model instead of the tier's, and
    its parity runs through HFEngine: against the committed golden on this project's CPU type, else skipped."""
    import pytest_gpuperf.suites

    suite = Path(pytest_gpuperf.suites.__file__).parent / "test_inference.py"
    result = pytester.runpytest_subprocess(
        str(suite), "-m", "perf", "-k", "parity and cpu", "-p", "no:cacheprovider", "-rs", "-v",
        "--gpuperf-models", "hf:qwen3-30b-a3b", "--gpuperf-baselines", str(pytester.path / "baselines"),
        "--rootdir", str(suite.parent),
    )  # fmt: skip
    result.stdout.fnmatch_lines(["*test_output_parity?hf:qwen3-30b-a3b-cpu? [PS]*"])
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("skipped", 0) == 1 and result.ret == 0, result.stdout.str()
