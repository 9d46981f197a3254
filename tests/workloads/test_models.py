"""Unit tests of the model families and the spec registry (tiny and meta-device builds only: no real-dim
weights are ever materialised here)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from pytest_gpuperf.models import SPECS, ModelSpec, get_spec
from pytest_gpuperf.models.llama import GPU_KEY_MULTIPLE, KVCache, LlamaConfig, Transformer
from pytest_gpuperf.models.lora import LoRALinear, apply_lora, lora_parameters
from pytest_gpuperf.models.moe import load_balancing_loss


def _numel(model: torch.nn.Module, trainable: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable)


SMALL_GQA_TIED = ModelSpec(
    name="t-tied", family="llama", vocab_size=96, d_model=64, n_layers=3, n_heads=8, n_kv_heads=2, ffn_dim=160,
    seq_len=16, max_seq_len=32, tie_embeddings=True,
)  # fmt: skip


@pytest.mark.parametrize(
    "spec",
    [SPECS["tiny-llama"], SPECS["tiny-moe"], SPECS["tiny-lora"], SMALL_GQA_TIED, SPECS["tiny-moe"].with_layers(1)],
    ids=lambda s: s.name,
)
def test_param_count_formula_matches_built_module(spec: ModelSpec) -> None:
    model = spec.build(seed=0)
    assert _numel(model) == spec.param_count
    assert _numel(model, trainable=True) == spec.trainable_param_count


@pytest.mark.parametrize("name", ["llama3-8b", "mixtral-8x7b", "llama2-70b-lora", "llama3.1-405b@2"])
def test_param_count_formula_matches_real_dims_built_on_meta(name: str) -> None:
    # The meta device allocates nothing, so the real module structure is checked at full width for free.
    spec = get_spec(name)
    model = spec.build(seed=0, device="meta")
    assert _numel(model) == spec.param_count
    assert _numel(model, trainable=True) == spec.trainable_param_count


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("llama3-8b", 8.03e9, None),
        ("llama3-70b", 70.6e9, None),
        ("llama3.1-405b", 405.8e9, None),
        ("mixtral-8x7b", 46.7e9, 12.9e9),
        ("mixtral-8x22b", 141e9, 39e9),
        ("llama2-70b-lora", 69.0e9, None),  # Llama 2 70B (68.98B) plus 65.5M adapters
    ],
)
def test_param_counts_match_published_sizes(name: str, total: float, active: float | None) -> None:
    spec = get_spec(name)
    assert spec.param_count == pytest.approx(total, rel=0.005)
    if active is not None:
        assert spec.active_param_count == pytest.approx(active, rel=0.005)


def test_training_flops_follow_palm_formula() -> None:
    spec = get_spec("tiny-llama")
    matmul_params = spec.param_count - spec.vocab_size * spec.d_model  # the embedding lookup is no matmul
    assert spec.training_flops_per_token() == 6 * matmul_params + 12 * 2 * 128 * 64
    assert spec.training_flops_per_token(seq_len=128) - spec.training_flops_per_token() == 12 * 2 * 128 * 64
    # MoE counts the router and top_k of n_experts; LoRA's frozen weights skip the weight gradient
    moe = get_spec("mixtral-8x7b")
    assert 6 * moe.active_param_count < moe.training_flops_per_token() < 6 * moe.param_count
    lora = get_spec("llama2-70b-lora")
    base_matmul = lora.base_spec().param_count - lora.vocab_size * lora.d_model
    adapters = lora.trainable_param_count
    attention = 12 * lora.n_layers * lora.d_model * lora.seq_len
    assert lora.training_flops_per_token() == 4 * base_matmul + 6 * adapters + attention


def test_build_is_deterministic_by_seed() -> None:
    spec = get_spec("tiny-moe")
    a, b, c = spec.build(seed=3), spec.build(seed=3), spec.build(seed=4)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters()))
    # building does not disturb the caller's RNG stream
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    spec.build(seed=9)
    assert torch.equal(torch.rand(3), expected)


def test_with_layers_and_names() -> None:
    full = get_spec("llama3-70b")
    proxy = get_spec("llama3-70b@2")
    assert proxy == full.with_layers(2)
    assert (proxy.name, proxy.n_layers, proxy.full_n_layers, proxy.is_proxy) == ("llama3-70b@2", 2, 80, True)
    per_layer = (full.param_count - proxy.param_count) / 78
    assert proxy.with_layers(3).param_count - proxy.param_count == per_layer
    assert proxy.with_layers(80).name == "llama3-70b"
    with pytest.raises(ValueError, match="1..80"):
        full.with_layers(81)


def test_unknown_spec_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known: llama3-8b, .*tiny-llama"):
        get_spec("llama4-1t")
    with pytest.raises(KeyError, match="layer count"):
        get_spec("llama3-8b@two")


def test_registry_and_precision_import_without_torch() -> None:
    code = (
        "import sys, pytest_gpuperf.models, pytest_gpuperf.models.registry, pytest_gpuperf.training.precision, "
        "pytest_gpuperf.training.corpus; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_attention_is_causal_and_bf16_forward_works() -> None:
    model = get_spec("tiny-llama").build(seed=0)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 256
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert torch.equal(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])
    # RoPE tables stay fp32 buffers; forward casts them (DeepSpeed bf16 does not cast buffers)
    bf16 = get_spec("tiny-llama").build(seed=0, dtype=torch.bfloat16)
    bf16.rope.cos.data = bf16.rope.cos.float()
    bf16.rope.sin.data = bf16.rope.sin.float()
    assert bf16(tokens).dtype == torch.bfloat16


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-moe"])
def test_kv_cache_prefill_then_decode_matches_full_forward(name: str) -> None:
    model = get_spec(name).build(seed=1).eval()
    tokens = torch.randint(0, 256, (3, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        cache = KVCache.for_model(model, batch_size=3, max_len=16)
        steps = [model(tokens[:, :7], cache=cache, start_pos=0)]
        for pos in range(7, 12):
            steps.append(model(tokens[:, pos : pos + 1], cache=cache, start_pos=pos))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)


def test_kv_cache_rows_at_different_positions() -> None:
    # continuous batching: row 0 has 6 tokens of context, row 1 only 3; one decode step with start_pos (2,)
    model = get_spec("tiny-llama").build(seed=2).eval()
    seqs = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        cache = KVCache.for_model(model, batch_size=2, max_len=8)
        model(seqs[:, :6], cache=cache, start_pos=0)  # row 1's positions 3..5 are stale after the next line
        cache_row1 = KVCache.for_model(model, batch_size=1, max_len=8)
        model(seqs[1:, :3], cache=cache_row1, start_pos=0)
        for layer in range(2):
            cache.k[layer][1] = cache_row1.k[layer][0]
            cache.v[layer][1] = cache_row1.v[layer][0]
        step_tokens = torch.stack([seqs[0, 6], seqs[1, 3]])[:, None]
        decoded = model(step_tokens, cache=cache, start_pos=torch.tensor([6, 3]))
        want0 = model(seqs[:1, :7])[:, -1]
        want1 = model(seqs[1:, :4])[:, -1]
    torch.testing.assert_close(decoded[:, 0], torch.cat([want0, want1]), rtol=1e-4, atol=1e-5)


class _LargestOutput(TorchDispatchMode):
    """Elements of the largest tensor any aten op of a region produced, views of the weights left out."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() not in self.weights:
                self.numel = max(self.numel, tensor.numel())
        return out


