"""The spread between machines of one hardware key, as a fleet measured it (``gpuperf fleet --save-spread``).

A stored baseline recorded on another machine of the key is judged with this spread added to its noise
(``--gpuperf-machine-noise FILE``). A metric's figure is looked up by the test's id, then by the id without its
device parameter (``test_gemm[gpu3-bf16]`` -> ``test_gemm[bf16]``, as the fleet keys it), else the fleet's pooled
figure. Spreads are sds of log medians (about the relative spread: 0.019 is 1.9%). The file's fields:
docs/fleet.md. Reading needs no numpy, so the plugin resolves the setting before any test runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.core.store import schema
from pytest_gpuperf.core.store.schema import SchemaError

KIND = "gpuperf-fleet-spread"
SCHEMA_VERSION = 1
MAX_BYTES = 64 * 1024 * 1024
DEVICE_PARAM = re.compile(r"(cpu|gpu\d+|cuda(:\d+)?|rocm\d+)")
"""A test id's first parameter that names a local device (the acceptance suite's per-device parametrization)."""


class SpreadError(ValueError):
    """A spread file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineSpread:
    """A fleet's measured spread between machines of one hardware key."""

    source: str
    """The file it was read from, for messages."""
    hardware_key: str
    """The hardware key's slug it was measured on."""
    pooled: float
    """The whole fleet's figure (sd of log medians), for metrics the file does not hold."""
    nodes: int
    metrics: dict[tuple[str, str], float] = field(default_factory=dict, hash=False)
    """(test, metric) -> spread (left out of the hash: the settings holding it stay hashable)."""

    def lookup(self, test: str, metric: str) -> float:
        """The spread of one test's metric: its own, else that of the test without its device parameter, else
        the pooled figure."""
        found = self.metrics.get((test, metric))
        if found is None:
            found = self.metrics.get((without_device(test), metric))
        return self.pooled if found is None else found


def without_device(test: str, device: str | None = None) -> str:
    """``test_gemm[gpu3-bf16]`` -> ``test_gemm[bf16]``, ``test_copy[gpu0]`` -> ``test_copy``: the test id without
    its first parameter where that is ``device`` (or, with no device given, looks like one)."""
    if not test.endswith("]") or "[" not in test:
        return test
    base, _, params = test[:-1].partition("[")
    first, _, rest = params.partition("-")
    named = first == device if device is not None else DEVICE_PARAM.fullmatch(first) is not None
    if not named:
        return test
    return f"{base}[{rest}]" if rest else base


def build_document(
    *,
    version: str,
    created: str,
    hardware_key: str,
    nodes: int,
    units: int,
    pooled: float,
    metrics: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "kind": KIND,
        "schema": SCHEMA_VERSION,
        "tool": {"name": "pytest-gpuperf", "version": version},
        "created": created,
        "hardware_key": hardware_key,
        "nodes": nodes,
        "units": units,
        "pooled": pooled,
        "metrics": sorted(metrics, key=lambda entry: (entry["test"], entry["metric"])),
    }


def read_spread(path: Path) -> MachineSpread:
    """The spread file at ``path``; SpreadError naming it and the problem."""
    try:
        data = schema.read_file(path, limit=MAX_BYTES)
    except schema.UnreadableFile as error:
        raise SpreadError(str(error)) from None
    try:
        return parse_spread(schema.loads(data), str(path))
    except SchemaError as error:
        raise SpreadError(
            f"{path}: {error}; give a file written by `gpuperf fleet --save-spread`, or a percentage"
        ) from None


def parse_spread(document: Any, source: str) -> MachineSpread:
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise SchemaError(f"not a fleet spread file (its 'kind' is not {KIND!r})")
    if document.get("schema") != SCHEMA_VERSION:
        raise SchemaError(
            f"schema {schema.quote(document.get('schema'))} is not the supported spread schema {SCHEMA_VERSION}"
        )
    key = document.get("hardware_key")
    if not isinstance(key, str) or not schema.SLUG_PATTERN.fullmatch(key):
        raise SchemaError(f"'hardware_key' is {schema.quote(key)}, not a hardware key's slug")
    nodes = document.get("nodes")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 2:
        raise SchemaError(f"'nodes' is {schema.quote(nodes)}, not a count of at least 2 nodes")
    pooled = _spread(document.get("pooled"), "'pooled'")
    metrics: dict[tuple[str, str], float] = {}
    for index, entry in enumerate(schema.require_list(document.get("metrics"), "the document", "metrics")):
        where = f"metrics[{index}]"
        schema.require_object(entry, where, "metric")
        test = schema.text(entry.get("test"), where, "test")
        name = schema.text(entry.get("metric"), where, "metric")
        if (test, name) in metrics:
            raise SchemaError(f"{where}: test {schema.quote(test)} metric {schema.quote(name)} appears twice")
        metrics[(test, name)] = _spread(entry.get("spread"), f"{where} 'spread'")
    return MachineSpread(source=source, hardware_key=key, pooled=pooled, nodes=nodes, metrics=metrics)


def _spread(value: Any, where: str) -> float:
    if not schema.is_number(value) or not 0 < value < 1:
        raise SchemaError(f"{where} is {schema.quote(value)}, not a spread between 0 and 1 (exclusive)")
    return float(value)


def check_key(spread: MachineSpread, slug: str) -> None:
    """Refuse a spread measured on another hardware key than this run's."""
    if spread.hardware_key != slug:
        raise SpreadError(
            f"{spread.source}: the spread was measured on hardware key {spread.hardware_key}, but this run's key is "
            f"{slug}; give the spread a fleet of {slug} measured (gpuperf fleet --save-spread), or a percentage"
        )
