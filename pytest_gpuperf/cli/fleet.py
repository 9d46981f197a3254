"""`gpuperf fleet RESULTS...`: which node, which GPU, is slower than its siblings?

Each results file is one node's run (a folder: every file in it); files of one machine identity are one node, their
runs pooled. Nodes are grouped by hardware key and each key's nodes are judged among themselves only. Within a
node, a result whose context names a ``device`` is that device's unit (the acceptance suite's per-GPU tests,
``test_gemm[gpu3-bf16]``, compared across the fleet as ``test_gemm[bf16]``); otherwise the node is the unit.
Each unit of each metric is placed against the others with core/stats/fleet.py's rule (tolerance, robust z and a
separation test, leave-one-out), a unit's deficit weighed against what its machine's state while it was measured
explains (machine/contention.py ``explains``, as the stored verdict does); the statistics live there, reading and
rendering here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_gpuperf import __version__
from pytest_gpuperf.cli.loading import (
    UNKNOWN_HARDWARE,
    InputError,
    MetricData,
    Run,
    is_folder,
    load_bytes,
    quote,
    read_bytes,
    skipped,
    walk_files,
)
from pytest_gpuperf.cli.option_defaults import given
from pytest_gpuperf.cli.output import write_text
from pytest_gpuperf.cli.tables import render, write_output
from pytest_gpuperf.core.stats.fleet import (
    MIN_UNITS,
    SPREAD_PRIOR_DOF,
    FleetRules,
    KeyPlacement,
    Placement,
    Standing,
    place,
    pooled_spread,
)
from pytest_gpuperf.core.stats.fleet import smallest_p as smallest_p_value
from pytest_gpuperf.core.store import schema
from pytest_gpuperf.core.store import spread as spread_file
from pytest_gpuperf.core.verdict.judge import machine_state, timed_on_device
from pytest_gpuperf.core.verdict.policy import DEVICE_DEFAULTS
from pytest_gpuperf.machine.contention import MachineState, contention, explains

WHOLE_NODE = "node"
"""The device a whole-node test names (the acceptance suite's all-reduce across a node's GPUs): its unit is the
node itself, the parameter still dropped from the test id."""
COLUMNS = (
    ("hardware_key", "hardware key"),
    ("test", "test"),
    ("metric", "metric"),
    ("units", "units"),
    ("fleet_median", "fleet median"),
    ("spread_pct", "spread"),
    ("listed", "listed"),
    ("suspect", "suspect"),
    ("tail", "tail"),
    ("explained", "explained"),
    ("better", "better"),
)


@dataclass(slots=True, kw_only=True, eq=False)
class Node:
    """One machine: every run of its identity (or one file, where the file records none). Compared by identity."""

    hardware_key: str
    identity: str
    """The machine id, or the file's path where the file records none."""
    machine_id: str | None
    host: str | None
    files: list[Path] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Unit:
    node: Node
    device: str | None

    @property
    def name(self) -> str:
        return f"{self.node.name} {self.device}" if self.device else self.node.name


@dataclass(slots=True, kw_only=True)
class Series:
    """One metric (test without its device, metric name) of one hardware key: every unit's samples."""

    test: str
    metric: str
    unit: str
    higher_is_better: bool
    samples: dict[Unit, list[float]] = field(default_factory=dict)
    states: dict[Unit, list[MachineState]] = field(default_factory=dict)
    """Each unit's machine states, one per measurement window that recorded one (none for device-clock figures)."""
    source: Path | None = None
    """A file holding it, for messages."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Judged:
    hardware_key: str
    series: Series
    units: tuple[Unit, ...]
    placement: KeyPlacement
    spread_prior: float = 0.0
    """The prior spread its units were placed with (``key_rules``)."""


# -- reading -----------------------------------------------------------------------------------------------------


def input_files(path: Path) -> list[Path]:
    if is_folder(path):
        files = walk_files(path)
        if not files:
            raise InputError(
                f"{path}: folder holds no results files (*.json from --gpuperf-results or *.xml from --junitxml); "
                "give the folder the nodes wrote their results into"
            )
        return files
    return [path]


def read_node_runs(paths: list[Path]) -> list[tuple[Run, str | None]]:
    """Every run with the host its fingerprint names (None where it names none)."""
    found = []
    seen: set[str] = set()
    for path in paths:
        for file in input_files(path):
            real = os.path.realpath(file)  # a file given twice (or through a link) is read once
            if real in seen:
                continue
            seen.add(real)
            data = read_bytes(file)
            if skipped(file, data, given=path):
                continue
            run = load_bytes(data, file)
            found.append((run, _host(data) if run.machine_id else None))
    return found


def _host(data: bytes) -> str | None:
    """The hostname a validated results document's fingerprint records (JSON only)."""
    try:
        document = schema.loads(data)
    except schema.SchemaError:
        return None  # JUnit XML: its fingerprint property was read by the loader, the host is not kept
    fingerprint = document.get("fingerprint") if isinstance(document, dict) else None
    machine = fingerprint.get("machine") if isinstance(fingerprint, dict) else None
    host = machine.get("host") if isinstance(machine, dict) else None
    return host if isinstance(host, str) and host.strip() else None


