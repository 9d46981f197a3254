"""Malformed results files for the loader's fuzz test and benchmarks/malformed_inputs.py.

Each input starts from a valid results JSON document or JUnit XML file and is damaged one way: truncated,
bytes flipped or inserted, a node of the JSON tree replaced by another value, a node deleted, or XML tags and
properties garbled. Random state comes from the caller, so hypothesis can shrink and the benchmark is seeded.
"""

from __future__ import annotations

import copy
import json
import os
import random
from pathlib import Path
from typing import Any

from pytest_gpuperf.cli.loading import InputError, Run, parse_junit_xml, parse_results_json

FINGERPRINT = {
    "hardware_key": {"device": "cuda", "accelerator": {"name": "H200", "count": 8}, "cpu": {"cores": 96}, "nodes": 1},
    "hardware_slug": "8x-h200-141gib-sm-90-host-cpu-96c",
    "stack": {"driver": "580.1", "torch": "2.12.0", "nccl": "2.27.3"},
}

RESULTS: dict[str, Any] = {
    "schema": 1,
    "tool": {"name": "pytest-gpuperf", "version": "0.1.0"},
    "created": "2026-01-02T03:04:05+00:00",
    "fingerprint": FINGERPRINT,
    "settings": {"device": "cuda", "threshold": 0.01, "noise_limit": 0.05, "run_noise": 0.003},
    "results": [
        {
            "test": "suites/test_llm.py::test_decode[bf16]",
            "metric": "tokens_per_s",
            "unit": "tok/s",
            "higher_is_better": True,
            "samples": [1000.0, 1002.5, 998.0, 1001.0, 999.5],
            "rounds": 1,
            "summary": {"median": 1000.0},
            "context": {"telemetry": {"sm_clock_mhz_median": 1980.0}},
            "baseline": None,
            "comparison": {"verdict": "NO_BASELINE"},
            "verdict": "NO_BASELINE",
            "stack_changes": [],
        },
        {
            "test": "suites/test_llm.py::test_prefill",
            "metric": "latency",
            "unit": "s",
            "higher_is_better": False,
            "samples": [0.01, 0.0102, 0.0099],
            "rounds": 1,
            "context": {},
            "verdict": "PASS",
        },
    ],
    "curves": [
        {"test": "suites/test_train.py::test_loss", "name": "loss", "steps": [0, 1, 2], "values": [2.0, 1.5, 1.2]}
    ],
}

JUNIT = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" errors="0" '
    'failures="0" skipped="0" tests="2" time="1.0" timestamp="2026-01-02T03:04:05.000001+00:00" hostname="h">'
    '<properties><property name="gpuperf.fingerprint" value="'
    + json.dumps(FINGERPRINT).replace('"', "&quot;")
    + '" /></properties>'
    '<testcase classname="suites.test_llm" name="test_decode[bf16]" time="0.5"><properties>'
    '<property name="gpuperf.tokens_per_s.verdict" value="PASS" />'
    '<property name="gpuperf.tokens_per_s.unit" value="tok/s" />'
    '<property name="gpuperf.tokens_per_s.higher_is_better" value="True" />'
    '<property name="gpuperf.tokens_per_s.samples" value="1000,1002.5,998,1001,999.5" />'
    "</properties></testcase>"
    '<testcase classname="suites.test_llm" name="test_prefill" time="0.5"><properties>'
    '<property name="gpuperf.latency.unit" value="s" />'
    '<property name="gpuperf.latency.higher_is_better" value="False" />'
    '<property name="gpuperf.latency.samples" value="0.01,0.0102,0.0099" />'
    "</properties></testcase></testsuite></testsuites>"
)

XML_PIECES = [
    "<",
    ">",
    "/>",
    "</testcase>",
    "<testsuite>",
    '<property name="gpuperf.x.samples" value="1,a"/>',
    "&amp;",
    "&bogus;",
    "\x00",
    '<!DOCTYPE x [<!ENTITY a "aaaa">]>',
    "]]>",
    "<![CDATA[",
    '"',
    "'",
    "<properties>",
    'value="nan"',
    'value="1e999"',
    "gpuperf.",
    "\u00e9",
    "\ud7ff",
]


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, prefix + (index,))
    return found


def _replace(document: Any, path: tuple, value: Any, delete: bool) -> Any:
    if not path:
        return value
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return document


