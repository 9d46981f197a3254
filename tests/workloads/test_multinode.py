"""Multi-node runs (issue 16 item 12b): two torchrun agents on this machine stand for two nodes
(``--nnodes 2 --nproc-per-node 2``, a c10d rendezvous on 127.0.0.1), each starting two pytest processes as ranks.

One job passes with 4 ranks, the results of global rank 0 only and a hardware key of 2 nodes; in another a node
is lost mid-run (its agent and its ranks SIGKILLed, as a dead machine would be) and the surviving node ends in
bounded time with a clear error. 4 ranks each importing torch on 2 busy cores take ~10-20 s to start: the
workload is tiny, the limits generous but bounded.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO_ROOT = Path(__file__).resolve().parents[2]
START_LIMIT_S = 240.0
"""4 pytest ranks and 2 agents starting on 2 loaded cores."""
END_LIMIT_S = 120.0
"""How long the surviving node may take to end after the other is lost (the process-group timeout is 30 s here)."""
PEER_GONE = "lost: a peer rank is gone (its process or its node died)"
"""What launch() says on a surviving rank whose peer's process or node died (distributed/launch.py)."""

PROJECT = textwrap.dedent(
    """
    import os
    import time
    from pathlib import Path

    from pytest_gpuperf import launch


    def timed_all_reduces(count):
        import torch
        import torch.distributed as dist

        tensor = torch.ones(256)
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            dist.all_reduce(tensor)
            samples.append(time.perf_counter() - start)
        return dist.get_rank(), int(os.environ["GROUP_RANK"]), os.getpid(), samples


    def test_all_reduce_across_two_nodes(perf):
        results = launch(timed_all_reduces, 5, timeout=120)
        assert [r[0] for r in results] == [0, 1, 2, 3]
        assert sorted(r[1] for r in results) == [0, 0, 1, 1]  # two ranks on each node
        assert len({r[2] for r in results}) == 4
        slowest = [max(step) for step in zip(*(r[3] for r in results))]
        perf.record("all_reduce_s", slowest, unit="s", higher_is_better=False)


    def all_reduce_until_stopped(folder):
        import torch
        import torch.distributed as dist

        tensor = torch.ones(4)
        dist.all_reduce(tensor)
        Path(folder, f"rank{dist.get_rank()}").touch()  # every rank is in the loop
        while True:
            dist.all_reduce(tensor)
            time.sleep(0.01)


    def test_a_node_is_lost():
        launch(all_reduce_until_stopped, os.environ["NODE_LOSS_FOLDER"], timeout=300)
    """
)


def _free_port() -> int:
    # torchrun's c10d rendezvous needs a port named in advance; the short race with other binders is accepted
    # in this test (the launcher itself never does this).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _listens_on(pid: int, port: int) -> bool:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def _all_gone(pids: list[int], limit_s: float = 30.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        running = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                running.append(pid)
        if not running:
            return True
        time.sleep(0.2)
    return False


class Nodes:
    """Two torchrun agents of one job, their logs, and the kill of one node (the agent and the ranks it started:
    torchrun puts each rank in a session of its own, so a process-group kill would miss them)."""

    def __init__(self, folder: Path, env: dict[str, str], pytest_args: list[str]) -> None:
        self.folder = folder
        self.port = _free_port()
        self.agents: list[subprocess.Popen[bytes]] = []
        self.logs = [folder / f"node{n}.log" for n in range(2)]
        self.ranks: dict[int, list[int]] = {}
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{self.port}",
            "--rdzv-id",
            f"gpuperf-test-{os.getpid()}",
            "--max-restarts",
            "0",
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            *pytest_args,
        ]
        for log in self.logs:
            with open(log, "wb") as out:
                self.agents.append(subprocess.Popen(command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT))

    def wait(self, agent: int, limit_s: float) -> int:
        return self.agents[agent].wait(timeout=limit_s)

    def output(self, agent: int) -> str:
        return self.logs[agent].read_text(errors="replace")

    def host(self) -> int:
        """The agent that serves the c10d rendezvous store (whichever bound the port first)."""
        for _ in range(50):
            hosts = [n for n, agent in enumerate(self.agents) if _listens_on(agent.pid, self.port)]
            if hosts:
                return hosts[0]
            time.sleep(0.1)
        raise AssertionError(f"neither agent listens on the rendezvous port {self.port}")

    def lose(self, agent: int) -> None:
        """SIGKILL the agent and its ranks at once, as a node that loses power."""
        victims = [self.agents[agent].pid, *_children(self.agents[agent].pid)]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.agents[agent].wait()

    def close(self) -> None:
        """Whatever happened, leave nothing running."""
        for agent in self.agents:
            if agent.poll() is None:
                for pid in [agent.pid, *_children(agent.pid)]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                agent.wait()


