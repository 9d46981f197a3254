"""The suite's model as a Hugging Face model folder that a serving engine loads: config, tokenizer, weights.

A launched server (``transformers serve``, vLLM, SGLang) reads a folder, never the registry: this module
writes one from a registry spec (``models/registry.py``) with transformers' own config classes (LlamaConfig,
MixtralConfig), so the server runs the architecture the suite names. Nothing is downloaded, ever:

- the tokenizer is built here: a ``tokenizers`` WordLevel vocabulary of ``t0 .. t{V-1}`` split on whitespace,
  wrapped as ``PreTrainedTokenizerFast``. Token ids and text then map one to one (``[5, 7]`` <-> ``"t5 t7"``),
  so a server that takes text prompts only (``transformers serve``) sees exactly the token ids the suite drew,
  and each streamed text chunk tells how many tokens it carries. It has no special tokens at all: no BOS is
  prepended to a prompt and no EOS can end a generation early;
- weights: random (``from_config`` after ``torch.manual_seed``) and saved with ``save_pretrained`` where the
  engine loads them (transformers); vLLM and SGLang get the config and tokenizer only and make their own
  random weights (``--load-format dummy``), which skips gigabytes of writes for a 70B config.

transformers and torch are imported only when a folder is written. ``TokenCodec`` (text <-> ids with the
folder's tokenizer) needs the ``tokenizers`` package alone.

``python -m pytest_gpuperf.inference.model_folder FOLDER [--model tiny-llama] [--max-len 4096]`` writes the
folder a launched engine would get, for a server run by hand and attached with ``--gpuperf-engine openai:URL``
(docs/inference.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoConfig, PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    values = hf_config_dict(spec, max_len=max_len, dtype=dtype)
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    vocab = {token_word(i): i for i in range(spec.vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=token_word(0)))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder joins words with spaces, so a streamed token decodes to " t123" (one word each).
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, model_max_length=config.max_position_embeddings
    ).save_pretrained(path)
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