def malformed(rng: random.Random, replacement: Any = None) -> tuple[str, bytes]:
    """("json" or "xml", damaged bytes)."""
    kind = rng.choice(("json", "xml"))
    if kind == "json":
        how = rng.choice(
            ("truncate", "flip", "insert", "replace", "delete", "replace", "numbers", "duplicate", "markup")
        )
        if how == "duplicate":  # a key written twice, at the top or inside an entry
            text = json.dumps(RESULTS)
            if rng.random() < 0.5:
                return kind, duplicate_key(
                    text, rng.choice(["results", "fingerprint", "schema"]), first=rng.random() < 0.5
                ).encode()
            return kind, text.replace('"unit": "s"', '"unit": "s", "unit": "ms"', 1).encode()
        if how == "markup":  # fair but awkward names: TeX markup, lone surrogates, bidi controls
            document = copy.deepcopy(RESULTS)
            for entry in document["results"] + document["curves"]:
                entry["test"] = rng.choice(MARKUP_NAMES)
            return kind, json.dumps(document).encode()
        if how in ("replace", "delete", "numbers"):
            document = copy.deepcopy(RESULTS)
            path = rng.choice(_paths(document))
            if how == "numbers":
                replacement = rng.choice([0, -1.0, 1e308, 10**400, True, "1", [], [0.0, 0.0, 0.0], None, {}])
            document = _replace(document, path, replacement, delete=how == "delete" and bool(path))
            text = json.dumps(document, allow_nan=True, default=str)
            return kind, text.encode("utf-8", "surrogatepass")
        data = bytearray(json.dumps(RESULTS).encode())
    else:
        how = rng.choice(("truncate", "flip", "insert", "pieces", "wide"))
        if how == "wide":  # UTF-16 (with or without a DTD): what an ASCII byte check cannot see into
            encoding = rng.choice(["utf-16", "utf-16-le", "utf-16-be"])
            if rng.random() < 0.5:
                return kind, utf16_dtd_bomb(encoding, levels=rng.randint(1, 7))
            return kind, JUNIT.replace('encoding="utf-8"', 'encoding="utf-16"').encode(encoding)
        data = bytearray(JUNIT.encode())
        if how == "pieces":
            text = JUNIT
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(len(text))
                text = text[:at] + rng.choice(XML_PIECES) + text[at + rng.randint(0, 12) :]
            return kind, text.encode("utf-8", "surrogatepass")
    if how == "truncate":
        return kind, bytes(data[: rng.randrange(len(data))])
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(data))
        if how == "flip":
            data[at] = rng.randrange(256)
        else:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
    return kind, bytes(data)


def load(kind: str, data: bytes) -> Run | InputError:
    """The loader's answer: a Run or the InputError it raised (anything else propagates: that is a bug)."""
    source = Path(f"fuzz.{kind}")
    try:
        return parse_results_json(data, source) if kind == "json" else parse_junit_xml(data, source)
    except InputError as error:
        return error


def duplicate_key(text: str, key: str, *, first: bool) -> str:
    """The JSON object ``text`` with a second, forged ``key`` at its top level (before or after the real one).

    The forged value is the real one with every sample halved (for 'results') or emptied, so a reader keeping
    the other copy sees different numbers: what a signature must not let through.
    """
    document = json.loads(text)
    forged = copy.deepcopy(document[key])
    if key == "results":
        for entry in forged:
            entry["samples"] = [value / 2 for value in entry.get("samples", [])]
    else:
        forged = {} if isinstance(forged, dict) else []
    member = json.dumps(key) + ": " + json.dumps(forged)
    body = text.strip()
    if first:
        return "{" + member + ", " + body[1:]
    return body[:-1].rstrip() + ", " + member + "}"


def utf16_dtd_bomb(encoding: str = "utf-16", levels: int = 6) -> bytes:
    """A JUnit file whose DTD nests entities ``levels`` deep (10 ** levels copies of a string once expanded),
    encoded so that the ASCII bytes '<!DOCTYPE' never appear in it unless ``encoding`` is ASCII-compatible."""
    entities = '<!ENTITY e0 "gpuperf">' + "".join(
        f'<!ENTITY e{n} "{f"&e{n - 1};" * 10}">' for n in range(1, levels + 1)
    )
    declared = "utf-16" if encoding.startswith("utf-16") else encoding  # -le/-be: no BOM, expat detects them
    body = JUNIT.split("?>", 1)[1].replace('value="True"', f'value="&e{levels};"', 1)
    text = f'<?xml version="1.0" encoding="{declared}"?><!DOCTYPE testsuites [{entities}]>' + body
    return text.encode(encoding)


