"""The suite's model as a Hugging Face model folder that a serving engine loads: config, tokenizer, weights.

A launched server reads a folder, never the registry: this module writes one from a registry spec (transformers'
own config classes) or from an ``hf:`` spec (``write_hf_model_folder``). Invariants: nothing is downloaded; the
tokenizer is a WordLevel vocabulary ``t0 .. t{V-1}`` with no special tokens, so text and token ids map one to one;
an ``hf:`` spec's weights are the in-process path's own, so served and in-process greedy tokens can be compared,
while a registry model's are random (vLLM and SGLang make their own). transformers and torch are imported only
when a folder is written. ``python -m pytest_gpuperf.inference.model_folder FOLDER`` writes one for a server run
by hand (docs/inference.md says why each choice).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuperf.models.hf import HFSpec
    from pytest_gpuperf.models.registry import ModelSpec

TOKENIZER_FILE = "tokenizer.json"


def token_word(token_id: int) -> str:
    """The text of one token of the local tokenizer."""
    return f"t{token_id}"


def hf_config_dict(spec: ModelSpec, *, max_len: int, dtype: str) -> dict[str, Any]:
    """The Hugging Face config of a registry model (its dense or MoE Llama-style architecture).

    LoRA specs serve their base model: a server measures the merged weights, which have the base's shape."""
    common: dict[str, Any] = {
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "intermediate_size": spec.ffn_dim,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_kv_heads,
        "rms_norm_eps": spec.norm_eps,
        "rope_theta": spec.rope_theta,
        "max_position_embeddings": max(max_len, spec.max_seq_len),
        "tie_word_embeddings": spec.tie_embeddings,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
        "torch_dtype": dtype,
    }
    if spec.family == "llama":
        return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **common}
    if spec.family == "moe":
        return {
            "model_type": "mixtral",
            "architectures": ["MixtralForCausalLM"],
            "num_local_experts": spec.n_experts,
            "num_experts_per_tok": spec.top_k,
            **common,
        }
    raise ValueError(
        f"model {spec.name!r} (family {spec.family!r}) has no Hugging Face architecture here: a launched "
        "engine serves the llama and moe families of the registry"
    )


def write_model_folder(path: Path, spec: ModelSpec, *, max_len: int, dtype: str, weights: bool, seed: int = 0) -> Path:
    """Write config.json, the local tokenizer and (``weights``) random weights of ``spec`` into ``path``."""
    from transformers import AutoConfig

    path.mkdir(parents=True, exist_ok=True)
    values = hf_config_dict(spec, max_len=max_len, dtype=dtype)
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    write_tokenizer(path, vocab_size=spec.vocab_size, max_len=config.max_position_embeddings)
    if weights:
        import torch
        from transformers import AutoModelForCausalLM

        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
        model.save_pretrained(path)
    else:
        config.save_pretrained(path)
    (path / "gpuperf-model.json").write_text(json.dumps({"spec": spec.name, "seed": seed, "weights": weights}))
    return path


def write_tokenizer(path: Path, *, vocab_size: int, max_len: int) -> None:
    """The local WordLevel tokenizer ``t0 .. t{vocab_size-1}`` (module docstring), saved into ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token_word(i): i for i in range(vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=token_word(0)))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder joins words with spaces, so a streamed token decodes to " t123" (one word each).
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=max_len).save_pretrained(path)


SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id")


def hf_folder_name(spec: HFSpec, *, dtype: str, seed: int) -> str:
    """The cache key of an ``hf:`` spec's folder as a file name: (name, cut, dtype, seed), plus a digest of the
    cut configuration (a user's config.json path becomes a readable tail and the digest tells files apart)."""
    cut = "cpu-cut" if spec.width_cut else "layer-cut"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", spec.name.removeprefix("hf:").replace("@", "-at-")).strip("-.")[-48:]
    digest = hashlib.sha256(f"{spec.name}\0{spec.fields_json}".encode()).hexdigest()[:10]
    return f"hf-{slug}-{cut}-{dtype}-seed{seed}-{digest}"


def write_hf_model_folder(
    path: Path, spec: HFSpec, *, dtype: str, weights: bool, seed: int = 0, device: str = "cpu"
) -> Path:
    """Write an ``hf:`` spec's config, the local tokenizer sized to its vocabulary and (``weights``) the weights
    ``spec.build(seed=seed)`` gives in process, in ``dtype``, into ``path`` (built on ``device``, then freed)."""
    path.mkdir(parents=True, exist_ok=True)
    config = spec.config()
    write_tokenizer(path, vocab_size=spec.vocab_size, max_len=int(config.max_position_embeddings))
    if weights:
        import torch

        # A +lora spec serves its base: the adapters' B starts at zero, so the merged weights are the base's and
        # its tokens are the in-process +lora model's (a saved peft wrapper would not load as the architecture).
        model: Any = spec.base_spec().build(seed=seed, device=device, dtype=getattr(torch, dtype))
        for owner in (model.config, model.generation_config):
            for key in SPECIAL_TOKENS:
                setattr(owner, key, None)
        model.save_pretrained(path)
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()  # the server about to start needs the device's memory
    else:
        for key in SPECIAL_TOKENS:
            setattr(config, key, None)
        config.dtype = dtype
        config.save_pretrained(path)
    meta = {"spec": spec.name, "cut": spec.cut, "seed": seed, "dtype": dtype, "weights": weights}
    (path / "gpuperf-model.json").write_text(json.dumps(meta))
    return path


class TokenCodec:
    """Token ids <-> text with a model folder's ``tokenizer.json`` (``tokenizers`` only, no transformers)."""

    def __init__(self, tokenizer_file: Path) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))

    def decode(self, ids: list[int] | tuple[int, ...]) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=False))

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)


def main(argv: list[str] | None = None) -> int:
    """Write a registry model's folder (config, local tokenizer, random weights) for a server run by hand."""
    import argparse
    import sys

    from pytest_gpuperf.models.registry import get_spec

    parser = argparse.ArgumentParser(
        prog="python -m pytest_gpuperf.inference.model_folder", description=(main.__doc__ or "").split("\n")[0]
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("--model", default="tiny-llama", help="registry model, llama or moe family")
    parser.add_argument("--max-len", type=int, default=4096, help="the config's max_position_embeddings")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--no-weights", action="store_true", help="config and tokenizer only (vLLM/SGLang dummy)")
    args = parser.parse_args(argv)
    if (args.folder / "config.json").exists():
        print(f"{args.folder}: already holds a config.json; give an empty or new folder", file=sys.stderr)
        return 2
    try:
        spec = get_spec(args.model)
        write_model_folder(args.folder, spec, max_len=args.max_len, dtype=args.dtype, weights=not args.no_weights)
    except (KeyError, ValueError) as error:
        reason = error.args[0] if error.args else error
        print(f"--model {args.model}: {reason}", file=sys.stderr)
        return 2
    print(args.folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
