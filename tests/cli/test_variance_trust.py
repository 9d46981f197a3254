"""`gpuperf variance --trust`: signed partner bundles judged only when every signature verifies (issue 36, item 5),
and the runs each partner would need to show "within the tolerance" at its measured noise.

The bundles are folders of results files written here from seeded samples (a run's shift between runs, then
its repeats), signed with keys made by `gpuperf keygen`, and every command runs through the CLI's main.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gpuperf.cli import main as cli
from pytest_gpuperf.cli import runs_needed

pytest.importorskip("cryptography", reason="signing needs the 'sign' extra (pip install 'pytest-gpuperf[sign]')")

FINGERPRINT = {
    "hardware_key": {"device": "cuda", "accelerator": {"name": "H200", "count": 1}, "cpu": {"cores": 96}},
    "hardware_slug": "1x-h200-141gib-sm-90-host-cpu-96c",
    "stack": {"driver": "580.1", "torch": "2.12.0"},
}
WORKLOADS = (
    ("suites/test_micro.py::test_gemm[bf16]", "tflops", "TFLOP/s", True, 700.0),
    ("suites/test_llm.py::test_decode", "step_time", "s", False, 0.02),
)
PARTNERS = {"near": 1.002, "close": 0.998, "off": 0.97}
"""Each partner's true throughput ratio to the reference."""


def write_runs(
    folder: Path,
    scale: float,
    *,
    seed: int,
    runs: int,
    repeats: int = 20,
    between: float = 0.003,
    within: float = 0.005,
) -> Path:
    """``runs`` results files, each run shifted by ``between`` (sd, log scale) between runs, its repeats by
    ``within`` about that."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for index in range(runs):
        results = []
        for test, metric, unit, higher, value in WORKLOADS:
            centre = value * (scale if higher else 1 / scale) * math.exp(rng.normal(0, between))
            samples = centre * np.exp(rng.normal(0, within, repeats))
            results.append(
                {"test": test, "metric": metric, "unit": unit, "higher_is_better": higher, "samples": samples.tolist()}
            )
        document = {"schema": 1, "created": "2026-12-06T00:00:00+00:00", "fingerprint": FINGERPRINT, "results": results}
        (folder / f"run{index:02d}.json").write_text(json.dumps(document, indent=1))
    return folder


def gpuperf(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def sign(capsys: pytest.CaptureFixture[str], key: Path, bundle: Path) -> None:
    assert gpuperf(capsys, "sign", "--key", str(key), str(bundle))[0] == 0


@pytest.fixture
def world(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """keys/ (vendor and partner public keys, trusted), each private key beside it, a signed reference of 10
    runs and three partners of 4 runs, each signed with its own key; a stranger's key nobody trusts."""
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("vendor", *PARTNERS, "stranger"):
        assert gpuperf(capsys, "keygen", str(tmp_path / f"{name}.key"))[0] == 0
        if name != "stranger":
            shutil.copy(tmp_path / f"{name}.key.pub", keys)
    sign(capsys, tmp_path / "vendor.key", write_runs(tmp_path / "ref", 1.0, seed=1, runs=10))
    for seed, (name, scale) in enumerate(PARTNERS.items(), start=2):
        sign(capsys, tmp_path / f"{name}.key", write_runs(tmp_path / name, scale, seed=seed, runs=4))
    return tmp_path


def trusted(world: Path, *partners: str, keys: str = "keys") -> list[str]:
    """`gpuperf variance --trust` over the world's reference and ``partners`` (default: all three)."""
    names = partners or tuple(PARTNERS)
    return [
        "variance",
        "--trust",
        str(world / keys),
        "--reference",
        str(world / "ref"),
        *(str(world / n) for n in names),
    ]


def judge(capsys: pytest.CaptureFixture[str], world: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    code, out, err = gpuperf(capsys, *trusted(world), "--format", "json", *extra)
    assert err == "", err
    return code, json.loads(out)


def fingerprint_of(public_pem: Path) -> str:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(public_pem.read_bytes())
    return hashlib.sha256(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)).hexdigest()[:16]


# -- the happy path --------------------------------------------------------------------------------------------


