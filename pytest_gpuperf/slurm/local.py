"""A real Slurm on this machine: munged, slurmctld and N slurmd on loopback ports, all under one scratch folder.

One implementation for the test fixture and for users trying the recipes (``python -m pytest_gpuperf.slurm.local
--nodes 4 -- sbatch --wait examples/slurm/acceptance.sbatch``). Needs root and Debian's slurmctld, slurmd,
slurm-client and munge (``install()``); every daemon is a ``Supervised`` child stopped by pid, jobs cancelled
first. Per-node environment variables (a node made slow on purpose) go through a TaskProlog reading
``FOLDER/node-env/NODE``. Measured facts behind the configuration: docs/distributed.md, "A local Slurm".
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pytest_gpuperf.core.record.children import Stopping, Supervised

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
"""Debian's packages (22.05 on Debian 12). Never slurm-wlm-emulator: it repoints the daemons to a build that
will not start."""
COMMANDS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel", "scontrol")
MARKER = "LOCAL_SLURM_OF_PYTEST_GPUPERF"
"""Set in every daemon's environment (slurmstepd inherits it): how leftovers of this cluster are found. Not a
setting, so not named GPUPERF_*."""
START_LIMIT_S = 60.0
STOP_LIMIT_S = 30.0


class LocalSlurmError(RuntimeError):
    """The local Slurm cannot start here; the message says what is missing and the next step."""


def missing() -> str | None:
    """Why a local Slurm cannot start on this machine, or None when it can."""
    if os.geteuid() != 0:
        return "a local Slurm needs root (slurmd runs jobs as their users); run as root or in a container"
    absent = [name for name in COMMANDS if shutil.which(name) is None]
    if absent:
        return (
            f"no {', '.join(absent)} on PATH: install Debian's {' '.join(PACKAGES)} "
            "(apt-get install -y --no-install-recommends ...; .ci/run does)"
        )
    return None


def install() -> str | None:
    """Install the packages with apt-get where a command is missing; what is still missing, or None."""
    reason = missing()
    if reason is None or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return reason
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
    ):
        subprocess.run(argv, env=env, capture_output=True, check=False, timeout=600)
    return missing()


def _free_ports(count: int) -> list[int]:
    # The daemons need their ports written in slurm.conf before they start; a short race with other binders is
    # accepted (start() fails naming the port, and a retry picks new ones).
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.bind(("127.0.0.1", 0))
            sockets.append(probe)
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


class LocalSlurm:
    """A running local cluster of ``nodes`` emulated nodes named n1..nN, each claiming ``cpus`` CPUs."""

    def __init__(self, folder: Path, *, nodes: int = 4, cpus: int | None = None) -> None:
        if nodes < 1:
            raise ValueError(f"LocalSlurm(nodes={nodes}): expected 1 or more")
        self.folder = folder.resolve()
        self.nodes = [f"n{index}" for index in range(1, nodes + 1)]
        self.cpus = cpus or (os.cpu_count() or 1)
        self.conf = self.folder / "slurm.conf"
        self.daemons: list[Supervised] = []

    @property
    def env(self) -> dict[str, str]:
        """The environment a Slurm command of this cluster runs with (os.environ plus SLURM_CONF)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def set_node_env(self, node: str, variables: dict[str, str]) -> None:
        """Environment variables every task started on ``node`` gets from now on (nothing: {})."""
        if node not in self.nodes:
            raise ValueError(f"set_node_env({node!r}): this cluster's nodes are {', '.join(self.nodes)}")
        lines = "".join(f"export {name}={value}\n" for name, value in variables.items())
        (self.folder / "node-env" / node).write_text(lines)

    def start(self) -> LocalSlurm:
        reason = missing()
        if reason is not None:
            raise LocalSlurmError(reason)
        for sub in ("state", "spool", "log", "node-env"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o700)  # munged refuses a socket folder others may write
        try:
            self._start_munge()
            ports = _free_ports(len(self.nodes) + 1)
            self._write_conf(ports)
            daemon_env = {**self.env, MARKER: str(self.folder)}
            log = open(self.folder / "log" / "daemons.out", "ab")  # noqa: SIM115 - kept for the daemons' lives
            stopping = Stopping(first=signal.SIGTERM, grace=5.0)
            self.daemons.append(
                Supervised(
                    ["slurmctld", "-D", "-i", "-f", str(self.conf)], stdout=log, env=daemon_env, stopping=stopping
                )
            )
            for node in self.nodes:
                self.daemons.append(
                    Supervised(
                        ["slurmd", "-D", "-f", str(self.conf), "-N", node],
                        stdout=log,
                        env=daemon_env,
                        stopping=stopping,
                    )
                )
            log.close()
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_munge(self) -> None:
        key = self.folder / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
        argv = [
            "munged",
            "--foreground",
            "--force",  # as root, with every file in this folder rather than /run/munge and /etc/munge
            f"--socket={self.folder / 'munge.socket'}",
            f"--key-file={key}",
            f"--pid-file={self.folder / 'munged.pid'}",
            f"--log-file={self.folder / 'log' / 'munged.log'}",
            f"--seed-file={self.folder / 'munged.seed'}",
        ]
        log = open(self.folder / "log" / "munged.out", "ab")  # noqa: SIM115
        self.daemons.append(
            Supervised(
                argv, stdout=log, env={**os.environ, MARKER: str(self.folder)}, stopping=Stopping(first=signal.SIGTERM)
            )
        )
        log.close()
        deadline = time.monotonic() + 10.0
        while not (self.folder / "munge.socket").exists():
            if time.monotonic() > deadline or self.daemons[-1].poll() is not None:
                raise LocalSlurmError(f"munged did not start: see {self.folder / 'log' / 'munged.log'}")
            time.sleep(0.05)

    def _write_conf(self, ports: list[int]) -> None:
        folder = self.folder
        prolog = folder / "task_prolog.sh"
        prolog.write_text(f'#!/bin/sh\nf="{folder}/node-env/$SLURMD_NODENAME"\n[ -f "$f" ] && cat "$f"\nexit 0\n')
        prolog.chmod(0o755)
        lines = [
            f"ClusterName=gpuperf{ports[0]}",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ports[0]}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={folder / 'munge.socket'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "SchedulerParameters=batch_sched_delay=0",
            # A lost slurmd is noticed in seconds (the default 300 s would hold a job with a dead node 5 minutes).
            "SlurmdTimeout=10",
            "KillWait=5",
            "MessageTimeout=5",
            "MpiDefault=none",
            f"TaskProlog={prolog}",
            f"StateSaveLocation={folder / 'state'}",
            f"SlurmdSpoolDir={folder / 'spool'}/%n",
            f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
            f"SlurmdPidFile={folder / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={folder / 'log' / 'slurmd-%n.log'}",
        ]
        for node, port in zip(self.nodes, ports[1:], strict=True):
            lines.append(
                f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs={self.cpus} State=UNKNOWN"
            )
        lines.append(f"PartitionName=local Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + START_LIMIT_S
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            for daemon in self.daemons:
                if daemon.poll() is not None:
                    raise LocalSlurmError(
                        f"{daemon.argv[0]} ({' '.join(daemon.argv[1:])}) exited with status {daemon.returncode} "
                        f"while starting: see {self.folder / 'log'}"
                    )
            states = self.node_states()
            if len(states) == len(self.nodes) and all(state.startswith("IDLE") for state in states.values()):
                return
            time.sleep(0.2)
        raise LocalSlurmError(
            f"the local Slurm's nodes were not idle within {START_LIMIT_S:.0f} s (found {states or 'no answer'}): "
            f"see {self.folder / 'log'}"
        )

    def node_states(self) -> dict[str, str]:
        """Each node's State as ``scontrol show nodes`` gives it ({} while the controller does not answer)."""
        done = subprocess.run(
            ["scontrol", "show", "nodes", "-o"], capture_output=True, text=True, env=self.env, timeout=20, check=False
        )
        states = {}
        for line in done.stdout.splitlines():
            fields = dict(field.split("=", 1) for field in line.split() if "=" in field)
            if "NodeName" in fields:
                states[fields["NodeName"]] = fields.get("State", "?")
        return states

    def run_batch(self, argv: Sequence[str], *, env: dict[str, str] | None = None, limit_s: float = 600.0) -> int:
        """``sbatch --parsable ARGV...``, waited for with a short poll (``sbatch --wait`` doubles its interval up
        to 32 s, which costs a short job more than it runs); the job's exit status, or its signal as 128 + N."""
        env = env or self.env
        done = subprocess.run(["sbatch", "--parsable", *argv], capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise LocalSlurmError(f"sbatch {' '.join(argv)} failed: {done.stderr.strip()}")
        job = done.stdout.strip().split(";")[0]
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            shown = self._run(["scontrol", "show", "job", job, "-o"])
            state = re.search(r"\bJobState=(\S+)", shown)
            if state and state.group(1) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
                code = re.search(r"\bExitCode=(\d+):(\d+)", shown)
                if code is None:
                    raise LocalSlurmError(f"job {job} ended {state.group(1)} without an ExitCode: {shown.strip()}")
                return int(code.group(1)) or (128 + int(code.group(2)) if int(code.group(2)) else 0)
            time.sleep(0.2)
        self._run(["scancel", job])
        raise LocalSlurmError(f"job {job} did not end within {limit_s:.0f} s: cancelled")

    def kill_node(self, node: str) -> list[int]:
        """Kill ``node`` as a dead machine would go: its slurmd, and this cluster's step daemons on it with every
        process under them (SIGKILL, no warning). The pids killed besides slurmd."""
        from pytest_gpuperf.slurm.nodelist import expand

        steps = set()
        for line in self._run(["squeue", "-h", "--steps", "-o", "%i %N"]).splitlines():
            step, _, nodes = line.strip().partition(" ")
            if nodes and node in expand(nodes):
                steps.add(f"slurmstepd: [{step}]".encode())
        slurmd = next(d for d in self.daemons if d.argv[0] == "slurmd" and d.argv[-1] == node)
        slurmd.process.kill()
        marker = f"{MARKER}={self.folder}".encode()
        parents: dict[int, int] = {}
        victims = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                pid, parent = int(stat.parent.name), int(stat.read_text().rsplit(")", 1)[1].split()[1])
                cmdline = Path(stat.parent, "cmdline").read_bytes().rstrip(b"\0")
                mine = cmdline in steps and marker in Path(stat.parent, "environ").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            parents[pid] = parent
            if mine:
                victims.append(pid)
        for pid in victims:  # grows while walking: the whole tree under each step daemon
            victims.extend(child for child, parent in parents.items() if parent == pid and child not in victims)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return victims

    def stop(self) -> None:
        """Cancel every job, wait for their steps to end, shut the controller down, then end every daemon and
        every leftover of this cluster (a step outlives its slurmd) by pid."""
        if any(d.argv[0] == "slurmctld" and d.poll() is None for d in self.daemons):
            self._run(["scancel", "--full", "--quiet", "--user", "root"])
            deadline = time.monotonic() + STOP_LIMIT_S
            while time.monotonic() < deadline and self._run(["squeue", "-h", "-o", "%i"]).strip():
                time.sleep(0.2)
            self._run(["scontrol", "shutdown"])
        for daemon in reversed(self.daemons):  # munged last: the others talk to it while they stop
            daemon.stop()
            daemon.close()
        self.daemons.clear()
        for pid in leftovers(self.folder, self.conf):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _run(self, argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=20, check=False)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def leftovers(folder: Path, conf: Path) -> list[int]:
    """Processes of this cluster still running: its daemons and their steps (they carry ``MARKER``) and job
    tasks (they carry ``SLURM_CONF``), never this process or its ancestors."""
    spared, pid = set(), os.getpid()
    while pid > 1:
        spared.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    signs = (f"{MARKER}={folder}".encode(), f"SLURM_CONF={conf}".encode())
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            entries = environ.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(sign in entries for sign in signs) and int(environ.parent.name) not in spared:
            found.append(int(environ.parent.name))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pytest_gpuperf.slurm.local [--nodes N] [--folder DIR] [-- COMMAND ...]``."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(
        prog="python -m pytest_gpuperf.slurm.local",
        description="Start a local Slurm (munged, slurmctld, N slurmd on loopback), run COMMAND against it (or wait "
        "for Ctrl-C), then stop everything it started. Needs root; installs Debian's packages with apt-get where "
        "missing.",
    )
    parser.add_argument("--nodes", type=int, default=4, help="emulated nodes, named n1..nN (default 4)")
    parser.add_argument("--folder", type=Path, help="scratch folder (default: a new one under $TMPDIR)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...: run with SLURM_CONF set")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.nodes < 1:
        print(f"local slurm: --nodes {args.nodes}: expected 1 or more", file=sys.stderr)
        return 2
    reason = install()
    if reason is not None:
        print(f"local slurm: {reason}", file=sys.stderr)
        return 2
    folder = args.folder or Path(tempfile.mkdtemp(prefix="gpuperf-slurm-"))
    cluster = LocalSlurm(folder, nodes=args.nodes)
    try:
        cluster.start()
    except LocalSlurmError as error:
        print(f"local slurm: {error}", file=sys.stderr)
        return 2
    try:
        print(f"local slurm: {len(cluster.nodes)} nodes idle; export SLURM_CONF={cluster.conf}", file=sys.stderr)
        if command:
            return subprocess.run(command, env=cluster.env, check=False).returncode
        stops = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        signal.sigwait(stops)
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