MARKUP_NAMES = [
    "suites/test_llm.py::test_$\\frac{a}{$",
    "suites/test_llm.py::test_x[$^_$]",
    "suites/test_llm.py::test_\ud800",
    "suites/test_llm.py::test_\udfff$\\sqrt{$",
    "suites/test_llm.py::test_" + "\u202e" + "evil",
]
"""Test names a fair run can produce (pytest ids are free text) that renderers have choked on: TeX math markup
for matplotlib's mathtext, lone surrogates (from surrogateescape'd bytes) for UTF-8 encoders."""


# -- whole command lines ---------------------------------------------------------------------------------------


def hostile_pool(folder: Path) -> dict[str, list[Any]]:
    """Inputs, outputs, keys and baseline folders for `gpuperf` command lines, fair and hostile, made in ``folder``.

    Hostile: devices (/dev/zero, /dev/urandom, /dev/full), FIFOs nobody writes or reads, a /proc file whose
    reported size is 0, a folder given for a file and a file under a file, dangling and looping links, numbers
    at and past float range, names with TeX markup and lone surrogates, UTF-16 XML with a DTD, duplicate keys,
    a hardware slug that climbs out of --baselines, 100,000-deep nesting.
    """
    from pytest_gpuperf.core.store.baselines import BaselineStore, Curve, NewCurve

    folder.mkdir(parents=True, exist_ok=True)

    def results(name: str, change: Any = None, text: str | None = None) -> str:
        document = copy.deepcopy(RESULTS)
        if change:
            change(document)
        path = folder / name
        path.write_text(text if text is not None else json.dumps(document))
        return str(path)

    def samples(values: list[float]) -> Any:
        return lambda d: d["results"][0].update(samples=values)

    good = results("good.json")
    runs = folder / "runs"
    runs.mkdir(exist_ok=True)
    for number, driver in enumerate(["580.1", "580.1", "590.2"]):
        results(f"runs/run{number}.json", lambda d, driver=driver: d["fingerprint"]["stack"].update(driver=driver))
    os.mkfifo(runs / "waiting.json")  # a FIFO among the runs: skipped, never opened
    (folder / "good.xml").write_text(JUNIT)
    (folder / "wide.xml").write_bytes(JUNIT.replace('encoding="utf-8"', 'encoding="utf-16"').encode("utf-16"))
    (folder / "bomb16.xml").write_bytes(utf16_dtd_bomb("utf-16", levels=7))
    (folder / "bomb16be.xml").write_bytes(utf16_dtd_bomb("utf-16-be", levels=5))
    os.mkfifo(folder / "fifo.json")
    os.mkfifo(folder / "out-fifo.txt")
    (folder / "loop.json").symlink_to(folder / "loop.json")
    (folder / "dangling.json").symlink_to(folder / "nowhere.json")
    (folder / "plain").write_text("")
    (folder / "empty.json").write_text("")
    (folder / "a-folder").mkdir(exist_ok=True)
    text = json.dumps(RESULTS)
    inputs = [
        good,
        str(folder / "good.xml"),
        str(runs),
        str(folder / "wide.xml"),
        str(folder / "bomb16.xml"),
        str(folder / "bomb16be.xml"),
        str(folder / "fifo.json"),
        str(folder / "loop.json"),
        str(folder / "dangling.json"),
        str(folder / "empty.json"),
        str(folder / "a-folder"),
        str(folder / "plain" / "x.json"),
        str(folder / "missing.json"),
        results("markup.json", lambda d: [e.update(test=MARKUP_NAMES[i % 5]) for i, e in enumerate(d["results"])]),
        results(
            "markup-curve.json",
            lambda d: d["curves"][0].update(test=MARKUP_NAMES[3], name="loss_$\\alpha\ud800"),
        ),
        results("dup-results.json", text=duplicate_key(text, "results", first=True)),
        results("dup-nested.json", text=text.replace('"unit": "s"', '"unit": "s", "unit": "ms"', 1)),
        results("inf.json", text=text.replace('"rounds": 1', '"rounds": 1e999', 1)),
        results("huge.json", samples([1e308, 1.7e308, 1.6e308])),
        results("tiny.json", samples([5e-324, 5e-324, 1e-300])),
        results("wide-range.json", samples([1e-300, 1.0, 1e300])),
        results("slug.json", lambda d: d["fingerprint"].update(hardware_slug="../../../../etc")),
        results("deep.json", text="[" * 100_000 + "]" * 100_000),
        results("bigint.json", samples([10**400, 1, 2])),
        str(folder / ("n" * 300 + ".json")),  # longer than a file name may be
    ]
    for device in ("/dev/zero", "/dev/urandom", "/dev/null", "/proc/self/maps"):
        if Path(device).exists():
            inputs.append(device)
    outputs = [
        None,
        str(folder / "out.txt"),
        str(folder / "new" / "deeper" / "out.txt"),
        str(folder / "a-folder"),
        str(folder / "plain" / "out.txt"),
        str(folder / "out-fifo.txt"),
        str(folder / ("n" * 300) / "out.txt"),
    ]
    for device in ("/dev/full", "/dev/null", "/proc/version"):
        if Path(device).exists():
            outputs.append(device)
    baselines = folder / "baselines"
    curve = Curve(steps=[0, 1, 2], values=[2.0, 1.5, 1.2], stack={}, date="d")
    test = RESULTS["curves"][0]["test"]
    BaselineStore(baselines, RESULTS["fingerprint"]["hardware_slug"], {"device": "cpu"}).save(
        [], [NewCurve(test=test, name="loss", curve=curve)], keep_runs=5
    )
    odd = folder / "odd-baselines" / "slug"
    odd.mkdir(parents=True, exist_ok=True)
    os.mkfifo(odd / "module.json")
    return {
        "inputs": inputs,
        "outputs": outputs,
        "baselines": [str(baselines), str(folder / "odd-baselines"), "/dev/zero", str(folder / "missing"), good],
        "keys": [str(folder / "fifo.json"), "/dev/zero", good, str(folder / "missing.key")],
        "folder": [str(folder)],
    }


