"""Stable initial weights: the same seed gives the same model in every torch release (pinned values), with the
distribution the model asks for, keyed by parameter name."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from pytest_gpuperf.models import init  # noqa: E402
from pytest_gpuperf.models.llama import LlamaConfig, Transformer, init_rule  # noqa: E402
from pytest_gpuperf.models.registry import get_spec  # noqa: E402

# Computed once (torch 2.13.0+cpu) and reproduced bit for bit under torch 2.11.0+cu130: a torch release that
# changes them would change every golden recorded with this project.
PINNED_NORMAL = [
    0.005822438776767973,
    0.004298750010068902,
    -0.011800623187507955,
    -0.022504812906071266,
    -0.003067253254163092,
    0.00543429070608154,
]
PINNED_UNIFORM = [-0.38874203397426754, 0.11112033610697836, -0.3055174999171868, -0.3967963949544355]


def test_values_are_pinned_independently_of_torch_generators() -> None:
    torch.manual_seed(123)
    torch.rand(1000)  # consuming torch's own stream must change nothing
    normal = init.normal_(
        torch.empty(6, dtype=torch.float64), seed=0, key="layers.0.attention.wq.weight", std=0.02, truncate=3.0
    )
    uniform = init.uniform_(
        torch.empty(4, dtype=torch.float64), seed=7, key="layers.1.attention.wo.lora_a.weight", bound=0.5
    )
    assert normal.tolist() == pytest.approx(PINNED_NORMAL, rel=1e-12)
    assert uniform.tolist() == pytest.approx(PINNED_UNIFORM, rel=1e-12)


def test_chunked_fill_equals_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = init.normal_(torch.empty(1000, dtype=torch.float64), seed=3, key="w", std=1.0)
    monkeypatch.setattr(init, "_CHUNK", 97)
    chunked = init.normal_(torch.empty(1000, dtype=torch.float64), seed=3, key="w", std=1.0)
    assert torch.equal(whole, chunked)


def test_truncated_normal_has_the_asked_spread_and_bounds() -> None:
    n, std = 200_000, 0.02
    values = init.normal_(torch.empty(n, dtype=torch.float64), seed=1, key="w", std=std, truncate=3.0)
    truncated_sd = std * math.sqrt(1 - 6 * math.exp(-4.5) / math.sqrt(2 * math.pi) / math.erf(3 / math.sqrt(2)))
    assert abs(values.mean().item()) < 4 * truncated_sd / math.sqrt(n)
    assert values.std().item() == pytest.approx(truncated_sd, rel=0.01)
    assert values.abs().max().item() <= 3 * std
    assert values.abs().max().item() > 2.9 * std  # the tails are there, not clipped early
    untruncated = init.normal_(torch.empty(n, dtype=torch.float64), seed=1, key="w", std=1.0)
    assert untruncated.std().item() == pytest.approx(1.0, rel=0.01)
    assert untruncated.abs().max().item() > 4.0


def test_uniform_covers_its_bounds_and_keys_are_independent() -> None:
    n = 100_000
    a = init.uniform_(torch.empty(n, dtype=torch.float64), seed=1, key="a", bound=0.5)
    b = init.uniform_(torch.empty(n, dtype=torch.float64), seed=1, key="b", bound=0.5)
    other_seed = init.uniform_(torch.empty(n, dtype=torch.float64), seed=2, key="a", bound=0.5)
    assert a.min().item() >= -0.5 and a.max().item() <= 0.5
    assert a.std().item() == pytest.approx(1 / math.sqrt(12), rel=0.01)
    for other in (b, other_seed):
        assert abs(torch.corrcoef(torch.stack([a, other]))[0, 1].item()) < 0.02


def test_same_seed_same_model_whatever_torch_drew_before() -> None:
    spec = get_spec("tiny-llama")
    first = spec.build(seed=5)
    torch.manual_seed(99)
    torch.randn(4096)
    second = spec.build(seed=5)
    third = spec.build(seed=6)
    for (name, p1), p2, p3 in zip(first.named_parameters(), second.parameters(), third.parameters()):
        assert torch.equal(p1, p2), name
        if init_rule(name, first.config)[0] not in ("ones", "zeros"):
            assert not torch.equal(p1, p3), name


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-lora", "tiny-moe"])
def test_meta_build_then_init_equals_direct_build(name: str) -> None:
    spec = get_spec(name)
    direct = spec.build(seed=5)
    deferred = spec.build(seed=5, device="meta").to_empty(device="cpu")
    deferred.init_weights(seed=5)
    for (key, p1), p2 in zip(direct.named_parameters(), deferred.parameters()):
        assert torch.equal(p1, p2), key


def test_lora_base_weights_equal_the_base_models() -> None:
    lora = get_spec("tiny-lora")
    base = lora.base_spec().build(seed=5)
    adapted = lora.build(seed=5)
    base_weights = dict(base.named_parameters())
    for name, param in adapted.named_parameters():
        plain = name.replace(".base.weight", ".weight")
        if "lora_" not in name:
            assert torch.equal(param, base_weights[plain]), name
        elif "lora_b" in name:
            assert not param.any(), name
        else:  # nn.Linear's own default, U(+-1/sqrt(fan_in)), drawn from the stable hash
            fan_in = param.shape[1]
            assert param.abs().max().item() <= 1 / math.sqrt(fan_in)
            assert param.std().item() == pytest.approx(1 / math.sqrt(3 * fan_in), rel=0.25), name


def test_init_rule_scales_and_unknown_parameters() -> None:
    cfg = LlamaConfig(vocab_size=16, d_model=8, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=24, max_seq_len=4)
    assert init_rule("layers.0.attention.wq.weight", cfg) == ("truncated", 0.02)
    assert init_rule("layers.1.feed_forward.experts.3.w2.weight", cfg) == ("truncated", 0.02 / math.sqrt(4))
    assert init_rule("layers.0.attention.wo.base.weight", cfg) == ("truncated", 0.02 / math.sqrt(4))
    assert init_rule("layers.0.attention_norm.weight", cfg) == ("ones", 1.0)
    assert init_rule("output.weight", cfg) == ("truncated", 8**-0.5)
    with pytest.raises(ValueError, match="layers.0.attention.new_proj.weight"):
        init_rule("layers.0.attention.new_proj.weight", cfg)
    with pytest.raises(ValueError, match="bias"):
        init_rule("layers.0.attention.wq.bias", cfg)
    Transformer(cfg).init_weights(seed=0)  # every parameter of the model has a rule
