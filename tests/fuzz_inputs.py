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


def hostile_pool(folder: Path) -> dict[str, list[str]]:
    """Inputs, outputs, keys and baseline folders for `gpuperf` command lines, fair and hostile, made in ``folder``.

    Hostile: devices (/dev/zero, /dev/urandom, /dev/full), FIFOs nobody writes or reads, a /proc file whose
    reported size is 0, a folder given for a file and a file under a file, dangling and looping links, numbers
    at and past float range, names with TeX markup and lone surrogates, UTF-16 XML with a DTD, duplicate keys,
    a hardware slug that climbs out of --baselines, 100,000-deep nesting.
    """
    from pytest_gpuperf.core.store import BaselineStore, Curve, NewCurve

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


def cli_case(rng: random.Random, pool: dict[str, list[str]], number: int) -> list[str]:
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

    command = rng.choice(["compare", "compare", "variance", "history", "report", "diff", "keygen", "sign", "verify"])
    fmt = ["--format", rng.choice(["table", "md", "json", "html"])]
    if command == "compare":
        return ["compare", *some(2), *fmt, *output()]
    if command == "variance":
        return ["variance", "--reference", *some(1), *some(rng.randint(1, 2)), *fmt, *output()]
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
