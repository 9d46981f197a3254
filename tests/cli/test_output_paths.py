"""An output file's folder must exist, for every `gpuperf` command alike (issue 38, item 14).

`gpuperf report a.json -o /nonexistent/dir/out.html` created the folders and exited 0 while `gpuperf keygen`
refused a missing folder: now every option naming a file to write (``-o/--output``, ``--junitxml``) refuses one
in one line naming it, exit status 2, before any work and without creating anything.
"""

from __future__ import annotations

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