@pytest.fixture
def nodes(tmp_path):
    (tmp_path / "test_two_nodes.py").write_text(PROJECT)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTEST_", "GPUPERF_"))}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    env["GPUPERF_PG_TIMEOUT"] = "30"
    env["NODE_LOSS_FOLDER"] = str(tmp_path / "looping")
    (tmp_path / "looping").mkdir()
    started: list[Nodes] = []

    def start(*pytest_args: str) -> Nodes:
        job = Nodes(tmp_path, env, list(pytest_args))
        started.append(job)
        return job

    yield start
    for job in started:
        job.close()


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="finds processes and sockets through Linux's /proc")
def test_two_nodes_run_four_ranks_and_only_global_rank_0_reports(nodes, tmp_path):
    job = nodes("-q", "test_two_nodes.py", "-k", "across", "--gpuperf-results", "results.json")
    codes = [job.wait(n, START_LIMIT_S) for n in range(2)]
    outputs = [job.output(n) for n in range(2)]
    assert codes == [0, 0], "\n".join(outputs)
    combined = "\n".join(outputs)
    assert combined.count("1 passed, 1 deselected") == 4, combined  # every rank ran the test
    assert combined.count("=== gpuperf ===") == 1, combined  # and one rank reported
    document = json.loads((tmp_path / "results.json").read_text())
    assert document["fingerprint"]["hardware_slug"].endswith("-2nodes"), document["fingerprint"]
    assert [r["metric"] for r in document["results"]] == ["all_reduce_s"]


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="finds processes and sockets through Linux's /proc")
@pytest.mark.parametrize("lost", ["member", "host"])
def test_losing_a_node_mid_run_ends_the_other_in_bounded_time_with_a_clear_error(nodes, tmp_path, lost):
    job = nodes("-q", "--tb=short", "test_two_nodes.py", "-k", "lost")
    looping = tmp_path / "looping"
    deadline = time.monotonic() + START_LIMIT_S
    while len(list(looping.iterdir())) < 4:
        assert all(agent.poll() is None for agent in job.agents), job.output(0) + job.output(1)
        assert time.monotonic() < deadline, "the 4 ranks did not all start in time"
        time.sleep(0.2)
    host = job.host()
    ranks = [pid for agent in job.agents for pid in _children(agent.pid)]
    assert len(ranks) == 4, ranks
    victim = host if lost == "host" else 1 - host
    survivor = 1 - victim
    job.lose(victim)
    lost_at = time.monotonic()
    code = job.wait(survivor, END_LIMIT_S)
    ended_after = time.monotonic() - lost_at
    output = job.output(survivor)
    assert code != 0, output
    assert ended_after < END_LIMIT_S, ended_after
    if lost == "member":
        # The surviving ranks' test fails with the launcher's error, which names what happened. (Not always both
        # ranks' reports: torchrun's agent stops the second rank as soon as the first has exited.)
        assert "FAILED test_two_nodes.py::test_a_node_is_lost" in output, output
        assert PEER_GONE in output, output
        assert "by peer" in output, output  # gloo's own words: "Connection closed/reset by peer"
    else:
        # The rendezvous store went with the node. Two clear endings race, and either may come first: torchrun's
        # agent finds its store gone and says so, or the surviving ranks find their gloo peers gone and fail the
        # test with the launcher's error (seen in CI on 2026-12-06, the agent then only reports a failed child).
        store_gone = "The connection to the C10d store has failed" in output
        peers_gone = PEER_GONE in output
        assert store_gone or peers_gone, output
    assert _all_gone(ranks), f"ranks {ranks} outlived the job"