def cli_case(rng: random.Random, pool: dict[str, list[Any]], number: int) -> list[str]:
    """One `gpuperf` command line drawn from ``pool``; ``number`` keeps its key and output names fresh."""
    folder = Path(pool["folder"][0])

    def some(count: int) -> list[str]:
        return [rng.choice(pool["inputs"]) for _ in range(count)]

    def output(required: bool = False) -> list[str]:
        target = rng.choice(pool["outputs"])
        if target is None:
            return ["-o", str(folder / f"fresh-{number}.out")] if required else []
        return ["-o", target]

    def key() -> str:
        if rng.random() < 0.7:
            return str(folder / "keys" / "partner.key")  # made by a keygen case first (see the benchmark)
        return rng.choice(pool["keys"])

    command = rng.choice(
        ["compare", "compare", "variance", "history", "report", "diff", "keygen", "sign", "verify", "fleet"]
    )
    fmt = ["--format", rng.choice(["table", "md", "json", "html"])]
    if command == "compare":
        return ["compare", *some(2), *fmt, *output()]
    if command == "variance":
        return ["variance", "--reference", *some(1), *some(rng.randint(1, 2)), *fmt, *output()]
    if command == "fleet":
        extra = rng.choice(
            [[], ["--save-spread", str(folder / f"spread-{number}.json")], ["--html", *output(True)[1:]]]
        )
        return ["fleet", *some(rng.randint(1, 4)), *extra, *fmt, *output()]
    if command == "history":
        accepted = ["--accepted", rng.choice(pool["inputs"])] if rng.random() < 0.2 else []
        return ["history", *some(rng.randint(1, 3)), *accepted, *fmt, *output()]
    if command == "report":
        baselines = ["--baselines", rng.choice(pool["baselines"])] if rng.random() < 0.5 else []
        return ["report", *some(rng.randint(1, 2)), *baselines, *output(required=True)]
    if command == "diff":
        return ["baselines", "diff", rng.choice(pool["baselines"]), rng.choice(pool["baselines"]), *fmt, *output()]
    if command == "keygen":
        where = rng.choice([f"keys/k{number}", f"missing/k{number}", "a-folder", "plain/k", "good.json", "n" * 300])
        return ["keygen", str(folder / where)]
    if command == "sign":
        return ["sign", "--key", key(), *some(rng.randint(1, 2)), *output(required=True)]
    signature = rng.choice([str(folder / "bundle.sig"), str(folder / "fifo.json"), "/dev/zero", *some(1)])
    public = rng.choice([str(folder / "keys" / "partner.key.pub"), *pool["keys"]])
    return ["verify", "--public-key", public, *some(1), "--signature", signature]


# -- issue 38: a workload's own values, gpuperf ab / bisect documents, baselines folders, sides, signals --------

