"""The Slurm recipes against a real Slurm on this machine (tests/conftest.py's ``local_slurm``: 4 nodes n1..n4).

Node acceptance as one job (examples/slurm/acceptance.sbatch, ``gpuperf accept``): a node made 2x slower through
its own environment (the local Slurm's TaskProlog) is the only one listed and the job exits 1; four equal nodes
exit 0; a node whose slurmd and step die mid-job is named, in bounded time, with the others' results kept. The
workload is a tiny CPU-time loop, not the tier (tests/workloads/test_acceptance_tier.py runs the tier): what is
tested here is Slurm's part, and all of it must stay within ~90 s of CI on 2 cores.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "examples" / "slurm" / "acceptance.sbatch"
JOB_LIMIT_S = 180.0

SPIN = textwrap.dedent(
    """
    import os
    import time


    def test_spin(perf):
        if os.environ.get("SPIN_HANG"):
            time.sleep(600)  # a node that hangs
        work = int(40000 * float(os.environ.get("SPIN_FACTOR", "1")))
        samples = []
        for _ in range(15):
            start = time.thread_time()
            total = 0
            for i in range(work):
                total += i
            samples.append(time.thread_time() - start)
        perf.record("spin_s", samples, unit="s", higher_is_better=False, context={"device": "cpu"})
    """
)


def submit(
    cluster: Any, tmp_path: Path, *, timeout_s: float = 60, extra: dict[str, str] | None = None
) -> tuple[int, str]:
    """examples/slurm/acceptance.sbatch on every node of ``cluster`` with the spin test; (exit status, output)."""
    (tmp_path / "test_spin.py").write_text(SPIN)
    output = tmp_path / "job.out"
    env = {
        **cluster.env,
        "PYTHON": sys.executable,
        "GPUPERF_CHECKOUT": str(ROOT),
        "GPUPERF_OUT": str(tmp_path / "out"),
        "GPUPERF_NODE_TIMEOUT": str(timeout_s),
        "GPUPERF_PYTEST_ARGS": f"{tmp_path / 'test_spin.py'} -q --rootdir {tmp_path}",
        **(extra or {}),
    }
    status = cluster.run_batch(
        [f"--nodes={len(cluster.nodes)}", f"--output={output}", str(SBATCH)], env=env, limit_s=JOB_LIMIT_S
    )
    return status, output.read_text() if output.exists() else "(no job output)"


def test_a_node_twice_as_slow_is_the_only_one_listed(local_slurm: Any, tmp_path: Path) -> None:
    local_slurm.set_node_env("n3", {"SPIN_FACTOR": "2"})
    try:
        status, output = submit(local_slurm, tmp_path)
    finally:
        local_slurm.set_node_env("n3", {})
    assert status == 1, output
    assert re.findall(r"^LISTED (\S+)", output, re.M) == ["n3"], output
    assert "1 of 4 nodes listed (n3)" in output and "none lost" in output


def test_four_equal_nodes_pass(local_slurm: Any, tmp_path: Path) -> None:
    status, output = submit(local_slurm, tmp_path)
    assert status == 0, output
    assert "0 of 4 nodes listed; exit 0" in output
    assert sorted(path.name for path in (tmp_path / "out" / "nodes").iterdir()) == [f"n{i}.json" for i in range(1, 5)]


def _step_processes(cluster: Any, node: str) -> list[int]:
    """The slurmstepd of ``node``'s acceptance step and everything under it (what a dead machine takes along)."""
    steps = subprocess.run(
        ["squeue", "-h", "--steps", "-o", "%i %j"], env=cluster.env, capture_output=True, text=True
    ).stdout
    ids = [line.split()[0] for line in steps.splitlines() if line.endswith(f"gpuperf-accept-{node}")]
    parents: dict[int, int] = {}
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = Path(stat.parent, "cmdline").read_bytes()
        except OSError:
            continue
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        if any(cmdline.startswith(f"slurmstepd: [{step}]".encode()) for step in ids):
            found.append(pid)
    tree = list(found)
    for pid in tree:
        tree.extend(child for child, parent in parents.items() if parent == pid and child not in tree)
    return tree


def test_a_lost_node_is_named_and_the_others_are_judged(tmp_path: Path) -> None:
    """n4 hangs, then its slurmd and its step are killed as a dead machine's would be: the job ends within its
    node timeout naming n4, the three others' results are on disk, and nothing of the cluster is left running."""
    from pytest_gpuperf.slurm.local import LocalSlurm, leftovers, missing

    reason = missing()
    if reason is not None:
        pytest.skip(f"no local Slurm: {reason}")
    cluster = LocalSlurm(tmp_path / "slurm", nodes=4).start()
    try:
        cluster.set_node_env("n4", {"SPIN_HANG": "1"})
        job = tmp_path / "job"
        job.mkdir()
        started = time.monotonic()
        if True:

            def kill_n4() -> None:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and not _step_processes(cluster, "n4"):
                    time.sleep(0.2)
                time.sleep(2)
                victims = _step_processes(cluster, "n4")
                cluster.daemon_of("n4").process.kill()
                for pid in victims:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass

            thread = threading.Thread(target=kill_n4)
            thread.start()
            status, output = submit(cluster, job, timeout_s=40)
            thread.join()
        took = time.monotonic() - started
        assert status == 1, output
        assert re.search(r"^LOST n4: no results; ", output, re.M), output
        assert "LOST n1" not in output and "LOST n2" not in output and "LOST n3" not in output
        assert sorted(p.name for p in (job / "out" / "nodes").iterdir()) == ["n1.json", "n2.json", "n3.json"]
        assert took < 40 + 60, f"the job took {took:.0f} s"
    finally:
        cluster.stop()
    assert leftovers(cluster.folder, cluster.conf) == []