@pytest.mark.parametrize("key_multiple", [1, 4])
def test_grouped_query_cache_attention_matches_full_forward_without_copying_the_cache(key_multiple: int) -> None:
    # 8 query heads share 2 kv heads (4 per group, as in Llama 3). A chunk at start_pos > 0 with several
    # queries and a decode step with rows at different positions both take the masked path, whose folded
    # query groups must pair each query head with the kv head repeat_interleave would give it. With
    # key_multiple 4 that path attends over 12 keys at ends 9..12, the mask hiding the ones not written yet.
    model = SMALL_GQA_TIED.build(seed=4).eval()
    tokens = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = model(tokens)
        cache = KVCache.for_model(model, batch_size=2, max_len=16, key_multiple=key_multiple)
        parts = [model(tokens[:, :5], cache=cache, start_pos=0), model(tokens[:, 5:9], cache=cache, start_pos=5)]
        for pos in range(9, 11):
            parts.append(model(tokens[:, pos : pos + 1], cache=cache, start_pos=torch.tensor([pos, pos])))
        with _LargestOutput(model) as largest:
            parts.append(model(tokens[:, 11:12], cache=cache, start_pos=torch.tensor([11, 11])))
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-4, atol=1e-5)
    # A decode step must read the cache as it is: repeating its kv heads for the query heads would make a
    # tensor 4x one layer's cache (it is what costs a long decode on a GPU), every step.
    assert largest.numel <= cache.k[0].numel()


