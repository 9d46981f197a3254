"""The Slurm recipes against a real Slurm on this machine (tests/conftest.py's ``local_slurm``: 4 nodes n1..n4).

Node acceptance as one job (examples/slurm/acceptance.sbatch, ``gpuperf accept``): a node made 2x slower through
its own environment (the local Slurm's TaskProlog) is the only one listed and the job exits 1; four equal nodes
exit 0; a node whose slurmd and step die mid-job is named, in bounded time, with the others' results kept. The
workload is a tiny CPU-time loop, not the tier (tests/workloads/test_acceptance_tier.py runs the tier): what is
tested here is Slurm's part. Multi-node training: the distributed suite's DDP test saved from a 2-node Slurm step,
then judged under examples/slurm/distributed.sbatch (srun + torchrun). The release A/B: examples/slurm/ab.sbatch
on one node. What these cost in CI: benchmarks/README.md, "Node acceptance as one Slurm job".
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from slurm_spin import SPIN

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "examples" / "slurm" / "acceptance.sbatch"
JOB_LIMIT_S = 180.0


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
        killed: list[int] = []

        def kill_n4() -> None:
            # Once the three others wrote their results, n4 is surely in its step (its pytest hangs): kill the node.
            written = [job / "out" / "nodes" / f"n{i}.json" for i in (1, 2, 3)]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all(path.exists() for path in written):
                time.sleep(0.2)
            killed.extend(cluster.kill_node("n4"))

        thread = threading.Thread(target=kill_n4)
        thread.start()
        status, output = submit(cluster, job, timeout_s=40)
        thread.join()
        took = time.monotonic() - started
        assert killed, "n4's step was never found to kill"
        assert status == 1, output
        assert re.search(r"^LOST n4: no results; ", output, re.M), output
        assert "LOST n1" not in output and "LOST n2" not in output and "LOST n3" not in output
        assert sorted(p.name for p in (job / "out" / "nodes").iterdir()) == ["n1.json", "n2.json", "n3.json"]
        assert took < 40 + 60, f"the job took {took:.0f} s"
    finally:
        cluster.stop()
    assert leftovers(cluster.folder, cluster.conf) == []


def _job_processes(job: str) -> list[int]:
    """Processes that belong to Slurm job ``job`` (its batch script, its sruns and their tasks carry SLURM_JOB_ID)."""
    sign = f"SLURM_JOB_ID={job}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if sign in environ.read_bytes().split(b"\0"):
                state = Path(environ.parent, "stat").read_text().rsplit(")", 1)[1].split()[0]
                found.extend([int(environ.parent.name)] if state not in ("Z", "X") else [])
        except (OSError, IndexError):
            continue
    return found


def test_sigterm_mid_job_stops_the_steps_and_judges_the_nodes_that_finished(local_slurm: Any, tmp_path: Path) -> None:
    """n4 hangs; once n1-n3 wrote their results, the batch step (gpuperf accept) gets SIGTERM as from scancel or
    the job's --time: it stops n4's step, judges the three finished nodes with the fleet rule, says it was
    interrupted and exits 143; nothing of the job is left running, no step of it listed."""
    job: list[str] = []

    def terminate() -> None:
        written = [tmp_path / "out" / "nodes" / f"n{i}.json" for i in (1, 2, 3)]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(path.exists() for path in written):
            time.sleep(0.2)
        listed = subprocess.run(
            ["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True, env=local_slurm.env, check=False
        ).stdout
        job.extend(line.split()[0] for line in listed.splitlines() if line.endswith(" gpuperf-acceptance"))
        subprocess.run(["scancel", "--batch", "--signal=TERM", *job], env=local_slurm.env, check=False)

    local_slurm.set_node_env("n4", {"SPIN_HANG": "1"})
    thread = threading.Thread(target=terminate)
    thread.start()
    try:
        status, output = submit(local_slurm, tmp_path)
    finally:
        thread.join()
        local_slurm.set_node_env("n4", {})
    assert job, output
    assert status == 143, output
    assert re.search(r"^INTERRUPTED n4: .*stopped when the job was interrupted", output, re.M), output
    assert "3 of 4 node(s) judged" in output and "interrupted (SIGTERM), not a pass; exit 143" in output, output
    assert re.findall(r"^(?:LISTED|OK|LOST|FAILED) (\S+)", output, re.M) == [], output  # n4 is named once, above
    assert {f"n{i}.json" for i in (1, 2, 3)} <= {path.name for path in (tmp_path / "out" / "nodes").iterdir()}
    assert (tmp_path / "out" / "fleet.html").is_file()
    steps = subprocess.run(
        ["squeue", "-h", "--steps", "--jobs", job[0]], capture_output=True, text=True, env=local_slurm.env
    )
    assert steps.stdout.strip() == "", steps.stdout
    assert _job_processes(job[0]) == []


RANKS = textwrap.dedent(
    """
    import os

    from pytest_gpuperf import launch


    def where():
        import torch
        import torch.distributed as dist

        total = torch.ones(1)
        dist.all_reduce(total)
        return dist.get_rank(), os.environ.get("SLURMD_NODENAME"), os.environ["MASTER_ADDR"], total.item()


    def test_two_nodes():
        ranks = launch(where, timeout=120)
        assert [r[0] for r in ranks] == [0, 1] and {r[3] for r in ranks} == {2.0}, ranks
        # Slurm's order, one rank on each node, the first node's NodeAddr as the rendezvous
        assert [r[1] for r in ranks] == ["n1", "n2"] and {r[2] for r in ranks} == {"127.0.0.1"}, ranks
    """
)
DDP = "--pyargs pytest_gpuperf.suites.test_distributed -k ddp"
"""The distributed suite's DDP test (dp=2; its dp=4 case and the GPU tier's skip in a 2-rank CPU job). One word for
-k: distributed.sbatch splits GPUPERF_PYTEST_ARGS on spaces."""


def _two_node_job(cluster: Any, tmp_path: Path, name: str, script: list[str], env: dict[str, str]) -> tuple[int, str]:
    from pytest_gpuperf.slurm.local import LocalSlurm

    assert isinstance(cluster, LocalSlurm)
    output = tmp_path / f"{name}.out"
    status = cluster.run_batch(["--nodes=2", f"--output={output}", *script], env=env, limit_s=JOB_LIMIT_S)
    return status, output.read_text() if output.exists() else "(no job output)"


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_ddp_suite_saved_from_a_slurm_step_then_2x_the_work_under_srun_torchrun_fails(
    local_slurm: Any, tmp_path: Path
) -> None:
    """Two 2-node jobs running the distributed suite's DDP test. First ``srun pytest`` with GPUPERF_SLURM_RANKS=1:
    Slurm's task ids are the ranks and the first node's NodeAddr the rendezvous (asserted by a rank test beside
    it), only rank 0 writes results (a 2-node hardware key) and saves the baseline. Then
    examples/slurm/distributed.sbatch (one torchrun per node, c10d at the first node) with every step given 2x its
    work fails: a metric REGRESSED, saying it was not re-measured (a multi-node job cannot relaunch itself to
    confirm; a change beyond what a transient explains fails anyway). Either metric: tokens/s read REGRESSED in
    every such job so far, scaling_efficiency (over a single-rank reference timed in the same job) in all but one.

    Settings: OMP_NUM_THREADS=1, since both emulated nodes share this machine's 2 cores (torchrun sets it only for
    several ranks per node; a rank per node with every core oversubscribed the cores and made each step ~50x
    slower, its samples spread 40-100%); --gpuperf-machine-id, since c10d puts rank 0 on either node and the two
    jobs must be one machine's. --gpuperf-machine-check record shows the judge on the samples, as an --exclusive
    node gives it: on these shared cores the check reads the other node's rank and the other processes as
    explaining 6-7x and keeps a 2x NOISY, which is right here (their load moved tokens/s 2.3-2.7x between two
    unchanged jobs, which then failed in 3 of 5 trials with the check recording only). What an unchanged job and
    a 2x read with each setting: benchmarks/slurm_distributed.py, benchmarks/README.md."""
    (tmp_path / "test_ranks.py").write_text(RANKS)
    common = (
        f"--rootdir {tmp_path} --gpuperf-baselines {tmp_path / 'baselines'} --gpuperf-machine-id two-node-job "
        "--gpuperf-machine-check record"
    )
    results = tmp_path / "results.json"
    base = {**local_slurm.env, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    env = {**base, "GPUPERF_SLURM_RANKS": "1", "MASTER_PORT": str(_free_port())}
    pytest_args = (
        f"--pyargs pytest_gpuperf.suites.test_distributed {tmp_path / 'test_ranks.py'} -k 'ddp or two_nodes' -q "
        f"-p no:randomly {common} "
        f"--gpuperf-results {results} --gpuperf-save"
    )
    status, output = _two_node_job(
        local_slurm,
        tmp_path,
        "ranks",
        ["--ntasks-per-node=1", f"--wrap=srun {sys.executable} -m pytest -p no:cacheprovider {pytest_args}"],
        env,
    )
    assert status == 0 and "baselines: 2 of 2 measurements saved" in output, output
    assert output.count("results written:") == 1, output
    saved = json.loads(results.read_text())
    assert saved["fingerprint"]["hardware_key"]["nodes"] == 2
    assert {r["metric"] for r in saved["results"]} == {"tokens_per_s_per_device", "scaling_efficiency"}, saved

    env = {
        **base,
        "PYTHON": sys.executable,
        "GPUPERF_CHECKOUT": str(ROOT),
        "GPUPERF_NPROC_PER_NODE": "1",
        "GPUPERF_RDZV_PORT": str(_free_port()),
        "GPUPERF_PYTEST_ARGS": f"{DDP} {common} --gpuperf-inject-slowdown distributed=99",
    }
    status, output = _two_node_job(
        local_slurm, tmp_path, "torchrun", [str(ROOT / "examples/slurm/distributed.sbatch")], env
    )
    assert status != 0, output
    regressed = re.findall(r"^(\w+): REGRESSED - .*not re-measured", output, re.M)
    assert set(regressed) & {"tokens_per_s_per_device", "scaling_efficiency"}, output


AB_WORKLOAD = textwrap.dedent(
    """
    import os

    import pytest


    @pytest.mark.perf
    def test_fixed(perf):
        # Known figures, the same in every session: the verdict is the recipe's exit status, not the machine's load
        slow = float(os.environ.get("AB_SLOWDOWN", "1"))
        perf.record("latency", [0.010 * slow * j for j in (1.0, 1.0004, 0.9997, 1.0002, 0.9999)], unit="s",
                    higher_is_better=False)
    """
)


def test_the_ab_recipe_exits_with_ab_s_verdict_and_writes_where_it_says(local_slurm: Any, tmp_path: Path) -> None:
    """examples/slurm/ab.sbatch on one node: two "venvs" (this interpreter, B with a 2x slower workload), 3 pairs of
    a metric of fixed figures. The job exits 1 (REGRESSED) and leaves results/ab-JOBID/ab.json and
    results/ab-JOBID.xml in its folder (GPUPERF_CHECKOUT), as the recipe says."""
    (tmp_path / "test_ab_fixed.py").write_text(AB_WORKLOAD)
    env = {
        **local_slurm.env,
        "PYTHON": sys.executable,
        "GPUPERF_CHECKOUT": str(tmp_path),  # where the job runs and writes results/
        "GPUPERF_A": sys.executable,
        "GPUPERF_B": f"env AB_SLOWDOWN=2 {sys.executable}",
        # One metric: --alpha 0.3 is what 3 pairs all one way reach. --take-turns said, not probed (the probe imports
        # torch in a subprocess); --cpus all: pinned to one core beside the other xdist worker a pair took ~11 s.
        "GPUPERF_AB_ARGS": "--alpha 0.3 --min-pairs 3 --max-pairs 3 --cpus all --take-turns",
        "GPUPERF_PYTEST_ARGS": "test_ab_fixed.py -q -p no:cacheprovider -p no:xdist -p no:randomly "
        "--gpuperf-device cpu --gpuperf-machine-check off",
    }
    output = tmp_path / "ab.out"
    status = local_slurm.run_batch(
        [f"--output={output}", str(ROOT / "examples" / "slurm" / "ab.sbatch")],
        env=env,
        limit_s=JOB_LIMIT_S,
    )
    text = output.read_text() if output.exists() else "(no job output)"
    assert status == 1, text
    assert re.search(r"test_ab_fixed.py::test_fixed .*REGRESSED", text), text
    (folder,) = (path.parent for path in (tmp_path / "results").glob("ab-*/ab.json"))
    assert folder.name == f"ab-{int(folder.name[3:])}" and (folder / "ab.json").is_file(), text
    assert json.loads((folder / "ab.json").read_text())["metrics"][0]["verdict"] == "REGRESSED"
    assert "<failure" in (tmp_path / "results" / f"{folder.name}.xml").read_text()


@pytest.mark.parametrize("recipe", sorted((ROOT / "examples" / "slurm").glob("*.sbatch")), ids=lambda path: path.name)
def test_every_slurm_recipe_is_valid_bash_and_asks_for_whole_nodes(recipe: Path) -> None:
    """Every recipe is also submitted above; this names a syntax error before a job would."""
    done = subprocess.run(["bash", "-n", str(recipe)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --exclusive" in recipe.read_text()