AB_RESULT: dict[str, Any] = {
    "schema": "gpuperf-ab/2",
    "created": "2026-12-05T10:00:00+00:00",
    "command": {"a": ["python"], "b": ["env", "X=1", "python"], "pytest_args": ["t.py"]},
    "seed": 0,
    "rules": {"threshold": 0.02, "alpha": 0.01},
    "order": ["AB", "BA"],
    "stopped": "max pairs",
    "stack_changes": ["torch 2.13.0 -> 2.14.1"],
    "metrics": [
        {
            "test": "t.py::test_x",
            "metric": "step_s",
            "unit": "s",
            "verdict": "REGRESSED",
            "a_median": 0.01,
            "b_median": 0.0105,
            "ratio": 0.952,
            "interval": [0.93, 0.97],
            "pairs": 2,
            "components": ["torch 2.13.0 -> 2.14.1"],
            "log_ratios": [-0.05, -0.048],
        }
    ],
    "pairs": [],
}
"""A `gpuperf ab` result as ab writes it (out/ab.json), which `gpuperf report` draws."""

BISECT_RESULT: dict[str, Any] = {
    "schema": "gpuperf-bisect/1",
    "good": {"torch": "2.13.0"},
    "bad": {"torch": "2.14.1"},
    "builds": 2,
    "sessions": 8,
    "good_vs_bad": "1 REGRESSED",
    "searches": [
        {
            "test": "t.py::test_x",
            "metric": "step_s",
            "verdict": "t.py::test_x step_s: torch",
            "steps": [
                {
                    "index": 1,
                    "purpose": "full",
                    "swapped": ["torch"],
                    "outcome": "REGRESSED",
                    "change": -0.05,
                    "detail": None,
                }
            ],  # fmt: skip
        }
    ],
    "runs": {},
}
"""A `gpuperf bisect` result as bisect writes it (bisect.json)."""

ODD_VALUES: list[Any] = [
    None, 0, -1, 1.5, True, "x", "", [], {}, [1, "a"], {"a": None}, [[]], 10**30, 10**400, 1e308, -1e308, 5e-324,
    "\ud800", "\x1b[2J", [1000], [-1000, 1000], "NaN", {"a": [1, {"b": "c"}]}, [None, None], 2**63, -(2**63),
]  # fmt: skip
"""JSON values a hand edit can leave anywhere in a document (the fuzz also writes NaN, Infinity and 1e999)."""