def test_last_only_gives_the_last_position_of_a_full_forward() -> None:
    model = get_spec("tiny-llama").build(seed=6).eval()
    tokens = torch.randint(0, 256, (3, 9), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        full = model(tokens)
        cache = KVCache.for_model(model, batch_size=3, max_len=16)
        last = model(tokens, cache=cache, start_pos=0, last_only=True)
    assert last.shape == (3, 1, 256)
    torch.testing.assert_close(last, full[:, -1:], rtol=1e-4, atol=1e-5)


def test_kv_cache_rounds_the_keys_of_a_forward_onto_it_to_its_device_s_multiple() -> None:
    # A GPU pays per attention shape (docs/inference.md, GPU tier): off the CPU a cache rounds the attended key
    # length up to 256, so a decode sees a few shapes; the CPU keeps exact lengths (its baselines have them).
    assert KVCache.for_model(get_spec("tiny-llama").build(seed=0), batch_size=2).key_multiple == 1
    meta = get_spec("tiny-llama").build(seed=0, device="meta")
    cache = KVCache.for_model(meta, batch_size=4, max_len=600)
    assert cache.key_multiple == GPU_KEY_MULTIPLE == 256 and cache.rows(1, 3).key_multiple == 256
    assert [cache.key_length(end) for end in (1, 255, 256, 257, 512, 513, 600)] == [256, 256, 256, 512, 512, 600, 600]
    assert KVCache.for_model(meta, batch_size=1, max_len=600, key_multiple=1).key_length(257) == 257
    # A fresh prefill (end == its own length) keeps exactly its keys: its attention is the causal one.
    cpu = KVCache(n_layers=1, batch_size=1, max_len=600, n_kv_heads=1, head_dim=2, key_multiple=256)
    fresh = torch.arange(5)[None]
    assert cpu.update(0, torch.ones(1, 5, 1, 2), torch.ones(1, 5, 1, 2), fresh, 5)[0].shape[1] == 5
    step = torch.tensor([[5]])
    assert cpu.update(0, torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2), step, 6)[0].shape[1] == 256
    with pytest.raises(ValueError, match="key_multiple must be a positive int, got 0"):
        KVCache(n_layers=1, batch_size=1, max_len=8, n_kv_heads=1, head_dim=2, key_multiple=0)


def test_kv_cache_refuses_overflow() -> None:
    model = get_spec("tiny-llama").build(seed=0)
    cache = KVCache.for_model(model, batch_size=1, max_len=4)
    with pytest.raises(ValueError, match="max_len is 4"):
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache)


def test_load_balancing_loss_is_one_when_uniform_and_grows_with_imbalance() -> None:
    tokens, experts = 8, 4
    uniform = torch.full((tokens, experts), 0.25)
    balanced = torch.tensor([[0, 1], [2, 3]] * 4)
    assert load_balancing_loss(uniform, balanced, experts).item() == pytest.approx(1.0)
    skewed = torch.tensor([[0.7, 0.1, 0.1, 0.1]] * tokens)
    collapsed = torch.tensor([[0, 1]] * tokens)
    assert load_balancing_loss(skewed, collapsed, experts).item() == pytest.approx(4 * (0.5 * 0.7 + 0.5 * 0.1))


