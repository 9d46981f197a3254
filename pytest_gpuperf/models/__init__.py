"""Model families in plain torch (``llama``, ``moe``, ``lora``) and the registry of named specs.

This package's ``__init__`` and ``registry`` do not import torch; the family modules do.
"""

from pytest_gpuperf.models.registry import SPECS, ModelSpec, get_spec, spec_names

__all__ = ["SPECS", "ModelSpec", "get_spec", "spec_names"]