def malformed_comparison(rng: random.Random) -> tuple[str, bytes]:
    """("ab.json" or "bisect.json", a damaged document of that kind): a node replaced or deleted, a non-finite or
    overflowing number, a key twice, the text truncated or bytes flipped, 100,000-deep nesting, or left whole."""
    name, base = rng.choice([("ab.json", AB_RESULT), ("ab.json", AB_RESULT), ("bisect.json", BISECT_RESULT)])
    how = rng.choice(["replace", "replace", "replace", "delete", "nonfinite", "duplicate", "truncate", "flip",
                      "deep", "whole", "several"])  # fmt: skip
    document = copy.deepcopy(base)
    if how in ("replace", "delete", "several"):
        for _ in range(rng.randint(2, 4) if how == "several" else 1):
            paths = [path for path in _paths(document) if path] if how == "delete" else _paths(document)
            if not paths:
                break
            path = rng.choice(paths)
            try:
                document = _replace(document, path, copy.deepcopy(rng.choice(ODD_VALUES)), delete=how == "delete")
            except (KeyError, IndexError, TypeError):  # an earlier change removed the parent
                continue
        return name, json.dumps(document).encode("utf-8", "surrogatepass")
    text = json.dumps(document)
    if how == "nonfinite":
        numbers = [
            m for m in range(len(text)) if text[m].isdigit() and not text[m - 1].isdigit() and text[m - 1] != "."
        ]
        at = rng.choice(numbers)
        end = at
        while end < len(text) and (text[end].isdigit() or text[end] in ".e-+"):
            end += 1
        return name, (
            text[:at] + rng.choice(["NaN", "Infinity", "-Infinity", "1e999", "1" * 400]) + text[end:]
        ).encode()
    if how == "duplicate":
        key = rng.choice(["schema", "metrics", "searches", "rules", "command"])
        return name, (text[:-1] + f", {json.dumps(key)}: {json.dumps(rng.choice(ODD_VALUES))}}}").encode()
    if how == "deep":
        return name, (text[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}").encode()
    data = bytearray(text.encode())
    if how == "truncate":
        return name, bytes(data[: rng.randrange(len(data))])
    if how == "flip":
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    return name, bytes(data)


# -- what a workload passes to perf.record ------------------------------------------------------------------------


def odd_context_value(rng: random.Random) -> Any:
    """A value a workload puts in a metric's context: numpy and torch numbers (taken), and what no JSON file holds
    (a set, an array, an object, bytes, a complex number, a key that is not text: refused at the call)."""
    import datetime
    import decimal
    import fractions

    import numpy as np

    choices: list[Any] = [
        lambda: np.int64(rng.randint(-(2**40), 2**40)), lambda: np.int32(7), lambda: np.uint8(200),
        lambda: np.uint64(2**63 + 1), lambda: np.float32(rng.random()), lambda: np.float16(1.5),
        lambda: np.float64(rng.random()), lambda: np.bool_(rng.random() < 0.5), lambda: np.array(2.5),
        lambda: np.array([1, 2, 3]), lambda: np.zeros((2, 2)), lambda: np.str_("text"),
        lambda: np.datetime64("2026-01-01"), lambda: np.float32("nan"), lambda: np.float64("inf"),
        lambda: np.int64(2**62) * 1, lambda: np.longdouble(1.25), lambda: np.complex64(1 + 2j),
        lambda: {1, 2}, lambda: frozenset({"a"}), lambda: object(), lambda: b"bytes", lambda: 1 + 2j,
        lambda: decimal.Decimal("1.1"), lambda: fractions.Fraction(1, 3), lambda: 10**400, lambda: float("nan"),
        lambda: -0.0, lambda: 1e308, lambda: Path("x"), lambda: datetime.datetime(2026, 1, 1), lambda: None,
        lambda: "text", lambda: "\ud800", lambda: {"nested": np.int8(1)}, lambda: {1: "int key"},
        lambda: {(1, 2): "tuple key"}, lambda: (1, np.float64(2.0)), lambda: [np.int32(3), np.uint8(4)],
        lambda: _nested(rng.choice([50, 5000])), lambda: len, lambda: range(3), lambda: {"k": {1, 2}},
        lambda: [float("inf")], lambda: "x" * 100_000,
    ]  # fmt: skip
    try:
        import torch
    except ImportError:
        pass
    else:
        choices += [
            lambda: torch.tensor(3), lambda: torch.tensor(1.5, dtype=torch.bfloat16), lambda: torch.tensor([1, 2]),
            lambda: torch.tensor(True), lambda: torch.tensor(float("nan")), lambda: torch.float32,
            lambda: torch.device("cpu"), lambda: torch.Size([2, 3]), lambda: torch.tensor(2**40, dtype=torch.int64),
            lambda: torch.zeros(0), lambda: torch.tensor(1 + 2j),
        ]  # fmt: skip
    return rng.choice(choices)()


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def hostile_record(rng: random.Random) -> dict[str, Any]:
    """Keyword arguments for one ``perf.record`` call (``late``: a key and value added to the context after it, as
    ``perf.metric(name).context[key] = value``), most fair but one part odd."""
    import numpy as np

    call: dict[str, Any] = {
        "name": "t",
        "samples": [1.0, 1.01, 0.99, 1.0, 1.02],
        "unit": "s",
        "higher_is_better": False,
        "context": {"peak_mib": rng.randint(1, 10**6)},
    }
    part = rng.choice(["context", "context", "context", "context", "late", "unit", "flag", "name", "samples"])
    if part == "context":
        call["context"][rng.choice(["n", "peak", "tokens", "deep"])] = odd_context_value(rng)
        if rng.random() < 0.1:
            call["context"] = odd_context_value(rng)  # the context itself odd
    elif part == "late":
        call["late"] = (rng.choice(["n", "peak", 5, None]), odd_context_value(rng))
    elif part == "unit":
        call["unit"] = rng.choice([5, "", None, b"s", np.str_("ms"), "s" * 10_000, "\ud800", 1.5, ["s"], "tok/s",
                                   "\x1b[31ms", np.int64(1)])  # fmt: skip
    elif part == "flag":
        call["higher_is_better"] = rng.choice([1, 0, np.bool_(True), "yes", None, 1.0, [True], True])
    elif part == "name":
        call["name"] = rng.choice([7, "", np.str_("n"), "\ud800", "a" * 10_000, None, "a/b::c", "$\\frac{a}{$"])
    else:
        call["samples"] = rng.choice([
            np.array([1.0, 1.1, 1.2]), np.array([1, 2, 3], dtype=np.int8), [np.float32(1.0)] * 5, [float("nan")] * 3,
            [], [1e308] * 3, [10**400] * 3, ["1", "2", "3"], (x for x in [1.0, 2.0, 3.0]), [5e-324] * 3,
            [True, True, True], [1 + 0j] * 3, np.zeros((2, 3)) + 1, [None] * 3, "123",
        ])  # fmt: skip
        try:
            import torch

            if rng.random() < 0.3:
                call["samples"] = rng.choice([torch.tensor([1.0, 1.1, 1.2]), torch.ones(3, dtype=torch.bfloat16),
                                              torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([1, 2, 3])])  # fmt: skip
        except ImportError:
            pass
    return call


RECORD_MODULE = """
import numpy as np
import pytest
import torch
from decimal import Decimal
from fractions import Fraction
from pathlib import Path


@pytest.mark.perf
def test_fair_before(perf):
    perf.record("t", [1.0, 1.01, 0.99, 1.0, 1.02], unit="s", higher_is_better=False, context={"n": np.int64(7)})


@pytest.mark.perf
def test_odd(perf):
    {call}
    {late}


@pytest.mark.perf
def test_fair_after(perf):
    perf.record("t", [2.0, 2.01, 1.99, 2.0, 2.02], unit="s", higher_is_better=False, context={"peak": torch.tensor(3)})
"""
"""A perf test module for a whole pytest session: two fair tests around one whose perf.record call is odd."""

ODD_SOURCES = [
    "np.int64(7)", "np.float32(0.5)", "np.array([1, 2])", "{1, 2}", "object()", "torch.tensor(1.5)",
    "torch.tensor([1.0, 2.0])", "np.bool_(True)", "b'x'", "1 + 2j", "Decimal('1.1')", "Fraction(1, 3)", "Path('x')",
    "{1: 'a'}", "np.uint64(2**63 + 1)", "torch.tensor(2, dtype=torch.bfloat16)", "float('nan')", "10**400",
    "[np.float16(1.0)]", "np.datetime64('2026-01-01')", "torch.device('cpu')", "len",
]  # fmt: skip
"""Python source for the values of RECORD_MODULE's odd test (the session run cannot share objects)."""


def record_module(rng: random.Random) -> tuple[str, str]:
    """(description, source) of RECORD_MODULE with one odd perf.record call and maybe a late context value."""
    value = rng.choice(ODD_SOURCES)
    where = rng.choice(["context", "context", "unit", "flag", "late"])
    unit, flag, context = '"s"', "False", f'{{"n": {value}}}'
    late = ""
    if where == "unit":
        unit, context = rng.choice(["5", '""', "None", "np.str_('ms')", "b's'", "1.5"]), "{}"
    elif where == "flag":
        flag, context = rng.choice(["1", "np.bool_(True)", "'yes'", "None", "torch.tensor(True)"]), "{}"
    elif where == "late":
        context = "{}"
        late = f'perf.metric("t").context["late"] = {value}'
    call = f'perf.record("t", [1.5, 1.51, 1.49, 1.5, 1.52], unit={unit}, higher_is_better={flag}, context={context})'
    description = {"context": f"context {value}", "late": f"late {value}"}.get(where, f"{where} {unit or flag}")
    if where == "unit":
        description = f"unit={unit}"
    elif where == "flag":
        description = f"higher_is_better={flag}"
    return description, RECORD_MODULE.replace("{call}", call).replace("{late}", late or "pass")


# -- what lies in a baselines folder ------------------------------------------------------------------------------


BASELINE_HAZARDS = ["fifo", "/dev/zero", "/dev/urandom", "/dev/null", "loop", "dangling", "folder", "empty",
                    "garbage", "deep", "fifo-own"]  # fmt: skip
"""What a ``*.json`` under baselines/<key>/ can be besides a baseline file: a FIFO, a link to a device, a loop or
nowhere, a folder, an empty file, garbage, 100,000-deep nesting; 'fifo-own' is a FIFO at the module's own file."""


def plant_hazard(folder: Path, hazard: str, own: str) -> Path:
    """Put ``hazard`` under ``folder`` (baselines/<key>/) as another module's file, or as ``own`` (the file of the
    module the session measures) for 'fifo-own'; returns its path."""
    path = folder / (own if hazard == "fifo-own" else f"test_other_{hazard.strip('/').replace('/', '_')}.json")
    if path.exists() or path.is_symlink():
        path.unlink()
    if hazard in ("fifo", "fifo-own"):
        os.mkfifo(path)
    elif hazard.startswith("/dev/"):
        path.symlink_to(hazard)
    elif hazard == "loop":
        path.symlink_to(path)
    elif hazard == "dangling":
        path.symlink_to(folder / "nowhere.json")
    elif hazard == "folder":
        path.mkdir()
    elif hazard == "empty":
        path.write_text("")
    elif hazard == "garbage":
        path.write_bytes(bytes(range(256)) * 4)
    else:
        path.write_text("[" * 100_000 + "]" * 100_000)
    return path


# -- gpuperf ab sides ---------------------------------------------------------------------------------------------

AB_SIDE = r"""
import json, os, sys, time

mode = os.environ.get("SIDE_MODE", "good")
results = sys.argv[sys.argv.index("--gpuperf-results") + 1]
with open(os.environ["SIDE_PIDS"], "a") as pids:
    pids.write(f"{os.getpid()}\n")
GOOD = {"hardware_key": {"device": "cpu"}, "hardware_slug": "cpu-x", "stack": {"python": "3"}}


def document(fingerprint, samples):
    return {"schema": 1, "created": "", "fingerprint": fingerprint, "settings": {"threshold": 0.02},
            "results": [{"test": "t.py::test_x", "metric": "step_s", "unit": "s", "higher_is_better": False,
                         "samples": samples}]}


if mode == "good":
    json.dump(document(GOOD, [0.010, 0.011, 0.0105]), open(results, "w"))
elif mode == "fifo":
    os.mkfifo(results)
elif mode == "sleep":
    time.sleep(120)
elif mode == "fingerprint-int":
    json.dump(document(5, [0.01]), open(results, "w"))
elif mode == "nan":
    open(results, "w").write(json.dumps(document(GOOD, [0.01, 0.01, 0.01])).replace("0.01", "NaN"))
elif mode == "fifo-then-sleep":
    os.mkfifo(results)
    time.sleep(120)
"""
"""A stand-in for a side's `python -m pytest ...`: it notes its pid and does what SIDE_MODE says in milliseconds,
so a `gpuperf ab` case costs seconds, not pytest sessions."""

AB_WRAPPER = '"$GPUPERF_FUZZ_PYTHON" side.py "$@"\necho wrapper done\n'
"""A side that is a wrapper script: no exec, so the side's Python is ab's grandchild, under sh."""

AB_SIDE_CASES = [
    ("good", "good", False, []),
    ("sleep", "sleep", True, ["--budget", "3s"]),
    ("good", "sleep", True, ["--budget", "4s"]),
    ("good", "fifo", False, ["--max-dropped", "1"]),
    ("fifo", "good", True, ["--max-dropped", "1"]),
    ("good", "fifo-then-sleep", True, ["--budget", "4s"]),
    ("good", "fingerprint-int", True, ["--max-dropped", "1"]),
    ("nan", "good", False, ["--max-dropped", "1"]),
]
"""(mode of side A, mode of side B, whether both run through the wrapper script, options): each costs seconds."""


# -- signals to a pytest whose ranks run --------------------------------------------------------------------------

RANKS_MODULE = """
import os
import subprocess
import sys
import time
from pathlib import Path

from pytest_gpuperf.distributed import launch
from pytest_gpuperf.distributed import pool


def _note(name, text):
    folder = Path(os.environ["GPUPERF_FUZZ_NOTES"])
    (folder / (name + ".tmp")).write_text(text)
    (folder / (name + ".tmp")).rename(folder / name)


def start_a_child_and_wait():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    _note("rank" + os.environ["RANK"], f"{os.getpid()} {child.pid}")
    while True:
        time.sleep(0.05)


def slow_start(**kwargs):
    from pytest_gpuperf.distributed import rank

    real = rank.init_process_group

    def late(**options):
        _note("starting" + os.environ["RANK"], str(os.getpid()))
        time.sleep(600)
        real(**options)

    rank.init_process_group = late
    from pytest_gpuperf.distributed.worker import rank_main

    rank_main(**kwargs)


def test_ranks_run(tmp_path):
    launch(start_a_child_and_wait, world_size=2, timeout=600)


def test_ranks_start(monkeypatch):
    monkeypatch.setattr(pool, "rank_main", slow_start)
    launch(start_a_child_and_wait, world_size=2, timeout=600)
"""
"""A test module whose tests launch 2 gloo ranks that each start a sleeping child (test_ranks_run) or stay in
start-up (test_ranks_start), until pytest is signalled; the notes say when they got there."""
