"""The `gpuperf` command under hostile-but-fair input (issue 16, items 6-9): devices and FIFOs where files were
expected, outputs that cannot be written, markup and lone surrogates in names, numbers at the edge of float range,
unreadable folders, XML with a DTD in any encoding, crafted hardware slugs, and forged duplicate JSON keys.

Every case ends in one line on stderr naming the input and what to do, exit status 2, no traceback; or, where the
input is fair (markup in a name), in a normal result. Cases that could hang or eat memory before the fix run the
command in a child process with a time limit and an address-space limit.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from fuzz_inputs import JUNIT, RESULTS, duplicate_key, utf16_dtd_bomb

from pytest_gpuperf.cli import main as cli
from pytest_gpuperf.cli.loading import InputError, read_bytes

ROOT = Path(__file__).resolve().parents[2]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def gpuperf(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(code: int, out: str, err: str, *expected: str) -> None:
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and err.startswith("gpuperf "), err
    assert "Traceback" not in out + err
    for text in expected:
        assert text in err, err


def child(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The command in its own process, bounded: 8 GiB of address space (numpy reserves some), ``timeout`` s."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    return subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )


@pytest.fixture()
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.json"
    path.write_text(json.dumps(RESULTS))
    return path


def with_changes(tmp_path: Path, name: str, change: object) -> Path:
    document = copy.deepcopy(RESULTS)
    change(document)  # type: ignore[operator]
    path = tmp_path / name
    path.write_text(json.dumps(document))  # ensure_ascii: a lone surrogate is written as its \\ud800 escape
    return path


# -- item 6: reads ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "fifo"])
def test_devices_and_fifos_are_refused_without_reading(tmp_path: Path, good: Path, device: str) -> None:
    if device == "fifo":
        device = str(tmp_path / "run.json")
        os.mkfifo(device)  # no writer: opening it for reading blocks forever
    elif not Path(device).exists():
        pytest.skip(f"{device} does not exist here")
    for argv in (["compare", device, str(good)], ["sign", "--key", device, str(good), "-o", str(tmp_path / "s")]):
        done = child(*argv)
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"{device}: is a " in done.stderr and "not a regular file" in done.stderr, done.stderr


def test_a_read_stops_at_the_limit_whatever_size_the_file_reports(tmp_path: Path) -> None:
    # /proc files report size 0 and hold more: the size check alone passes them, the bounded read must not.
    proc = Path("/proc/self/maps")
    if not proc.exists():
        pytest.skip("no /proc here")
    assert proc.stat().st_size == 0
    with pytest.raises(InputError, match="more than the 64 bytes a file may have"):
        read_bytes(proc, limit=64)
    small = tmp_path / "small.json"
    small.write_bytes(b"x" * 64)
    assert read_bytes(small, limit=64) == b"x" * 64
    small.write_bytes(b"x" * 65)
    with pytest.raises(InputError, match="65 bytes is larger than the 64 bytes"):
        read_bytes(small, limit=64)


def test_a_fifo_inside_a_folder_is_skipped_not_opened(tmp_path: Path, good: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "run.json").write_bytes(good.read_bytes())
    os.mkfifo(folder / "waiting.json")
    done = child("compare", str(folder), str(good), "--format", "json")
    assert done.returncode == 0, done.stderr[-2000:]


def test_fifos_as_baselines_and_outputs_are_refused_without_blocking(tmp_path: Path, good: Path) -> None:
    baselines = tmp_path / "baselines" / "some-slug"
    baselines.mkdir(parents=True)
    os.mkfifo(baselines / "suites__test_a.json")  # the store's reader would block on it
    os.mkfifo(tmp_path / "out.txt")  # nobody reads it: opening it to write would block
    cases = [
        # skipped like any non-regular entry, so the folder holds no baseline files
        (["baselines", "diff", str(tmp_path / "baselines"), str(tmp_path / "baselines")], "no baseline files"),
        (["baselines", "diff", "/dev/zero", str(tmp_path / "baselines")], "/dev/zero: is a character device"),
        (["compare", str(good), str(good), "-o", str(tmp_path / "out.txt")], "no program is reading"),
    ]
    for argv, expected in cases:
        done = child(*argv)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
        assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr


def output_target(tmp_path: Path, kind: str) -> str:
    if kind == "folder":
        (tmp_path / "out").mkdir()
        return str(tmp_path / "out")
    if kind == "under_a_file":
        (tmp_path / "plain").write_text("")
        return str(tmp_path / "plain" / "out.txt")
    if kind == "unwritable":
        if IS_ROOT:  # root writes through file modes; procfs still refuses it
            if not Path("/proc/version").exists():
                pytest.skip("no /proc here")
            return "/proc/version"
        target = tmp_path / "read-only.txt"
        target.write_text("")
        target.chmod(0o444)
        return str(target)
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    return "/dev/full"


@pytest.mark.parametrize("kind", ["folder", "under_a_file", "unwritable", "full_disk"])
@pytest.mark.parametrize("command", ["compare", "report", "sign"])
def test_an_output_that_cannot_be_written_is_one_line(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str], command: str, kind: str
) -> None:
    target = output_target(tmp_path, kind)
    if command == "compare":
        argv = ["compare", str(good), str(good), "-o", target]
    elif command == "report":
        pytest.importorskip("matplotlib")
        argv = ["report", str(good), "-o", target]
    else:
        pytest.importorskip("cryptography")
        key = tmp_path / "k"
        assert gpuperf(capsys, "keygen", str(key))[0] == 0
        argv = ["sign", "--key", str(key), str(good), "-o", target]
    code, out, err = gpuperf(capsys, *argv)
    assert_clean_error(code, out, err, f"{target}: cannot write")


def test_keygen_into_a_missing_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("cryptography")
    key = tmp_path / "missing" / "partner.key"
    code, out, err = gpuperf(capsys, "keygen", str(key))
    assert_clean_error(code, out, err, str(key.parent), "mkdir")
    # a public key that cannot be written leaves no private key behind
    (tmp_path / "k.pub").mkdir()
    code, out, err = gpuperf(capsys, "keygen", str(tmp_path / "k"))
    assert_clean_error(code, out, err, "k.pub")
    assert not (tmp_path / "k").exists()


MARKUP = "suites/test_llm.py::test_$\\frac{a}{$^_[$x$-\ud800]"


def test_markup_and_lone_surrogates_in_names_do_not_break_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")

    def change(document: dict) -> None:
        document["results"][0]["test"] = MARKUP
        document["results"][0]["unit"] = "$\\sqrt{$"
        document["curves"][0]["test"] = MARKUP
        document["curves"][0]["name"] = "loss_$\\alpha\udfff"
        document["fingerprint"]["stack"]["driver"] = "$^\ud800"

    path = with_changes(tmp_path, "markup.json", change)
    other = with_changes(tmp_path, "other.json", lambda d: d["fingerprint"]["stack"].update(driver="590.2"))
    report = tmp_path / "report.html"
    code, out, err = gpuperf(capsys, "report", str(path), str(other), "-o", str(report))
    assert code == 0, err
    text = report.read_text(encoding="utf-8")  # strict: the surrogate was made printable, not written raw
    assert "test_$\\frac{a}{$^_[$x$-\\ud800]" in text
    # the table commands print such names too, to standard output and to files
    code, out, err = gpuperf(capsys, "compare", str(path), str(path))
    assert code == 0, err
    assert "\\ud800" in out
    code, out, err = gpuperf(capsys, "compare", str(path), str(path), "-o", str(tmp_path / "c.txt"))
    assert code == 0 and "\\ud800" in (tmp_path / "c.txt").read_text(encoding="utf-8")


def test_a_report_of_samples_near_the_float_limit_is_refused_in_one_line(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The one validator (core/store/schema.py) bounds samples to 1e-100..1e100, so nothing downstream can overflow."""
    pytest.importorskip("matplotlib")
    huge = with_changes(tmp_path, "huge.json", lambda d: d["results"][0].update(samples=[1e308, 1.7e308, 1.6e308]))
    report = tmp_path / "report.html"
    code, out, err = gpuperf(capsys, "report", str(huge), str(good), "-o", str(report))
    assert code == 2 and "Traceback" not in err, err
    assert "samples[0] is 1e+308; samples must be between 1e-100 and 1e+100" in err
    assert len(err.strip().splitlines()) == 1 and not report.exists()