def test_moe_aux_loss_reaches_the_router() -> None:
    spec = get_spec("tiny-moe")
    model = spec.build(seed=0)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    logits, aux = model(tokens, return_aux_loss=True)
    assert aux.item() >= 2 * 1.0 - 1e-6  # two layers, each >= 1 (1 only when perfectly balanced)
    aux.backward()
    assert model.layers[0].feed_forward.gate.weight.grad.abs().sum() > 0
    dense_logits, dense_aux = get_spec("tiny-llama").build(seed=0)(tokens, return_aux_loss=True)
    assert dense_aux.item() == 0.0


def test_lora_starts_at_the_base_and_trains_only_adapters() -> None:
    spec = get_spec("tiny-lora")
    base = spec.base_spec().build(seed=0)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = base(tokens)
    wrapped = spec.apply_adapters(base)
    assert len(wrapped) == 2 * 7 and all(isinstance(base.get_submodule(n), LoRALinear) for n in wrapped)
    with torch.no_grad():
        torch.testing.assert_close(base(tokens), before, rtol=0, atol=0)
    trainable = [p for p in base.parameters() if p.requires_grad]
    assert {id(p) for p in trainable} == {id(p) for p in lora_parameters(base)}
    frozen = base.tok_embeddings.weight.clone()
    opt = torch.optim.SGD(trainable, lr=0.1)
    F.cross_entropy(base(tokens).flatten(0, 1), tokens.flatten()).backward()
    opt.step()
    assert torch.equal(base.tok_embeddings.weight, frozen)
    with torch.no_grad():
        assert not torch.allclose(base(tokens), before)


def test_apply_lora_bad_target_lists_linears() -> None:
    model = Transformer(LlamaConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=8,
                                    max_seq_len=4))  # fmt: skip
    with pytest.raises(ValueError, match=r"no nn.Linear named any of \['q_proj'\].*'wq'"):
        apply_lora(model, rank=2, alpha=4, targets=("q_proj",))


def test_meta_build_then_init_matches_direct_build() -> None:
    spec = get_spec("tiny-llama")
    direct = spec.build(seed=5)
    deferred = spec.build(seed=5, device="meta").to_empty(device="cpu")
    torch.manual_seed(5)
    deferred.init_weights()
    torch.testing.assert_close(deferred.rope.cos, direct.rope.cos)
    tokens = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(deferred(tokens)).all()


def test_moe_token_alignment_pads_each_experts_rows_and_changes_nothing_else() -> None:
    """fp8 training pads each expert's routed tokens to a multiple of 16 (torch._scaled_mm's need; an H200 run
    failed on 923 tokens): the padded model gives the same outputs and gradients, and each expert sees only
    multiples of 16 rows."""
    spec = get_spec("tiny-moe")
    tokens = torch.randint(0, spec.vocab_size, (2, 37), generator=torch.Generator().manual_seed(0))

    def run(alignment: int) -> tuple[torch.Tensor, list[torch.Tensor], list[int]]:
        model = spec.build(seed=0)
        rows: list[int] = []
        for layer in model.layers:
            layer.feed_forward.token_alignment = alignment
            for expert in layer.feed_forward.experts:
                expert.w1.register_forward_hook(lambda _m, args, _out: rows.append(args[0].shape[0]))
        logits = model(tokens)
        logits.square().mean().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None], rows

    plain_logits, plain_grads, plain_rows = run(1)
    padded_logits, padded_grads, padded_rows = run(16)
    assert any(n % 16 for n in plain_rows)  # the router's counts are not aligned by themselves
    assert padded_rows and all(n % 16 == 0 for n in padded_rows)
    assert torch.allclose(padded_logits, plain_logits, atol=1e-6)
    assert len(padded_grads) == len(plain_grads)
    for padded, plain in zip(padded_grads, plain_grads):
        assert torch.allclose(padded, plain, atol=1e-6)