def printable_name(text: str, limit: int = 64) -> str:
    """A name from a file, safe on one line: control characters escaped, cut to ``limit``."""
    shown = "".join(ch if ch.isprintable() and ch not in "\t\n\r" else ascii(ch)[1:-1] for ch in text.strip())
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def build_nodes(runs: list[tuple[Run, str | None]]) -> list[Node]:
    nodes: dict[tuple[str, str], Node] = {}
    for run, host in runs:
        identity = run.machine_id or f"file:{run.source}"
        node = nodes.setdefault(
            (run.hardware_slug, identity),
            Node(hardware_key=run.hardware_slug, identity=identity, machine_id=run.machine_id, host=host),
        )
        node.files.append(run.source)
        node.runs.append(run)
        node.host = node.host or host
    found = list(nodes.values())
    for node in found:
        node.name = printable_name(node.host or node.files[0].stem)
    by_name: dict[str, list[Node]] = defaultdict(list)
    for node in found:
        by_name[node.name].append(node)
    for same in by_name.values():
        if len(same) > 1:  # equal hosts (or file names) of different machines: told apart by id, else by path
            for node in same:
                node.name += (
                    f" ({printable_name(node.machine_id[:8])})"
                    if node.machine_id
                    else f" ({printable_name(str(node.files[0]))})"
                )
    return sorted(found, key=lambda node: (node.hardware_key, _natural(node.name)))


def build_series(nodes: list[Node]) -> dict[tuple[str, str], Series]:
    """The metrics of one hardware key's nodes, by (test without device, metric); a node's runs pooled."""
    series: dict[tuple[str, str], Series] = {}
    for node in nodes:
        for run in node.runs:
            for data in run.metrics.values():
                device = _device(data)
                _check_device(data, device, run.source)
                key = (spread_file.without_device(data.key, device) if device else data.key, data.metric)
                test = spread_file.without_device(data.test, device) if device else data.test
                entry = series.setdefault(
                    key,
                    Series(
                        test=test, metric=data.metric, unit=data.unit, higher_is_better=data.higher_is_better,
                        source=run.source,
                    ),
                )  # fmt: skip
                if (entry.unit, entry.higher_is_better) != (data.unit, data.higher_is_better):
                    raise InputError(
                        f"{run.source}: test {quote(data.test)} metric {quote(data.metric)} is in {quote(data.unit)} "
                        f"({_direction(data.higher_is_better)}), but {entry.source} records it in {quote(entry.unit)} "
                        f"({_direction(entry.higher_is_better)}); give results of one version of the tests"
                    )
                unit = Unit(node=node, device=None if device == WHOLE_NODE else device)
                entry.samples.setdefault(unit, []).extend(data.samples)
                state = None if timed_on_device(data.context) else machine_state(data.context)
                if state is not None:
                    entry.states.setdefault(unit, []).append(state)
    return series


def _check_device(data: MetricData, device: str | None, source: Path) -> None:
    """A result whose context names one device and whose test id another cannot be placed: its series would be
    apart from its siblings', too small to judge, and the unit would escape the fleet rule."""
    if device is None or device == WHOLE_NODE or spread_file.without_device(data.test, device) != data.test:
        return
    if spread_file.without_device(data.test) != data.test:
        named = data.test[:-1].partition("[")[2].partition("-")[0]
        raise InputError(
            f"{source}: test {quote(data.test)} metric {quote(data.metric)} names device {quote(named)} in its id "
            f"but {quote(device)} in its context; give results whose context.device is the device the test ran on"
        )


