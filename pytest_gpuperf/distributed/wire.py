"""The one place that serialises Python objects: messages between the launcher and the rank processes it
spawned itself (functions by reference, arguments, return values, tracebacks). Plain pickle over a pipe, not
multiprocessing's reducer, so tensors are copied instead of going through shared memory (/dev/shm files).

Nothing stored or read from disk goes through here: baselines, results and `gpuperf` inputs are JSON/XML data.
"""

from __future__ import annotations

import pickle
from typing import Any


def encode(message: Any) -> bytes:
    """Bytes for one message; raises what pickle raises for an object that cannot travel."""
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def decode(payload: bytes) -> Any:
    """The message sent by ``encode`` in a process of the same launch (never untrusted bytes)."""
    return pickle.loads(payload)
