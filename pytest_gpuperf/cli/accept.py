"""`gpuperf accept`: node acceptance over a Slurm allocation, one step per node, ending with the fleet's verdict.

Exit status: 0 nothing listed and every node wrote its results, 1 a node listed by the fleet or lost (named with
what happened), 2 bad input (no Slurm, a node list that does not parse, fewer nodes than asked, a node that ended
well but left no results file where the fleet step reads), 128 + the signal when interrupted (SIGTERM at the
job's --time or scancel: 143; SIGHUP: 129; Ctrl-C: 130): the steps still running are stopped, the nodes that had
finished are judged all the same. docs/fleet.md, "Node acceptance as one Slurm job".
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

DEFAULT_PYTEST_ARGS = ("--pyargs", "pytest_gpuperf.suites.test_acceptance", "-m", "acceptance and not burnin", "-q")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    accept = commands.add_parser(
        "accept",
        help="node acceptance as one Slurm job: the acceptance tier on every node of the allocation, one step "
        "per node, then the fleet verdict; example (in an sbatch script): gpuperf accept --out $OUT",
        description="Runs inside a Slurm allocation (sbatch/salloc): one srun step per node runs pytest (by "
        "default the acceptance tier) writing OUT/nodes/NODE.json, each within --node-timeout; a node that "
        "dies or hangs is named with what happened and the others' results are kept; then `gpuperf fleet` "
        "judges OUT/nodes. Exit 0: none listed, 1: a node listed or lost, 2: bad input. See docs/fleet.md.",
    )
    accept.add_argument("--out", type=Path, required=True, help="results folder every node can write (shared)")
    accept.add_argument(
        "--nodes", type=int, default=None, metavar="N", help="how many nodes the allocation must have (a check)"
    )
    accept.add_argument(
        "--nodelist", default=None, help="the nodes to accept (default: the allocation's, $SLURM_JOB_NODELIST)"
    )
    accept.add_argument(
        "--node-timeout",
        type=float,
        default=1800,
        metavar="S",
        help="seconds each node's step may take before it is cancelled and the node named (default %(default)s)",
    )
    accept.add_argument("--python", default=sys.executable, help="the Python each node runs pytest with")
    accept.add_argument(
        "--fleet-args", default="", help="options for gpuperf fleet, in one string, e.g. '--tolerance 3'"
    )
    accept.add_argument(
        "pytest_args",
        nargs=argparse.REMAINDER,
        help=f"-- PYTEST ARGS each node runs (default: {' '.join(DEFAULT_PYTEST_ARGS)})",
    )
    accept.set_defaults(run=run)


def _nodes(args: argparse.Namespace) -> list[str]:
    from pytest_gpuperf.cli.loading import InputError
    from pytest_gpuperf.slurm.nodelist import NodeListError, expand

    if shutil.which("srun") is None:
        raise InputError(
            "no srun on PATH: gpuperf accept runs inside a Slurm allocation (sbatch examples/slurm/acceptance.sbatch) "
            "on a machine with Slurm's client commands"
        )
    text = args.nodelist or os.environ.get("SLURM_JOB_NODELIST")
    if not text:
        raise InputError(
            "no nodes: SLURM_JOB_NODELIST is unset (not inside an allocation); submit with sbatch or salloc, or "
            "pass --nodelist"
        )
    where = "--nodelist" if args.nodelist else "SLURM_JOB_NODELIST"
    try:
        nodes = expand(text)
    except NodeListError as error:
        raise InputError(f"{error} (from {where})") from None
    if len(set(nodes)) != len(nodes):
        raise InputError(f"node list {text!r} (from {where}) names a node twice")
    if args.nodes is not None and len(nodes) < args.nodes:
        raise InputError(
            f"--nodes {args.nodes} asked, but {where} has {len(nodes)} ({text}); ask Slurm for {args.nodes} "
            f"(sbatch --nodes={args.nodes}) or lower --nodes"
        )
    if not args.node_timeout > 0:
        raise InputError(f"--node-timeout {args.node_timeout}: expected seconds > 0")
    return nodes


def run(args: argparse.Namespace) -> int:
    import signal

    from pytest_gpuperf.core.record.children import signals_interrupt

    with signals_interrupt() as received:  # SIGTERM (the job's --time, scancel) and SIGHUP stop it as Ctrl-C does
        try:
            return _accept(args, received)
        except KeyboardInterrupt:  # before the steps started, or between them and the fleet: nothing to stop
            number = int(received[0] if received else signal.SIGINT)
            name = signal.Signals(number).name
            print(f"gpuperf accept: interrupted ({name}) with no step running; exit {128 + number}", flush=True)
            return 128 + number


def _accept(args: argparse.Namespace, received: list[int]) -> int:
    import shlex
    import signal

    from pytest_gpuperf.cli.loading import InputError
    from pytest_gpuperf.core.record.children import Supervised
    from pytest_gpuperf.slurm.acceptance import pytest_argv, run_steps

    nodes = _nodes(args)
    out: Path = args.out.resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"--out {out}: {error.strerror}; give a folder every node can write") from None
    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    command = pytest_argv(args.python, extra or DEFAULT_PYTEST_ARGS)
    print(f"gpuperf accept: {len(nodes)} node(s) ({', '.join(nodes)}), one step each, {args.node_timeout:.0f} s each")
    sys.stdout.flush()
    outcomes = run_steps(nodes, out, command, deadline_s=args.node_timeout)
    silent = [o for o in outcomes if o.said_written and not o.wrote]
    if silent and not received:
        names = ", ".join(f"{o.node} ({o.results})" for o in silent)
        raise InputError(
            f"node(s) said they wrote their results, but these files are absent here: {names}; is --out on a file "
            "system every node shares? give --out a shared folder"
        )
    # A node stopped in its session ran fewer tests than the others: only the nodes that finished are placed in the
    # fleet, and one whose step was stopped after it wrote all its results finished.
    stopped = [o for o in outcomes if (o.interrupted or o.wrote) and not o.finished]
    lost = [o for o in outcomes if not o.wrote and not o.interrupted]  # none of them said it wrote its results
    failed = [o for o in outcomes if o.finished and o.status != 0 and not o.interrupted]
    for outcome in stopped:
        kept = f"its results so far (not judged): {outcome.results}" if outcome.wrote else "no results"
        print(f"INTERRUPTED {outcome.node}: {kept}; {outcome.what_happened(args.node_timeout)}")
    for outcome in lost:
        print(f"LOST {outcome.node}: no results; {outcome.what_happened(args.node_timeout)}")
    for outcome in failed:
        print(f"FAILED {outcome.node}: its tests failed (status {outcome.status}); its results join the fleet")
    sys.stdout.flush()
    judged = [o for o in outcomes if o.finished]
    fleet = 2
    if judged:
        # A process of its own (the `gpuperf fleet` command, as a user would run it on the folder): its output and
        # exit status are the verdict's, and this module does not import the command line it belongs to.
        argv = [sys.executable, "-m", "pytest_gpuperf.cli", "fleet", *(str(o.results) for o in judged)]
        with Supervised([*argv, "--html", str(out / "fleet.html"), *shlex.split(args.fleet_args)]) as child:
            try:
                fleet = child.wait()
            except KeyboardInterrupt:  # the signal came as the fleet judged: seconds of work, let it finish
                fleet = child.wait()
        sys.stdout.flush()
    if lost:
        status = 1
    elif fleet == 2:
        status = 2
    else:
        status = 1 if fleet == 1 or failed else 0
    named = [f"lost: {', '.join(o.node for o in lost)}"] if lost else []
    named += [f"failed: {', '.join(o.node for o in failed)}"] if failed else []
    named += [f"stopped: {', '.join(o.node for o in stopped)}"] if stopped else []
    summary = "; ".join(named) or "none lost"
    if received:  # not a pass, whatever the fleet said of the nodes that had finished
        status = 128 + int(received[0])
        summary += f"; interrupted ({signal.Signals(received[0]).name}), not a pass"
    print(f"gpuperf accept: {len(judged)} of {len(nodes)} node(s) judged; fleet exit {fleet}; {summary}; exit {status}")
    return status