def _device(data: MetricData) -> str | None:
    device = data.context.get("device")
    return printable_name(device, 32) if isinstance(device, str) and device.strip() else None


def _direction(higher: bool) -> str:
    return "higher is better" if higher else "lower is better"


# -- judging -------------------------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class Fleet:
    nodes: list[Node]
    judged: list[Judged] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """One line per hardware key not judged, saying why."""
    too_few: dict[str, list[str]] = field(default_factory=dict)
    """Per hardware key, metrics measured on fewer than MIN_UNITS units."""
    level: float = 0.0

    @property
    def keys(self) -> list[str]:
        return sorted({node.hardware_key for node in self.nodes})

    def listed(self) -> list[tuple[Judged, Unit, Placement]]:
        return self.of(Standing.LISTED)

    def of(self, standing: Standing) -> list[tuple[Judged, Unit, Placement]]:
        return [
            (judged, unit, placed)
            for judged in self.judged
            for unit, placed in zip(judged.units, judged.placement.placements)
            if placed.standing is standing
        ]


def device_kind(members: list[Node]) -> str | None:
    """The device the key's runs timed on ("cpu", "cuda"), as their settings record it; None if they disagree or
    say nothing."""
    kinds = {run.settings.get("device") for node in members for run in node.runs}
    kind = kinds.pop() if len(kinds) == 1 else None
    return kind if isinstance(kind, str) else None


def key_rules(members: list[Node], rules: FleetRules, spread_prior: float | None) -> FleetRules:
    """The rules for one hardware key: ``spread_prior`` where given, else the device kind's prior for the shift
    of one machine's timings between sittings (DEVICE_DEFAULTS: 8% on CPU, none on a GPU yet), a floor for how
    far apart separate machines of the kind may be with nothing wrong."""
    if spread_prior is None:
        spread_prior = DEVICE_DEFAULTS.get(device_kind(members) or "", {}).get("sitting_noise", 0.0)
    return replace(rules, spread_prior=spread_prior)


def judge_fleet(nodes: list[Node], rules: FleetRules, spread_prior: float | None = None) -> Fleet:
    """Judge each hardware key's nodes among themselves; ``spread_prior``: the prior spread for every key (None:
    each key's device kind's, ``key_rules``)."""
    fleet = Fleet(nodes=nodes)
    todo: list[tuple[str, Series]] = []
    by_key: dict[str, FleetRules] = {}
    for key in fleet.keys:
        members = [node for node in nodes if node.hardware_key == key]
        if len(members) < 2:
            (only,) = members
            fleet.refused.append(
                f"{key}: not judged: only one node ({only.name}, from {only.files[0]}); a fleet places a node "
                "against other nodes of its hardware key: give every node's results"
            )
            continue
        by_key[key] = key_rules(members, rules, spread_prior)
        series = build_series(members)
        judgeable = [entry for entry in series.values() if len(entry.samples) >= MIN_UNITS]
        fleet.too_few[key] = sorted(
            f"{entry.test} {entry.metric} ({len(entry.samples)} unit{'s' if len(entry.samples) != 1 else ''})"
            for entry in series.values()
            if len(entry.samples) < MIN_UNITS
        )
        if not judgeable:
            fleet.refused.append(
                f"{key}: not judged: no metric was measured on {MIN_UNITS} or more units of its {len(members)} nodes "
                f"({len(series)} metric(s), each on fewer); give results of the same tests from each node"
            )
            continue
        todo += [(key, entry) for entry in judgeable]
    placements = sum(len(entry.samples) for _, entry in todo)
    fleet.level = rules.alpha / max(1, placements)
    for key, entry in sorted(todo, key=lambda item: (item[0], item[1].test, item[1].metric)):
        units = tuple(sorted(entry.samples, key=lambda unit: (_natural(unit.node.name), _natural(unit.device or ""))))
        placement = place(
            [entry.samples[unit] for unit in units],
            higher_is_better=entry.higher_is_better,
            rules=by_key[key],
            level=fleet.level,
            explains=[load_explains(entry, unit) for unit in units],
        )
        fleet.judged.append(
            Judged(
                hardware_key=key, series=entry, units=units, placement=placement, spread_prior=by_key[key].spread_prior
            )
        )
    return fleet


