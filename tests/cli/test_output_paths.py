"""An output file's folder must exist, for every `gpuperf` command alike (issue 38, item 14).

`gpuperf report a.json -o /nonexistent/dir/out.html` created the folders and exited 0 while `gpuperf keygen`
refused a missing folder: now every option naming a file to write (``-o/--output``, ``--junitxml``) refuses one
in one line naming it, exit status 2, before any work and without creating anything.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from fuzz_inputs import RESULTS

from pytest_gpuperf.cli import main as cli


@pytest.fixture()
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.json"
    path.write_text(json.dumps(RESULTS))
    return path


def argv_for(command: str, good: Path, target: str, tmp_path: Path) -> list[str]:
    baselines = tmp_path / "baselines"
    (baselines / "cpu-x").mkdir(parents=True, exist_ok=True)
    return {
        "compare": ["compare", str(good), str(good), "-o", target],
        "variance": ["variance", "--reference", str(good), str(good), "-o", target],
        "history": ["history", str(good), "-o", target],
        "report": ["report", str(good), "-o", target],
        "baselines diff": ["baselines", "diff", str(baselines), str(baselines), "-o", target],
        "models": ["models", "-o", target],
        "sign": ["sign", "--key", str(tmp_path / "no.key"), str(good), "-o", target],
        "ab": ["ab", "--a", "no-such-python-a", "--b", "no-such-python-b", "--junitxml", target, "--", "t.py"],
        "bisect": ["bisect", "--good", "a==1", "--bad", "a==2", "--junitxml", target, "--", "t.py"],
    }[command]


COMMANDS = ["compare", "variance", "history", "report", "baselines diff", "models", "sign", "ab", "bisect"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_output_folder_is_refused_in_one_line(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    target = str(missing / "out.file")
    code = cli.main(argv_for(command, good, target, tmp_path))
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and "Traceback" not in out + err, err
    assert err.startswith(f"gpuperf {command.split()[0]}: error: {target}: cannot write the "), err
    assert f"no such folder {missing}; create it (mkdir -p {missing})" in err, err
    assert not (tmp_path / "nonexistent").exists()


def test_the_writer_refuses_a_missing_folder_too(tmp_path: Path) -> None:
    """Commands that write without the option (or a future one) meet the same rule in cli/output.py."""
    from pytest_gpuperf.cli.loading import InputError
    from pytest_gpuperf.cli.output import write_text

    target = tmp_path / "missing" / "out.txt"
    with pytest.raises(InputError, match=r"out.txt: cannot write the report: no such folder .*missing; create it"):
        write_text(target, "text", what="report")
    assert not target.parent.exists()
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "gone" / "out.txt")  # a link into a missing folder: the folder it names counts
    with pytest.raises(InputError, match=r"link.txt: cannot write the output file: no such folder .*gone"):
        write_text(link, "text")
    assert not (tmp_path / "gone").exists()


@pytest.mark.parametrize("command", ["compare", "variance", "history"])
def test_an_existing_folder_is_written_as_before(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    target = tmp_path / "out.txt"
    code = cli.main(argv_for(command, good, str(target), tmp_path))
    out, err = capsys.readouterr()
    assert code in (0, 1) and err == "", (code, err)
    assert target.read_text()


# -- an output is never an input (issue 48, item 1) -------------------------------------------------------------


def _folder_of_runs(tmp_path: Path) -> Path:
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in ("node-1.json", "node-2.json"):
        (folder / name).write_text(json.dumps(RESULTS))
    return folder


@pytest.mark.parametrize(
    ("command", "target"),
    [
        (["fleet", "{dir}", "-o"], "{dir}/node-1.json"),
        (["fleet", "{dir}", "--html"], "{dir}/node-2.json"),
        (["fleet", "{dir}", "--save-spread"], "{dir}/node-1.json"),
        (["fleet", "{dir}", "--format", "json", "-o"], "{dir}/fleet.json"),
        (["report", "{dir}", "-o"], "{dir}/node-1.json"),
        (["compare", "{dir}/node-1.json", "{dir}/node-2.json", "-o"], "{dir}/node-2.json"),
        (["history", "{dir}", "-o"], "{dir}/sub/../node-1.json"),
        (["variance", "--reference", "{dir}/node-1.json", "{dir}/node-2.json", "-o"], "{dir}/node-1.json"),
        (["sign", "--key", "{dir}/node-1.json", "{dir}/node-2.json", "-o"], "{dir}/node-1.json"),
    ],
)
def test_an_output_that_is_an_input_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], target: str
) -> None:
    folder = _folder_of_runs(tmp_path)
    (folder / "sub").mkdir()
    before = {path.name: path.read_bytes() for path in folder.glob("*.json")}
    code = cli.main([part.format(dir=folder) for part in [*command, target]])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert "write it outside the inputs" in err and "Traceback" not in err
    assert {path.name: path.read_bytes() for path in folder.glob("*.json")} == before


def test_a_hard_link_to_an_input_is_that_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder_of_runs(tmp_path)
    link = tmp_path / "link.json"
    link.hardlink_to(folder / "node-1.json")
    assert cli.main(["report", str(link), "-o", str(link)]) == 2
    assert "names the input" in capsys.readouterr().err
    assert cli.main(["fleet", str(folder), "-o", str(link)]) == 2  # a file of the folder, under another name
    assert "is a hard link to a file of the input folder" in capsys.readouterr().err


def test_an_output_beside_the_inputs_that_is_not_read_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder_of_runs(tmp_path)
    assert cli.main(["history", str(folder), "-o", str(folder / "history.txt")]) in (0, 1)
    assert (folder / "history.txt").read_text()


def test_documents_commands_write_into_a_results_folder_are_skipped_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fleet's own --format json output and its spread file, an ab.json: every folder reader passes them over."""
    folder = _folder_of_runs(tmp_path)
    table = {"title": "gpuperf fleet: 2 node(s)", "headline": [], "notes": [], "rows": []}
    (folder / "fleet.json").write_text(json.dumps(table))
    (folder / "spread.json").write_text(json.dumps({"kind": "gpuperf-fleet-spread", "pooled": 0.01}))
    (folder / "ab.json").write_text(json.dumps({"schema": "gpuperf-ab/2"}))
    (folder / "table.json").write_text("gpuperf compare a -> b\nverdict: ...\n")  # -o x.json, --format table
    for argv in (["history", str(folder)], ["compare", str(folder), str(folder)]):
        assert cli.main(argv) in (0, 1)
        err = capsys.readouterr().err
        assert f"{folder / 'fleet.json'}: the JSON output of gpuperf fleet (--format json)" in err
        assert f"{folder / 'spread.json'}: a fleet spread file" in err and "ab.json: a gpuperf ab" in err
        assert "table.json: the output of a gpuperf command (a table, Markdown or HTML page)" in err
    (folder / "ab.json").unlink()  # report reads a folder's ab.json as the comparison to draw
    if importlib.util.find_spec("matplotlib") is not None:  # the report extra; CI's torch-free venv has none
        assert cli.main(["report", str(folder), "-o", str(tmp_path / "r.html")]) == 0
        assert "spread.json: a fleet spread file" in capsys.readouterr().err
    assert cli.main(["history", str(folder / "fleet.json")]) == 2
    assert "not a run's results; give the results files" in capsys.readouterr().err
