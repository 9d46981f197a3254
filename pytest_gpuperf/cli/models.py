"""``gpuperf models``: the model names ``--gpuperf-models`` takes, with their source and parameter counts.

Built-in specs (``models/registry.py``) count their parameters in closed form; the shipped Hugging Face
configurations (``models/hf_configs/``) and any ``hf:PATH/config.json`` given on the command line are built on
torch's meta device by transformers and their parameters summed, which needs torch and transformers: without
them their rows say what to install. Counts are of the full model; ``cpu cut`` is what the CPU tier builds.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_gpuperf.cli.tables import render, write_output

COLUMNS = (
    ("name", "name"),
    ("kind", "kind"),
    ("params", "params"),
    ("active_params", "active"),
    ("published", "published"),
    ("cpu_cut", "cpu cut"),
    ("source", "source"),
)


def _billions(count: int | None) -> str | None:
    return None if count is None else f"{count / 1e9:.2f}B" if count >= 1e8 else f"{count / 1e6:.2f}M"


def builtin_rows() -> list[dict[str, Any]]:
    from pytest_gpuperf.models.registry import SPECS

    rows = []
    for spec in SPECS.values():
        tiny = spec.name.startswith("tiny-")
        rows.append({
            "name": spec.name, "kind": f"built-in {spec.family}" + (" lora" if spec.is_lora else ""),
            "param_count": spec.param_count, "active_param_count": spec.active_param_count,
            "params": _billions(spec.param_count), "active_params": _billions(spec.active_param_count),
            "published": None,
            "cpu_cut": "none: the CPU tier's own model" if tiny else "none (cut layers with @N)",
            "source": spec.source,
        })  # fmt: skip
    return rows


def hf_row(name: str, *, counts: bool) -> dict[str, Any]:
    """One ``hf:`` model's row; ``counts=False`` leaves the parameter counts out (no torch/transformers)."""
    from pytest_gpuperf.models import hf

    fields, meta = hf.read_config(hf.split_name(name)[0])
    published = meta.get("published_params")
    published_active = meta.get("published_active_params")
    row: dict[str, Any] = {
        "name": name, "kind": f"hf {fields['model_type']}", "source": meta.get("source", name[len(hf.PREFIX) :]),
        "published_params": published, "published_active_params": published_active,
        "published_source": meta.get("published_params_source"),
        "published": "/".join(_billions(v) or "-" for v in (published, published_active) if v) or None,
        "param_count": None, "active_param_count": None, "params": None, "active_params": None, "cpu_cut": None,
    }  # fmt: skip
    if counts:
        full = hf.get_hf_spec(name, cpu=False).full_counts()
        cpu = hf.get_hf_spec(name, cpu=True)
        row.update(
            param_count=full.total,
            active_param_count=full.active,
            params=_billions(full.total),
            active_params=_billions(full.active),
            cpu_cut=f"{cpu.cut}: {cpu.param_count:,} params",
            cpu_cut_fields=cpu.fields,
        )
    return row


def _have_hf_stack() -> bool:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def run(args: argparse.Namespace) -> int:
    from pytest_gpuperf.cli.loading import InputError
    from pytest_gpuperf.models import hf

    counts = _have_hf_stack()
    wanted = list(args.names) or hf.shipped_names()
    notes = []
    rows = [] if args.names else builtin_rows()
    for name in wanted:
        if not hf.is_hf_name(name):
            raise InputError(f"{name!r}: give hf:NAME or hf:PATH/config.json (built-in names are always listed)")
        try:
            rows.append(hf_row(name, counts=counts))
        except hf.HFModelError as error:
            raise InputError(str(error)) from None
    if not counts:
        notes.append(f"parameter counts of hf: models need torch and transformers: {hf.INSTALL_HINT}")
    notes.append(
        "params/active: the full model (active: routed experts at top-k of E); hf: counts built on the meta device "
        "by transformers; cpu cut: the layer and width cut the CPU tier builds (models/hf.py)"
    )
    text = render(title="gpuperf models", columns=COLUMNS, rows=rows, notes=notes, fmt=args.format)
    write_output(text, Path(args.output) if args.output else None)
    return 0