def load_explains(series: Series, unit: Unit) -> float:
    """The largest factor by which ``unit``'s machine's state, in any window it was measured in, can make it look
    worse than the other units (its time share and its canaries against theirs; 1 where it recorded no state)."""
    others = [state for other, states in series.states.items() if other != unit for state in states]
    return max((explains(state, others)[0] for state in series.states.get(unit, [])), default=1.0)


def load_reasons(series: Series, unit: Unit) -> str:
    """What its machine's state said while ``unit`` was measured, in words (the contention rule's reasons)."""
    found = dict.fromkeys(why for state in series.states.get(unit, []) if (why := contention(state)))
    return "; ".join(found) or "its waits for a CPU, steal and canaries against the other units', each below its limit"


def _natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that puts gpu2 before gpu10 and node-9 before node-17."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part)


# -- words ---------------------------------------------------------------------------------------------------------


def short_test(test: str) -> str:
    return test.rpartition("::")[2] or test


def placement_line(judged: Judged, unit: Unit, placed: Placement) -> str:
    """'node-17 gpu3: test_gemm[bf16] tflops 0.71x the fleet median, 4.1 MADs below (fleet of 64 units, spread
    1.9%)'."""
    series, fleet = judged.series, judged.placement
    if math.isinf(placed.z):
        distance = "where the other units agree exactly"
    else:
        distance = f"{abs(placed.z):.1f} MADs {'below' if placed.z < 0 else 'above'}"
    turn = "" if series.higher_is_better else f" ({'slower' if placed.performance < 1 else 'faster'})"
    return (
        f"{unit.name}: {short_test(series.test)} {series.metric} {placed.ratio:.2f}x the fleet median{turn}, "
        f"{distance} (fleet of {len(judged.units)} units, spread {fleet.spread:.1%})"
    )


def suspect_note(judged: Judged, unit: Unit, placed: Placement, level: float) -> str:
    n = len(judged.series.samples[unit])
    m = sum(len(samples) for other, samples in judged.series.samples.items() if other != unit)
    floor = smallest_p_value(n, m)
    reach = (
        f"; with {n} samples against {m} no separation can reach it (smallest p {floor:.2g}): record more samples"
        if floor > level
        else "; more samples decide it"
    )
    return (
        f"SUSPECT {placement_line(judged, unit, placed)}: its samples do not separate from the others' "
        f"(Mann-Whitney p {placed.p_worse:.2g} > {level:.2g}){reach}"
    )


WIDE = 3
"""A fleet whose spread is more than a WIDE-th of the tolerance is said to be wide: its healthy tail reaches the
tolerance (docs/fleet.md, "Why it does not cry wolf")."""


def wide_note(judged: Judged, rules: FleetRules) -> str:
    spread = judged.placement.spread
    return (
        f"WIDE {judged.hardware_key} {short_test(judged.series.test)} {judged.series.metric}: the fleet's spread "
        f"({spread:.1%}) is more than a third of the tolerance ({rules.tolerance:.0%}), so a unit listed here may be "
        f"the tail of a healthy fleet; --tolerance {math.ceil(WIDE * spread * 100)}% lists only units outside its "
        "own variation"
    )


def explained_note(judged: Judged, unit: Unit, placed: Placement) -> str:
    bound = "any factor" if math.isinf(placed.explains) else f"{placed.explains:.2f}x"
    return (
        f"EXPLAINED {placement_line(judged, unit, placed)}: not listed, since its machine's state while it was "
        f"measured explains up to {bound} worse ({load_reasons(judged.series, unit)}); a deficit beyond that is "
        "listed: re-measure this node on a quiet machine to decide it"
    )


def tail_note(judged: Judged, unit: Unit, placed: Placement) -> str:
    return (
        f"TAIL {placement_line(judged, unit, placed)}: an outlier against the other units' spread as measured, "
        f"not against its upper bound for {len(judged.units) - 1} units; not listed (more units, or units that "
        "agree more closely, would decide it)"
    )


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def unit_record(judged: Judged, unit: Unit, placed: Placement) -> dict[str, Any]:
    return {
        "hardware_key": judged.hardware_key,
        "node": unit.node.name,
        "host": unit.node.host,
        "machine_id": unit.node.machine_id,
        "device": unit.device,
        "unit": unit.name,
        "test": judged.series.test,
        "metric": judged.series.metric,
        "median": placed.median,
        "others_median": placed.others_median,
        "ratio": placed.ratio,
        "performance": placed.performance,
        "z": _finite(placed.z),
        "p_worse": placed.p_worse,
        "p_better": placed.p_better,
        "samples": len(judged.series.samples[unit]),
        "standing": placed.standing.value,
        "load_explains": _finite(placed.explains),
        "files": [str(path) for path in unit.node.files],
    }