@pytest.mark.parametrize(
    ("reference", "submission"),
    [([1e-300] * 3, [1e300] * 3), ([1e-300] * 3, [5e-324, 5e-324, 1e308]), ([1e300] * 3, [1e-300] * 3)],
)
def test_samples_at_the_edge_of_float_range_do_not_crash_variance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reference: list[float], submission: list[float]
) -> None:
    ref = with_changes(tmp_path, "ref.json", lambda d: d["results"][0].update(samples=reference))
    sub = with_changes(tmp_path, "sub.json", lambda d: d["results"][0].update(samples=submission))
    code, out, err = gpuperf(capsys, "variance", "--reference", str(ref), str(sub))
    # The one validator bounds samples to 1e-100..1e100, so whichever side breaks that is named first.
    name = "ref.json" if not 1e-100 <= min(reference) <= max(reference) <= 1e100 else "sub.json"
    assert_clean_error(code, out, err, name, "tokens_per_s", "samples must be between 1e-100 and 1e+100")


def test_compare_and_history_name_samples_beyond_float_range(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = with_changes(
        tmp_path, "huge.json", lambda d: d["results"][0].update(samples=[1e308, 1.7e308, 1.6e308, 1.5e308])
    )
    code, out, err = gpuperf(capsys, "compare", str(good), str(huge))
    assert_clean_error(code, out, err, "huge.json", "tokens_per_s", "samples must be between 1e-100 and 1e+100")
    code, out, err = gpuperf(capsys, "history", str(good), str(huge))
    assert_clean_error(code, out, err, "huge.json", "tokens_per_s", "samples must be between 1e-100 and 1e+100")


def test_sign_refuses_a_number_beyond_float_range(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("cryptography")
    key = tmp_path / "k"
    assert gpuperf(capsys, "keygen", str(key))[0] == 0
    bad = tmp_path / "inf.json"
    bad.write_text(good.read_text().replace('"rounds": 1', '"rounds": 1e999', 1))
    code, out, err = gpuperf(capsys, "sign", "--key", str(key), str(bad))
    assert_clean_error(code, out, err, "inf.json", "1e999")
    # a folder given as '.' names its signature after the folder, not ''
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "run.json").write_bytes(good.read_bytes())
    cwd = Path.cwd()
    os.chdir(bundle)
    try:
        code, out, err = gpuperf(capsys, "sign", "--key", str(key), ".")
    finally:
        os.chdir(cwd)
    assert code == 0, err
    assert (tmp_path / "bundle.sig").exists()


def test_an_unreadable_folder_is_one_line(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "runs"
    locked = folder / "locked"
    locked.mkdir(parents=True)
    (folder / "run.json").write_bytes(good.read_bytes())
    (locked / "run.json").write_bytes(good.read_bytes())
    if IS_ROOT:  # root reads any folder: make the listing fail as it does for everyone else
        real = os.scandir

        def scandir(path: object = ".") -> object:
            if Path(os.fsdecode(path)) == locked:  # type: ignore[arg-type]
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "scandir", scandir)
    else:
        locked.chmod(0)
    try:
        for argv in (["compare", str(folder), str(good)], ["history", str(folder)]):
            code, out, err = gpuperf(capsys, *argv)
            assert_clean_error(code, out, err, f"{locked}: folder cannot be read (Permission denied)")
    finally:
        locked.chmod(0o755)


@pytest.mark.parametrize("command", ["compare", "keygen", "sign", "report", "diff", "output"])
def test_a_name_too_long_for_the_filesystem_is_one_line(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    long = str(tmp_path / ("a" * 300))  # ENAMETOOLONG: pathlib's is_dir() and exists() raise it
    argv = {
        "compare": ["compare", long, str(good)],
        "keygen": ["keygen", long + "/partner.key"],
        "sign": ["sign", "--key", long, str(good), "-o", str(tmp_path / "s.sig")],
        "report": ["report", str(good), "--baselines", long, "-o", str(tmp_path / "r.html")],
        "diff": ["baselines", "diff", long, long],
        "output": ["compare", str(good), str(good), "-o", long + "/out.txt"],
    }[command]
    if command == "report":
        pytest.importorskip("matplotlib")
    code, out, err = gpuperf(capsys, *argv)
    assert_clean_error(code, out, err, "a" * 300, "File name too long")


# -- item 7: XML -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-16-le", "utf-16-be"])
def test_a_dtd_is_refused_in_any_encoding(tmp_path: Path, capsys: pytest.CaptureFixture[str], encoding: str) -> None:
    bomb = tmp_path / "bomb.xml"
    bomb.write_bytes(utf16_dtd_bomb(encoding))
    assert b"<!DOCTYPE" not in bomb.read_bytes() or encoding == "utf-8"
    code, out, err = gpuperf(capsys, "compare", str(bomb), str(bomb))
    assert_clean_error(code, out, err, "bomb.xml: XML with a DTD or entity declarations")


def test_external_entities_are_refused_and_a_plain_utf16_file_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("1,2,3")
    external = tmp_path / "external.xml"
    external.write_text(
        f'<?xml version="1.0"?><!DOCTYPE t SYSTEM "{secret.as_uri()}">'
        + JUNIT.split("?>", 1)[1].replace("1000,1002.5", "&x;", 1)
    )
    code, out, err = gpuperf(capsys, "compare", str(external), str(external))
    assert_clean_error(code, out, err, "external.xml: XML with a DTD")
    wide = tmp_path / "wide.xml"
    wide.write_bytes(JUNIT.replace('encoding="utf-8"', 'encoding="utf-16"').encode("utf-16"))
    code, out, err = gpuperf(capsys, "compare", str(wide), str(wide), "--format", "json")
    assert code == 0, err
    assert len(json.loads(out)["rows"]) == 2


# -- item 8: paths built from input ----------------------------------------------------------------------------


def test_a_crafted_hardware_slug_cannot_read_outside_the_baselines_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    from pytest_gpuperf.core.store.baselines import BaselineStore, Curve, NewCurve

    baselines, outside = tmp_path / "baselines", tmp_path / "outside"
    baselines.mkdir()
    test = RESULTS["curves"][0]["test"]
    curve = Curve(steps=[0, 1, 2], values=[2.0, 1.4, 1.1], stack={}, date="d")
    for root in (outside, baselines):
        BaselineStore(root, "victim", {"device": "cpu"}).save(
            [], [NewCurve(test=test, name="loss", curve=curve)], keep_runs=5
        )
    from pytest_gpuperf.cli.loading import parse_results_json
    from pytest_gpuperf.cli.report_html import golden_curves

    run = parse_results_json(json.dumps(RESULTS).replace(RESULTS["fingerprint"]["hardware_slug"], "victim"), Path("r"))
    assert golden_curves(baselines, run, run.curves[0]) == [([0, 1, 2], [2.0, 1.4, 1.1])]  # a fair slug finds it
    (baselines / "victim" / "suites__test_train.json").unlink()
    for slug in ("../outside/victim", "..", "Victim/../../outside/victim", "/etc"):
        crafted = with_changes(
            tmp_path, "crafted.json", lambda d, slug=slug: d["fingerprint"].update(hardware_slug=slug)
        )
        code, out, err = gpuperf(
            capsys, "report", str(crafted), "--baselines", str(baselines), "-o", str(tmp_path / "r.html")
        )
        assert_clean_error(code, out, err, "crafted.json", "hardware_slug", "not a slug")


# -- item 9: signatures over what is parsed --------------------------------------------------------------------


def test_a_forged_duplicate_results_block_does_not_verify(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("cryptography")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    target = bundle / "run.json"
    target.write_bytes(good.read_bytes())
    key = tmp_path / "k"
    assert gpuperf(capsys, "keygen", str(key))[0] == 0
    assert gpuperf(capsys, "sign", "--key", str(key), str(bundle))[0] == 0
    # A second 'results' block before the real one: a first-wins reader (or a human) sees the forged numbers,
    # a last-wins reader the signed ones. Either way the file no longer says one thing.
    target.write_text(duplicate_key(good.read_text(), "results", first=True))
    code, out, err = gpuperf(capsys, "verify", "--public-key", f"{key}.pub", str(bundle))
    assert_clean_error(code, out, err, "run.json", "key 'results' appears twice")
    code, out, err = gpuperf(capsys, "sign", "--key", str(key), str(bundle))
    assert_clean_error(code, out, err, "run.json", "key 'results' appears twice")
    code, out, err = gpuperf(capsys, "compare", str(target), str(good))
    assert_clean_error(code, out, err, "run.json", "key 'results' appears twice")
    # duplicate keys in a nested object and in the signature file too
    target.write_text(good.read_text().replace('"unit": "s"', '"unit": "s", "unit": "ms"', 1))
    code, out, err = gpuperf(capsys, "compare", str(target), str(good))
    assert_clean_error(code, out, err, "run.json", "key 'unit' appears twice")
    target.write_bytes(good.read_bytes())
    signature = tmp_path / "bundle.sig"
    signature.write_text(duplicate_key(signature.read_text(), "files", first=True))
    code, out, err = gpuperf(capsys, "verify", "--public-key", f"{key}.pub", str(bundle))
    assert_clean_error(code, out, err, "bundle.sig", "key 'files' appears twice")


# -- issue 38, item 13: the bootstrap's memory does not grow with the sample count --------------------------------


def test_variance_of_a_million_sample_metric_stays_within_bounded_memory(tmp_path: Path) -> None:
    """2,000 whole resamples of 1M samples asked for ~15 GiB; the m-out-of-n bootstrap needs tens of MiB."""
    import random

    rng = random.Random(3)
    paths = []
    for name, centre in (("reference.json", 1.0), ("submission.json", 1.001)):
        document = copy.deepcopy(RESULTS)
        document["results"] = [
            dict(document["results"][1], samples=[centre + rng.random() / 100 for _ in range(10**6)])
        ]
        path = tmp_path / name
        path.write_text(json.dumps(document))
        paths.append(str(path))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    done = subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf.cli", "variance", "--reference", *paths, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit,
    )
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr[-2000:]
    [row] = json.loads(done.stdout)["rows"]
    assert row["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE") and 0.99 < row["ratio"] < 1.0