def test_signed_partners_are_judged_and_each_row_names_its_signer(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = judge(capsys, world)
    assert code == 1  # the partner 3% off FAILs
    partners = {Path(p["submission"]).name: p for p in document["partners"]}
    assert partners["off"]["verdict"] == "FAIL"
    assert "no number of runs would show equivalence" in partners["off"]["detail"]
    assert {partners["near"]["verdict"], partners["close"]["verdict"]} <= {"PASS", "INCONCLUSIVE"}
    assert document["signatures"] == "verified"
    assert document["reference_signer"] == f"vendor.key.pub ({fingerprint_of(world / 'vendor.key.pub')})"
    for row in document["rows"]:
        name = Path(row["submission"]).name
        assert row["signer_key"] == f"{name}.key.pub"
        assert row["signer_fingerprint"] == fingerprint_of(world / f"{name}.key.pub")
        assert row["runs"] == 4 and row["repeats"] == 20
    assert any("signatures verified: every submission under one of 4 trusted key(s)" in n for n in document["notes"])
    # the same keys given one by one, and in the text table the signer has a column
    per_key = [arg for name in ("vendor", *PARTNERS) for arg in ("--trust", str(world / f"{name}.key.pub"))]
    code, out, _ = gpuperf(capsys, "variance", *per_key, "--reference", str(world / "ref"), str(world / "near"))
    assert code == 0 and "signed by" in out.splitlines()[1]
    assert f"near.key.pub ({fingerprint_of(world / 'near.key.pub')})" in out


def test_without_trust_nothing_is_checked_and_the_output_says_so(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (world / "near.sig").unlink()  # unsigned is fine when nothing is checked
    code, out, _ = gpuperf(
        capsys, "variance", "--reference", str(world / "ref"), str(world / "near"), "--format", "json"
    )
    document = json.loads(out)
    assert code == 0 and document["signatures"] == "not checked"
    assert "signatures not checked (no --trust)" in " ".join(document["notes"])
    assert all("signer" not in row for row in document["rows"])
    code, out, _ = gpuperf(capsys, "variance", "--reference", str(world / "ref"), str(world / "near"))
    assert "signatures not checked (no --trust)" in out and "signed by" not in out


def test_an_unsigned_reference_is_taken_as_is_only_when_asked(world: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (world / "ref.sig").unlink()
    trust = ("--trust", str(world / "keys"))
    argv = ("variance", *trust, "--reference", str(world / "ref"), str(world / "near"))
    code, out, err = gpuperf(capsys, *argv)
    assert code == 2 and out == "" and "ref: not signed" in err and "nothing was judged" in err
    code, out, _ = gpuperf(capsys, *argv, "--reference-unsigned", "--format", "json")
    document = json.loads(out)
    assert code == 0 and document["reference_signer"] is None
    assert "the reference not checked (--reference-unsigned)" in " ".join(document["notes"])
    code, out, err = gpuperf(capsys, "variance", "--reference-unsigned", "--reference", str(world / "ref"), "x")
    assert code == 2 and "--reference-unsigned is for use with --trust" in err


# -- every refusal: exit 2, one line, nothing judged -------------------------------------------------------------


def tamper_byte(world: Path) -> None:
    """One digit of the first sample, which every reader parses (a byte of spacing would keep the digest)."""
    target = world / "near" / "run01.json"
    text = target.read_text()
    at = re.search(r'"samples": \[\s*\d+\.(\d)', text).start(1)  # type: ignore[union-attr]
    target.write_text(text[:at] + ("7" if text[at] != "7" else "3") + text[at + 1 :])


def forge_claim(world: Path) -> None:
    """The stranger signs, then the file is made to name a trusted key: it must still not verify."""
    vendor = (world / "keys" / "near.key.pub").read_bytes()
    from cryptography.hazmat.primitives import serialization

    raw = serialization.load_pem_public_key(vendor).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    (world / "near.sig").unlink()
    assert cli.main(["sign", "--key", str(world / "stranger.key"), str(world / "near")]) == 0
    document = json.loads((world / "near.sig").read_text())
    document["public_key"] = base64.b64encode(raw).decode()
    (world / "near.sig").write_text(json.dumps(document))


def edit_manifest(world: Path) -> None:
    document = json.loads((world / "near.sig").read_text())
    name = sorted(document["files"])[0]
    document["files"][name] = "0" * 64
    (world / "near.sig").write_text(json.dumps(document))


REFUSALS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "unsigned": (lambda w: (w / "near.sig").unlink(), ("near: not signed", "near.sig", "gpuperf sign --key KEY")),
    "tampered byte": (tamper_byte, ("near: run01.json: changed since signing", "ask its sender")),
    "byte that breaks the JSON": (
        lambda w: (w / "near" / "run02.json").write_bytes((w / "near" / "run02.json").read_bytes()[:-9]),
        ("run02.json",),
    ),
    "untrusted key": (
        lambda w: ((w / "near.sig").unlink(), cli.main(["sign", "--key", str(w / "stranger.key"), str(w / "near")])),
        ("near: signed by key", "which is not trusted", "add their KEY.pub with --trust"),
    ),
    "wrong key named": (forge_claim, ("names the trusted key near.key.pub", "does not verify under it")),
    "manifest edited": (edit_manifest, ("names the trusted key near.key.pub", "edited after signing")),
    "file added": (
        lambda w: shutil.copy(w / "near" / "run00.json", w / "near" / "run09.json"),
        ("near: run09.json: not covered by the signature",),
    ),
    "file removed": (lambda w: (w / "near" / "run03.json").unlink(), ("near: run03.json: signed but missing",)),
    "malformed signature": (lambda w: (w / "near.sig").write_text("{not json"), ("near.sig",)),
    "signature of another shape": (
        lambda w: (w / "near.sig").write_text(json.dumps({"algorithm": "ed25519", "files": {}, "signature": "AAAA"})),
        ("near.sig: not a gpuperf signature file", "'signature' holds 3 bytes"),
    ),
    "signature by another algorithm": (
        lambda w: (w / "near.sig").write_text(json.dumps({"algorithm": "rsa", "files": {}, "signature": ""})),
        ("near.sig: not a gpuperf signature file", "algorithm 'rsa'"),
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_bundle_that_does_not_verify_refuses_the_whole_command(
    case: str, world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damage, expected = REFUSALS[case]
    damage(world)
    capsys.readouterr()
    output = world / "out.json"
    code, out, err = gpuperf(capsys, *trusted(world), "-o", str(output))
    assert_refused(code, out, err, *expected, "nothing was judged")
    assert not output.exists()


def assert_refused(code: int, out: str, err: str, *expected: str) -> None:
    assert code == 2, (code, out, err)
    assert out == "", out  # no partial table
    assert err.count("\n") == 1 and err.startswith("gpuperf variance: error: "), err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, err


def test_two_bad_bundles_are_counted_in_the_one_line(world: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (world / "near.sig").unlink()
    (world / "off" / "run00.json").unlink()
    code, out, err = gpuperf(capsys, *trusted(world))
    assert_refused(code, out, err, "near: not signed", "(and 1 more bundle(s) refused)", "nothing was judged")


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ("missing.pub", ("missing.pub: no such file or folder", "(given with --trust)")),
        ("notakey.pub", ("notakey.pub: not a PEM public key", "(given with --trust)")),
        ("near.key", ("near.key: a private key where a public one was expected", "give KEY.pub")),
        ("empty", ("empty: folder holds no *.pub public keys",)),
    ],
)
def test_trusted_keys_that_cannot_be_used_are_refused(
    keys: str, expected: tuple[str, ...], world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (world / "notakey.pub").write_text("-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n")
    (world / "empty").mkdir()
    code, out, err = gpuperf(capsys, *trusted(world, "near", keys=keys))
    assert_refused(code, out, err, *expected)


SIGNATURE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["algorithm", "files", "signature", "public_key", "schema", None]), value=SIGNATURE_VALUES)
def test_a_fuzzed_signature_file_is_one_line_never_a_traceback(
    world: Path, capsys: pytest.CaptureFixture[str], field: str | None, value: object
) -> None:
    signature = world / "close.sig"
    original = signature.read_bytes()
    try:
        document = json.loads(original)
        if field is None:
            document = value
        else:
            document[field] = value
        signature.write_text(json.dumps(document))
        code, out, err = gpuperf(capsys, *trusted(world, "close"))
    finally:
        signature.write_bytes(original)
    if code != 2:  # a field the signature does not cover (schema), changed to a value of the right shape
        assert code in (0, 1) and field in ("schema", "public_key") and "Traceback" not in err, (code, err)
        return
    assert_refused(code, out, err, "close")


def test_verify_names_the_key_by_fingerprint(world: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = gpuperf(capsys, "verify", "--public-key", str(world / "near.key.pub"), str(world / "near"))
    assert code == 0 and out == (
        f"OK: 4 file(s) signed by {world / 'near.key.pub'} (key {fingerprint_of(world / 'near.key.pub')}), unchanged\n"
    )


# -- what would decide: runs, not only repeats --------------------------------------------------------------------


def test_runs_and_repeats_to_decide_from_known_parts() -> None:
    """Half-width^2 / z^2 = (within * n0 / n + between) / k + reference; here (4e-6 + 1e-5) / 4 + 2e-6 now."""
    noise = runs_needed.Noise(within=4e-6, between=1e-5, reference=2e-6, runs=4, repeats=20)
    assert noise.variance(4, 20) == pytest.approx(5.5e-6)
    # to halve the interval: 5.5e-6 / 4 - 2e-6 < 0: only more reference runs would do it
    assert runs_needed.runs_to_decide(noise, 0.5) is None and runs_needed.repeats_to_decide(noise, 0.5) is None
    # to shrink it by 0.8: room 5.5e-6 * 0.64 - 2e-6 = 1.52e-6 for 1.4e-5 / k: k = 10 (9.2 rounded up)
    assert runs_needed.runs_to_decide(noise, 0.8) == 10
    # repeats: 4e-6 * 20 / 4 / n <= 1.52e-6 - 1e-5 / 4 < 0: between-run noise alone is wider; none would
    assert runs_needed.repeats_to_decide(noise, 0.8) is None
    quiet = runs_needed.Noise(within=4e-6, between=1e-6, reference=0.0, runs=4, repeats=20)
    # room 1.25e-6 * 0.64 - 2.5e-7 = 5.5e-7 for 2e-5 / n: n = 37 (36.4 rounded up); runs: 5e-6 / 8e-7 = 6.25 -> 7
    assert runs_needed.repeats_to_decide(quiet, 0.8) == 37
    assert runs_needed.runs_to_decide(quiet, 0.8) == 7
    # the reference's runs, the submission as it is: room 5.5e-6 * 0.81 - 3.5e-6 = 9.55e-7 for 2e-6 * 5 / k
    limited = runs_needed.Noise(within=4e-6, between=1e-5, reference=2e-6, runs=4, repeats=20, reference_runs=5)
    assert runs_needed.reference_runs_to_decide(limited, 0.9) == 11  # 10.47 rounded up
    assert runs_needed.reference_runs_to_decide(limited, 0.5) is None  # the submission's part is wider
    # then both, the fewest in all: target 1.375e-6, a = 1.4e-5, b = 1e-5, sqrt(ab) = 1.1832e-5
    assert runs_needed.runs_of_both_to_decide(limited, 0.5) == (19, 16)  # 18.79 and 15.88 rounded up
    assert 1.4e-5 / 19 + 1e-5 / 16 <= 5.5e-6 * 0.25


def test_figures_are_for_an_80_percent_chance() -> None:
    """An interval that just fits decides half the time; for 80% the standard error must fit z + z_0.8 times."""
    assert runs_needed.for_power(1.0, confidence=0.90) == pytest.approx(1.644854 / (1.644854 + 0.841621), rel=1e-5)
    assert runs_needed.for_power(0.5, confidence=0.90, power=0.5) == pytest.approx(0.5)


def test_shrink_to_decide_reads_each_arm_of_an_asymmetric_interval() -> None:
    goal, factor = runs_needed.shrink_to_decide(1.0, 0.98, 1.005, 0.01)
    assert goal == "PASS"  # the lower arm (2.02% in logs) must fit in 1.005% of room: about a half
    assert factor == pytest.approx(math.log(1 / 0.99) / math.log(1 / 0.98))
    goal, factor = runs_needed.shrink_to_decide(0.985, 0.975, 0.995, 0.01)
    assert goal == "FAIL" and factor == pytest.approx(math.log(0.99 / 0.985) / math.log(0.995 / 0.985))
    assert runs_needed.shrink_to_decide(0.99, 0.98, 1.0, 0.01)[1] == 0  # on the edge: nothing narrower decides


def test_the_runs_a_partner_is_told_it_needs_do_decide(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A partner 0.3% off with 2 runs is told ~N runs (for an 80% chance); the same partner with N runs of new
    draws PASSes at least that often."""
    reference = write_runs(tmp_path / "ref", 1.0, seed=11, runs=30)
    few = write_runs(tmp_path / "few", 1.003, seed=12, runs=2)
    code, out, _ = gpuperf(capsys, "variance", "--reference", str(reference), str(few), "--format", "json")
    [partner] = json.loads(out)["partners"]
    assert code == 0 and partner["verdict"] == "INCONCLUSIVE", partner
    needed = partner["runs_needed"]
    assert needed is not None and needed > 2, partner
    assert f"~{needed} runs (now 2) would show all 2 workload(s) within 1 ± 1.00% (80% of the time" in partner["detail"]
    rows = json.loads(out)["rows"]
    assert all(row["verdict"] == "PASS" or row["runs_needed"] <= needed for row in rows)
    passed = 0
    for seed in range(20, 25):
        enough = write_runs(tmp_path / f"enough{seed}", 1.003, seed=seed, runs=needed)
        _, out, _ = gpuperf(capsys, "variance", "--reference", str(reference), str(enough), "--format", "json")
        passed += json.loads(out)["partners"][0]["verdict"] == "PASS"
    assert passed >= 4, passed


def test_a_partner_outside_the_band_is_told_no_number_of_runs_would_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = write_runs(tmp_path / "ref", 1.0, seed=31, runs=6)
    edge = write_runs(tmp_path / "edge", 0.987, seed=32, runs=1, repeats=10)
    code, out, _ = gpuperf(capsys, "variance", "--reference", str(reference), str(edge), "--format", "json")
    document = json.loads(out)
    [partner] = document["partners"]
    assert partner["runs_needed"] is None and "no number of runs would show equivalence" in partner["detail"]
    outside = [row for row in document["rows"] if row["verdict"] == "INCONCLUSIVE"]
    assert all("no number of runs would show equivalence" in row["detail"] for row in outside)


def test_without_cryptography_the_command_says_what_to_install(world: Path) -> None:
    """The 'sign' extra missing: one line naming it, for variance --trust and sign alike, never an ImportError."""
    script = (
        "import sys; sys.modules['cryptography'] = None\n"  # what an absent package looks like to an import
        "from pytest_gpuperf.cli import main\n"
        "raise SystemExit(main.main(sys.argv[1:]))\n"
    )
    for argv in (
        trusted(world, "near"),
        ["sign", "--key", str(world / "near.key"), str(world / "near"), "-o", str(world / "again.sig")],
        ["verify", "--public-key", str(world / "near.key.pub"), str(world / "near")],
    ):
        done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and "pip install 'pytest-gpuperf[sign]'" in done.stderr, done.stderr
        assert done.stdout == ""


def test_a_partner_the_reference_holds_back_is_told_how_many_reference_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 4-run reference whose runs move 0.6% apart: its own part of the interval leaves a partner 0.3% off no
    room, whatever the partner's runs; the answer asks the reference for more runs, by number."""
    reference = write_runs(tmp_path / "ref", 1.0, seed=52, runs=4, between=0.006)
    partner = write_runs(tmp_path / "partner", 1.003, seed=552, runs=6)
    code, out, _ = gpuperf(capsys, "variance", "--reference", str(reference), str(partner), "--format", "json")
    document = json.loads(out)
    [summary] = document["partners"]
    assert code == 0 and summary["verdict"] == "INCONCLUSIVE" and summary["runs_needed"] is None, summary
    held = [row for row in document["rows"] if row.get("reference_runs_needed")]
    assert held and all(row["reference_runs_needed"] > 4 and row["runs_needed"] is None for row in held)
    assert summary["reference_runs_needed"] == max(row["reference_runs_needed"] for row in held)
    assert f"~{summary['reference_runs_needed']} reference runs (now 4)" in summary["detail"]
    assert "the reference holds back" in summary["detail"]