def metric_row(judged: Judged) -> dict[str, Any]:
    standings = [placed.standing for placed in judged.placement.placements]
    fleet = judged.placement
    return {
        "hardware_key": judged.hardware_key,
        "test": judged.series.test,
        "metric": judged.series.metric,
        "unit": judged.series.unit,
        "higher_is_better": judged.series.higher_is_better,
        "units": len(judged.units),
        "nodes": len({unit.node.identity for unit in judged.units}),
        "fleet_median": fleet.median,
        "spread": fleet.spread,
        "spread_between": fleet.between,
        "spread_noise_floor": fleet.noise,
        "spread_pct": f"{fleet.spread:.2%}",
        "listed": standings.count(Standing.LISTED),
        "suspect": standings.count(Standing.SUSPECT),
        "tail": standings.count(Standing.TAIL),
        "explained": standings.count(Standing.EXPLAINED),
        "better": standings.count(Standing.BETTER),
    }


# -- the spread file -----------------------------------------------------------------------------------------------


def spread_document(fleet: Fleet) -> dict[str, Any]:
    keys = sorted({judged.hardware_key for judged in fleet.judged})
    if len(keys) != 1:
        raise InputError(
            f"--save-spread keeps one hardware key's spread, but {len(keys)} keys were judged ({', '.join(keys)}); "
            "give one key's results"
        )
    (key,) = keys
    measured = [j for j in fleet.judged if 0 < j.placement.spread < 1]
    metrics: list[dict[str, Any]] = [
        {"test": j.series.test, "metric": j.series.metric, "spread": j.placement.spread, "units": len(j.units)}
        for j in measured
    ]
    pooled = pooled_spread([(j.placement.spread, len(j.units)) for j in measured])
    if not 0 < pooled < 1:
        raise InputError(
            "--save-spread: the units agree exactly on every metric (a spread of 0 measures nothing); nothing saved"
        )
    members = [node for node in fleet.nodes if node.hardware_key == key]
    return spread_file.build_document(
        version=__version__,
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        hardware_key=key,
        nodes=len(members),
        units=max(len(j.units) for j in fleet.judged),
        pooled=pooled,
        metrics=metrics,
    )


# -- the command ---------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    rules = FleetRules(**given(args, tolerance="tolerance", z="z_threshold", alpha="alpha"))
    nodes = build_nodes(read_node_runs([Path(path) for path in args.results]))
    fleet = judge_fleet(nodes, rules, args.spread_prior)
    if not fleet.judged:
        raise InputError("nothing could be judged: " + " | ".join(fleet.refused))
    spread = spread_document(fleet) if args.save_spread else None  # refused before anything is written
    listed = fleet.listed()
    listed_nodes = sorted({unit.node.name for _, unit, _ in listed}, key=_natural)
    judged_nodes = {unit.node.identity for judged in fleet.judged for unit in judged.units}
    summary = (
        f"{len(listed_nodes)} of {len(judged_nodes)} nodes listed"
        + (f" ({', '.join(listed_nodes)}): {len(listed)} unit-metric(s) decidedly worse" if listed else "")
        + f"; exit {1 if listed else 0}"
    )
    head = [*_group_lines(fleet), *(f"LISTED {placement_line(*item)}" for item in listed)]
    notes = [*_notes(fleet, rules), summary]
    if spread is not None:
        write_text(
            Path(args.save_spread),
            schema.dumps(spread),
            what="spread file",
            hint="give another path with --save-spread",
        )
        notes.insert(
            -1,
            f"spread of {spread['hardware_key']} saved to {args.save_spread}: pooled {spread['pooled']:.2%}, "
            f"{len(spread['metrics'])} metric(s)",
        )
    title = (
        f"gpuperf fleet: {len(nodes)} node(s), {len(fleet.keys)} hardware key(s), {len(fleet.judged)} metric(s) judged"
    )
    rows = [metric_row(judged) for judged in fleet.judged]
    html = None
    if args.html or args.format == "html":
        from pytest_gpuperf.cli.fleet_plot import page

        html = page(title=title, head=head, rows=rows, columns=COLUMNS, notes=notes, fleet=fleet, rules=rules)
        if args.html:
            write_text(Path(args.html), html, what="HTML report", hint="give another path with --html")
    if html is not None and args.format == "html":
        text = html
    else:
        extra = {
            "summary": summary,
            "rules": {
                "tolerance": rules.tolerance,
                "z": rules.z,
                "alpha": rules.alpha,
                "level": fleet.level,
                "spread_prior": {judged.hardware_key: judged.spread_prior for judged in fleet.judged},
            },
            "listed": [unit_record(*item) | {"line": placement_line(*item)} for item in listed],
            "units": [unit_record(j, u, p) for j in fleet.judged for u, p in zip(j.units, j.placement.placements)],
            "nodes": [node_record(node, listed=node.name in listed_nodes) for node in nodes],
            "refused": fleet.refused,
            "exit": 1 if listed else 0,
        }
        text = render(title=title, columns=COLUMNS, rows=rows, notes=notes, fmt=args.format, extra=extra, head=head)
    write_output(text, Path(args.output) if args.output else None)
    return 1 if listed else 0


