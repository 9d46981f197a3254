"""`gpuperf baselines rekey`: a user's baselines keyed by the CPU's name move to this machine's current key."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_gpuperf.cli.main import main
from pytest_gpuperf.core.store.baselines import empty_document, read_document, write_atomic
from pytest_gpuperf.machine.fingerprint import collect

FINGERPRINT = collect("cpu")


def _legacy_folder(root: Path) -> Path:
    folder = root / FINGERPRINT.legacy_slug
    document = empty_document({"device": "cpu", "cpu": {"model": FINGERPRINT.labels["cpu"]}})
    document["tests"]["test_x"] = {
        "metrics": {
            "t": {
                "unit": "s",
                "higher_is_better": False,
                "runs": [{"samples": [1.0, 1.1, 1.2], "summary": {}, "stack": {}, "date": "2026-01-01"}],
            }
        }
    }
    folder.mkdir(parents=True, exist_ok=True)  # write_atomic writes into an existing folder only
    write_atomic(folder / "suites__test_micro.json", document)
    return folder


def test_rekey_moves_the_folder_and_writes_the_new_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = _legacy_folder(tmp_path)
    assert main(["baselines", "rekey", "--baselines", str(tmp_path), "--device", "cpu", "--dry-run"]) == 0
    assert old.is_dir() and "would move" in capsys.readouterr().out
    assert main(["baselines", "rekey", "--baselines", str(tmp_path), "--device", "cpu"]) == 0
    moved = read_document(tmp_path / FINGERPRINT.slug / "suites__test_micro.json")
    assert not old.exists() and moved["hardware_key"] == FINGERPRINT.hardware_key
    assert moved["tests"]["test_x"]["metrics"]["t"]["runs"][0]["samples"] == [1.0, 1.1, 1.2]
    assert main(["baselines", "rekey", "--baselines", str(tmp_path), "--device", "cpu"]) == 0  # idempotent
    assert "already keyed" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_rekey_in_a_git_work_tree_is_a_rename_git_follows(tmp_path: Path) -> None:
    old = _legacy_folder(tmp_path / "baselines")

    def git(*args: str) -> str:
        command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path), *args]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "baselines")
    assert main(["baselines", "rekey", "--baselines", str(tmp_path / "baselines"), "--device", "cpu"]) == 0
    git("add", "-A")
    status = git("status", "--porcelain")
    assert status.startswith("R") and FINGERPRINT.slug in status and old.name in status


def test_rekey_without_the_former_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["baselines", "rekey", "--baselines", str(tmp_path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and FINGERPRINT.legacy_slug in err and "machine that recorded them" in err


def test_rekey_refuses_to_merge_into_an_existing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _legacy_folder(tmp_path)
    (tmp_path / FINGERPRINT.slug).mkdir()
    assert main(["baselines", "rekey", "--baselines", str(tmp_path), "--device", "cpu"]) == 2
    assert "merge them by hand" in capsys.readouterr().err
    assert json.loads((tmp_path / FINGERPRINT.legacy_slug / "suites__test_micro.json").read_text())["tests"]
