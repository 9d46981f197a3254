"""``transformers serve`` with the inference suite's injected slowdown (``--gpuperf-inject-slowdown inference=PCT``):
each forward of the served model is run again, PCT% more forwards in all (100: every prefill and decode step twice),
so a test can show that a slower server is caught. servers.py launches it in place of ``transformers serve``:
``python -m pytest_gpuperf.inference.slowed_serve serve FOLDER ...``, with the amount in ``GPUPERF_INJECT_SLOWDOWN``.

transformers serve runs the model in a process it spawns; a spawned child imports this module again (as
``__mp_main__``), so the patch is made at import, in every process, and applies where a model is loaded. The extra
forward is a real one, on the same inputs and the same KV cache; the tokens it appends to a growing cache are cut
off again (writes into a static or paged cache land on the same slots), so the served tokens do not change.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pytest_gpuperf.core.config.settings import SettingError, parse_slowdowns

SUITE = "inference"


def injected() -> float:
    """The fraction of extra forwards ``GPUPERF_INJECT_SLOWDOWN`` asks of the inference suite (0: none)."""
    raw = os.environ.get("GPUPERF_INJECT_SLOWDOWN", "")
    if not raw.strip():
        return 0.0
    try:
        return parse_slowdowns(raw).get(SUITE, 0.0)
    except SettingError as error:
        sys.exit(f"GPUPERF_INJECT_SLOWDOWN={raw!r}: {error}")


def slow_down(model: Any, fraction: float) -> None:
    """Run ``model``'s forward ``1 + fraction`` times per call on average (whole extra forwards, owed across calls)."""
    forward = model.forward
    owed = [0.0]

    def slowed(*args: Any, **kwargs: Any) -> Any:
        owed[0] += fraction
        while owed[0] >= 1:
            owed[0] -= 1
            # the KV cache, whatever its argument's name (transformers 5.x's generate passes ``cache=``)
            cache: Any = next((value for value in kwargs.values() if hasattr(value, "get_seq_length")), None)
            length = cache.get_seq_length() if cache is not None else None
            forward(*args, **kwargs)
            added = cache.get_seq_length() - length if length is not None else 0
            if added > 0 and hasattr(cache, "crop"):
                cache.crop(-added)
        return forward(*args, **kwargs)

    model.forward = slowed


def install(fraction: float) -> None:
    """Slow every model that can generate as ``from_pretrained`` returns it."""
    from transformers import PreTrainedModel

    loader = PreTrainedModel.from_pretrained.__func__  # type: ignore[attr-defined]

    def from_pretrained(cls: Any, *args: Any, **kwargs: Any) -> Any:
        model = loader(cls, *args, **kwargs)
        if getattr(model, "can_generate", lambda: False)():
            slow_down(model, fraction)
        return model

    PreTrainedModel.from_pretrained = classmethod(from_pretrained)  # type: ignore[assignment,method-assign]


FRACTION = injected()
if FRACTION > 0:
    install(FRACTION)


def main() -> None:
    from transformers.cli.transformers import main as transformers_main

    sys.argv[0] = "transformers"
    transformers_main()


if __name__ == "__main__":
    main()