def node_record(node: Node, *, listed: bool) -> dict[str, Any]:
    return {
        "name": node.name,
        "host": node.host,
        "machine_id": node.machine_id,
        "hardware_key": node.hardware_key,
        "files": [str(path) for path in node.files],
        "listed": listed,
    }


def _notes(fleet: Fleet, rules: FleetRules) -> list[str]:
    return [
        *(suspect_note(*item, fleet.level) for item in fleet.of(Standing.SUSPECT)),
        *(tail_note(*item) for item in fleet.of(Standing.TAIL)),
        *(explained_note(*item) for item in fleet.of(Standing.EXPLAINED)),
        *(wide_note(judged, rules) for judged in fleet.judged if WIDE * judged.placement.spread > rules.tolerance),
        *(f"BETTER {placement_line(*item)}" for item in fleet.of(Standing.BETTER)),
        *_too_few_lines(fleet),
        f"rule: a unit is listed when it is at least {rules.tolerance * 100:.4g}% worse than the median of the other "
        f"units, beyond {rules.z:g} MADs of them (modified z against their spread's upper bound, floored by "
        f"sampling noise) and its samples separate from theirs (one-sided Mann-Whitney at {rules.alpha:g} / "
        f"{round(rules.alpha / fleet.level)} placements = {fleet.level:.2g}), by more than its machine's state "
        "while it was measured explains; spread: the robust sd of the units' log medians, floored by their "
        "sampling noise",
        *_prior_lines(fleet),
    ]


def _prior_lines(fleet: Fleet) -> list[str]:
    priors = sorted({(judged.hardware_key, judged.spread_prior) for judged in fleet.judged if judged.spread_prior})
    return [
        f"prior: {key}'s units placed against their MAD pooled with a {prior:.1%} prior spread at "
        f"{SPREAD_PRIOR_DOF:g} degrees of freedom (a fleet of few units cannot measure its own spread; "
        "--spread-prior sets it, 0 for none)"
        for key, prior in priors
    ]


def _group_lines(fleet: Fleet) -> list[str]:
    lines = []
    if len(fleet.keys) > 1:
        lines.append(
            f"the results hold {len(fleet.keys)} hardware keys ({', '.join(fleet.keys)}): each key's nodes are judged "
            "among themselves only"
        )
    for key in fleet.keys:
        members = [node for node in fleet.nodes if node.hardware_key == key]
        judged = [j for j in fleet.judged if j.hardware_key == key]
        if judged:
            units = max(len(j.units) for j in judged)
            named = ", ".join(node.name for node in members[:8]) + (", ..." if len(members) > 8 else "")
            lines.append(f"{key}: {len(members)} nodes ({named}), up to {units} units, {len(judged)} metric(s) judged")
        if key == UNKNOWN_HARDWARE:
            lines.append(f"{key}: files without a fingerprint: each file is its own node, the hardware is not known")
    return lines + fleet.refused


def _too_few_lines(fleet: Fleet) -> list[str]:
    lines = []
    for key, missing in sorted(fleet.too_few.items()):
        if missing and any(j.hardware_key == key for j in fleet.judged):
            shown = "; ".join(missing[:3]) + (f"; and {len(missing) - 3} more" if len(missing) > 3 else "")
            lines.append(f"{key}: {len(missing)} metric(s) on fewer than {MIN_UNITS} units not judged: {shown}")
    return lines
