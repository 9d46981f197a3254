"""Was the machine itself while a measurement ran? Contention signals, and the rule that reads them.

Around every measurement window it records: the hypervisor's **steal**; this process's **run-queue wait**;
**CPU time against wall time**; **other processes' load** (busy cores beyond this process and its children), plus
the load average and CPU pressure for the report only; and **canaries** that touch nothing of the stack under test
(a pure-Python loop, judged; a one-thread numpy GEMM, judged; a memory copy, recorded only). Parsing and the rule
(``contention``, ``compare_machine``) are pure and tested on recorded ``/proc`` samples; ``read_snapshot`` is the only
reader and leaves ``None`` where a file is missing. machine/ returns facts: core/verdict/ turns them into a
verdict. What each signal caught and missed, and why own code: docs/design/contention-signals.md.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, astuple, dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = [
    "BETWEEN_CALLS",
    "CANARY_VERSION",
    "CpuTimes",
    "LoadAverage",
    "MachineCheck",
    "MachineState",
    "MachineWindow",
    "Snapshot",
    "TurnWaits",
    "CANARIES",
    "CANARY_EXPLAINS_POWER",
    "Canary",
    "canary_deviation",
    "canary_points",
    "compare_machine",
    "contention",
    "contention_reasons",
    "descendants_cpu_s",
    "others_limit",
    "own_work",
    "parse_loadavg",
    "parse_pressure",
    "parse_proc_stat",
    "parse_schedstat",
    "read_snapshot",
    "run_canary",
    "run_kernel_canaries",
    "state_between",
    "turn_counters",
]

CANARY_VERSION = "py-int-loop-20000-v1"
"""Names the canary's workload; canaries of another version (or another Python) are never compared."""
BETWEEN_CALLS = "+between-calls"
"""Appended to both canary versions when the canaries were taken between a window's timed calls, not after it:
the two are never compared, because where they run moves them (between 128x128 matmuls the Python loop ran ~3%
slower and the sgemm ~3% slower than right after them, on a quiet machine: cold caches), as much as their noise
prior."""
CANARY_ITERATIONS = 20_000
"""~1 ms per call on a 2.x GHz x86 core under CPython 3.11: cheap enough to take after every measurement round."""
CANARY_SAMPLES = 5

STEAL_LIMIT = 0.02
"""A window in which the hypervisor stole >= 2% of the CPUs' time ran on a contended host."""
RUNQUEUE_LIMIT = 0.05
"""A window in which this process's threads waited for a CPU >= 5% of their runnable time shared its cores."""
RUNQUEUE_OWN_SHARE = 0.25
"""The run-queue wait is read only where this process did at least this share of the CPU work of itself and the
processes it started: where they did nearly all of it (a command run by ``perf.run_command`` and the server it
measures), this process's few threads wait behind the workload itself. Work outside the tree is what ``others``
reads, and the host's is ``steal``. What it was measured on: docs/machine-state.md."""
CANARY_CPU_LIMIT = 0.90
"""The canary is one thread that never sleeps: CPU time < 90% of its wall time means it was descheduled."""
OTHERS_LIMIT_CORES = 0.25
OTHERS_LIMIT_SHARE = 0.10
"""A window in which processes outside this process tree kept >= max(0.25 cores, 10% of the CPUs) busy shared the
machine: a quiet 2-core VM reads 0.00-0.05 cores, one busy neighbour ~1.0 (the committed CPU baselines)."""
MIN_TICKS = 20
"""Fewest /proc/stat clock ticks (USER_HZ, 10 ms each, summed over CPUs) for which a steal share is meaningful."""

CANARY_PRIOR = 0.03
"""Prior between-session sd (log scale) of the canary's median: a pure-Python loop's median moves 2.8-3.2% from
process to process on a quiet 2-core VM (shared/CPU-FACTS.md)."""
CANARY_PRIOR_RUNS = 4.0
CANARY_BAND_SDS = 3.0
"""How many between-session sds the canary may move before the two sessions are not on the same machine state;
with the prior alone that is ~10%, well above the canary's own noise and below a loaded VM's 20-40%."""

CANARY_EXPLAINS_POWER = 2.0
"""A machine its canaries show slower by f can slow a workload by up to f ** this. The canaries sample the machine
through other code than the workload's, and a workload can slow by more than they do: on a 2-core KVM guest whose
host slowed each vCPU for seconds (cpu-intel-f6m207, 2026-12-02) a training step ran 1.62x slower while the slower
canary read 1.49x (the README's main job then failed on a confirmed false REGRESSED), and a matmul 1.67x while
both canaries read 1.59x. With the factor itself as the bound those read REGRESSED; squared, they stay NOISY,
while a change a machine cannot fake (2.5x against a 1.4x canary) is still decided."""

KERNEL_CANARY_VERSION = "numpy-sgemm64x200-copy32mib-v1"
"""Names the kernel canaries' workloads; states taken with another version are never compared."""
KERNEL_CANARY_SAMPLES = 5
SGEMM_SIZE = 64
"""64x64x64 stays under OpenBLAS's threading threshold (M*N*K <= 65536 * 4): one thread, as the suites' CPU tier."""
SGEMM_PRODUCTS = 200
"""~1.1 ms per sample on this project's VM (~90 GFLOP/s on one core)."""
COPY_BYTES = 32 * 2**20
"""Source and destination together (64 MiB) are twice this VM's 32 MiB last-level cache: a copy of memory."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuTimes:
    """The aggregate ``cpu`` line of /proc/stat, in clock ticks (USER_HZ)."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int = 0
    irq: int = 0
    softirq: int = 0
    steal: int = 0

    @property
    def total(self) -> int:
        # guest and guest_nice are already counted in user and nice
        return self.user + self.nice + self.system + self.idle + self.iowait + self.irq + self.softirq + self.steal

    @property
    def busy(self) -> int:
        return self.user + self.nice + self.system + self.irq + self.softirq


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcStat:
    cpu: CpuTimes
    cpus: int
    """Number of ``cpuN`` lines: the CPUs this kernel schedules on."""
    procs_running: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadAverage:
    one: float
    five: float
    fifteen: float
    running: int
    total: int


def parse_proc_stat(text: str) -> ProcStat:
    """The aggregate CPU times, the CPU count and procs_running of a /proc/stat text."""
    cpu: CpuTimes | None = None
    cpus = 0
    running: int | None = None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            values = [int(v) for v in parts[1:9]]
            if len(values) < 4:
                raise ValueError(f"/proc/stat: the cpu line has {len(values)} fields, expected at least 4: {line!r}")
            names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
            cpu = CpuTimes(**dict(zip(names, values, strict=False)))
        elif parts[0].startswith("cpu") and parts[0][3:].isdigit():
            cpus += 1
        elif parts[0] == "procs_running" and len(parts) > 1:
            running = int(parts[1])
    if cpu is None:
        raise ValueError("/proc/stat: no aggregate 'cpu' line")
    return ProcStat(cpu=cpu, cpus=max(cpus, 1), procs_running=running)


def parse_loadavg(text: str) -> LoadAverage:
    """'0.95 0.88 0.72 2/107 10039' -> LoadAverage(0.95, 0.88, 0.72, running=2, total=107)."""
    parts = text.split()
    if len(parts) < 4 or "/" not in parts[3]:
        raise ValueError(f"/proc/loadavg: expected 'l1 l5 l15 running/total pid', got {text.strip()!r}")
    running, total = parts[3].split("/", 1)
    return LoadAverage(
        one=float(parts[0]), five=float(parts[1]), fifteen=float(parts[2]), running=int(running), total=int(total)
    )


def parse_schedstat(text: str) -> tuple[int, int]:
    """A task's /proc/.../schedstat: (ns on a CPU, ns waiting on a run queue)."""
    parts = text.split()
    if len(parts) < 2:
        raise ValueError(f"schedstat: expected 'run_ns wait_ns slices', got {text.strip()!r}")
    return int(parts[0]), int(parts[1])


def parse_pressure(text: str) -> int | None:
    """The cumulative 'some' stall time (microseconds) of /proc/pressure/cpu, or None if absent."""
    for line in text.splitlines():
        if line.startswith("some "):
            for item in line.split()[1:]:
                key, _, value = item.partition("=")
                if key == "total":
                    return int(value)
    return None


@dataclass(frozen=True, slots=True)
class TurnWaits:
    """Totals over this session's waits for the turn of a pair taking turns (``turn_counters`` differences).

    While a session waits, its partner has the turn and runs: that load (and the partner's exit, which the turn
    waits for) is the pair's own, not a neighbour's, and the run-queue wait inside (a session that asks is often
    preempted by the process it wakes before it blocks, then sits on the run queue through the partner's turn) is
    the partner's turn. A window's signals are therefore read over its time outside these waits
    (``state_between``); a neighbour that runs while this session measures still counts."""

    wall_s: float = 0.0
    run_queue_ns: int = 0
    """This thread's run-queue wait inside them."""
    ticks: int = 0
    """/proc/stat ticks (all CPUs) inside them, and of those busy and stolen."""
    busy_ticks: int = 0
    steal_ticks: int = 0

    def __add__(self, other: TurnWaits) -> TurnWaits:
        return TurnWaits(*(mine + theirs for mine, theirs in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: TurnWaits) -> TurnWaits:
        return TurnWaits(*(mine - theirs for mine, theirs in zip(astuple(self), astuple(other), strict=True)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Counters read at one instant; a field is None where this system does not provide it."""

    wall_s: float
    process_cpu_s: float
    stat: ProcStat | None = None
    schedstat: tuple[int, int] | None = None
    """(run ns, wait ns) summed over this process's threads."""
    pressure_us: int | None = None
    load: LoadAverage | None = None
    tree_cpu_s: float | None = None
    """CPU seconds of the processes this one started (live descendants and reaped children), or None where the
    kernel does not list a process's children."""
    turn_waits: TurnWaits = TurnWaits()
    """What the waits for the turn had taken so far (given to ``read_snapshot`` by whoever keeps them)."""


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _threads_schedstat() -> tuple[int, int] | None:
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    run = wait = 0
    seen = False
    for task in tasks:
        text = _read(f"/proc/self/task/{task}/schedstat")
        if text is None:
            continue  # the thread ended between listing and reading
        try:
            task_run, task_wait = parse_schedstat(text)
        except ValueError:
            continue
        run, wait, seen = run + task_run, wait + task_wait, True
    return (run, wait) if seen else None


def _stat_cpu_s(text: str, tick: float) -> float:
    """utime + stime + cutime + cstime of one ``/proc/<pid>/stat`` line, in seconds (the command name, in
    parentheses, may hold spaces: fields are counted after its closing parenthesis)."""
    fields = text.rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) * tick


def turn_counters() -> TurnWaits | None:
    """The counters a wait is measured by, now: the wall clock, this thread's run-queue wait and the /proc/stat
    ticks (None where /proc/stat or schedstat cannot be parsed). A wait is the difference of two readings; who
    waits keeps the totals (core/session/turns.py) and hands them to ``read_snapshot``."""
    schedstat = _read("/proc/thread-self/schedstat")
    stat_text = _read("/proc/stat")
    try:
        wait_ns = parse_schedstat(schedstat)[1] if schedstat else 0
        stat = parse_proc_stat(stat_text).cpu if stat_text else None
    except ValueError:
        return None
    return TurnWaits(
        time.perf_counter(),
        wait_ns,
        stat.total if stat else 0,
        stat.busy if stat else 0,
        stat.steal if stat else 0,
    )


def job_siblings() -> bool:
    """Whether this process is one rank of a torchrun job whose other ranks on this node are its siblings (the
    agent, its parent, started them all): their work is the job's own, not another process's load."""
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return False
    return local > 1 and bool(os.environ.get("TORCHELASTIC_RUN_ID"))


def descendants_cpu_s() -> float | None:
    """CPU seconds used by the processes this one started (and, for a rank of a torchrun job, by its sibling
    ranks and theirs: ``job_siblings``): each live descendant's own and reaped children's time
    (``/proc/<pid>/stat``), plus the children this process reaped (``os.times``). A descendant that ends inside a
    window moves from the first sum to the second, so a window's difference counts it once."""
    if not Path("/proc/self/task").is_dir():
        return None
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    reaped = os.times()
    total = reaped.children_user + reaped.children_system
    pending, seen, listed = [os.getpid()], {str(os.getpid())}, False
    if job_siblings():
        pending.append(os.getppid())  # the agent: its other children are the job's other ranks (its own time is not)
    while pending:
        pid = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # it ended meanwhile: its time is in its parent's reaped children
        for task in tasks:
            text = _read(f"/proc/{pid}/task/{task}/children")
            if text is None:
                continue
            listed = True
            for child in text.split():
                if child in seen:
                    continue
                seen.add(child)
                stat = _read(f"/proc/{child}/stat")
                if stat is None:
                    continue
                try:
                    total += _stat_cpu_s(stat, tick)
                except (IndexError, ValueError):
                    continue
                pending.append(int(child))
    return total if listed else None


def read_snapshot(turn_waits: TurnWaits | None = None) -> Snapshot:
    """The machine's counters now (about 0.1 ms on Linux), with ``turn_waits``, the totals of this session's
    waits for its turn so far (``TurnWaits``; none in a session that does not take turns)."""
    stat_text = _read("/proc/stat")
    load_text = _read("/proc/loadavg")
    pressure_text = _read("/proc/pressure/cpu")
    try:
        stat = parse_proc_stat(stat_text) if stat_text else None
    except ValueError:
        stat = None
    try:
        load = parse_loadavg(load_text) if load_text else None
    except ValueError:
        load = None
    return Snapshot(
        wall_s=time.perf_counter(),
        process_cpu_s=time.process_time(),
        stat=stat,
        schedstat=_threads_schedstat(),
        pressure_us=parse_pressure(pressure_text) if pressure_text else None,
        load=load,
        tree_cpu_s=descendants_cpu_s(),
        turn_waits=turn_waits if turn_waits is not None else TurnWaits(),
    )


def _canary_body(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


def run_canary(samples: int = CANARY_SAMPLES) -> tuple[list[float], float]:
    """Time the fixed loop ``samples`` times: (seconds per call, the calls' thread CPU time / wall time)."""
    seconds = []
    cpu = wall = 0.0
    for _ in range(samples):
        start_cpu, start = time.thread_time(), time.perf_counter()
        _canary_body(CANARY_ITERATIONS)
        elapsed = time.perf_counter() - start
        cpu += time.thread_time() - start_cpu
        wall += elapsed
        seconds.append(elapsed)
    return seconds, (cpu / wall if wall > 0 else 1.0)


@functools.cache
def _kernel_operands() -> tuple[Any, ...]:
    """numpy and the kernel canaries' operands (a, b, product, source, destination), allocated and touched once
    per process: a first touch measures page faults, not the machine."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((SGEMM_SIZE, SGEMM_SIZE), dtype=np.float32)
    b, product = a.copy(), np.empty_like(a)
    source = np.ones(COPY_BYTES // 4, dtype=np.float32)
    destination = np.empty_like(source)
    np.matmul(a, b, out=product)
    np.copyto(destination, source)
    return np, a, b, product, source, destination


@functools.cache
def kernel_library() -> str:
    """numpy's version and its BLAS build ("numpy 2.4.6, scipy-openblas 0.3.31.188.0"): what the kernel canaries
    ran on, so that they are compared only with canaries of the same build. Read once per process."""
    import numpy as np

    try:
        found = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
        blas = f", {found.get('name', '?')} {found.get('version', '?')}"
    except Exception:  # numpy < 1.26 has no dicts mode; the version alone still tells builds apart
        blas = ""
    return f"numpy {np.__version__}{blas}"


def run_kernel_canaries(
    samples: int = KERNEL_CANARY_SAMPLES, names: Sequence[str] = ("sgemm", "copy")
) -> dict[str, list[float]]:
    """Time the matrix product and the copy (or those of them ``names`` holds) ``samples`` times each:
    {"sgemm": [...], "copy": [...]} in seconds."""
    np, a, b, product, source, destination = _kernel_operands()
    timings: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(samples if "sgemm" in names else 0):
        start = time.perf_counter()
        for _ in range(SGEMM_PRODUCTS):
            np.matmul(a, b, out=product)
        timings["sgemm"].append(time.perf_counter() - start)
    for _ in range(samples if "copy" in names else 0):
        start = time.perf_counter()
        np.copyto(destination, source)
        timings["copy"].append(time.perf_counter() - start)
    return timings


def canary_points(done: int, count: int, samples: int = CANARY_SAMPLES) -> int:
    """How many canary samples to take after timed call number ``done`` (1-based) of ``count``: ``samples`` points
    spread evenly over the calls, each in the middle of its share (10 calls: after calls 1, 3, 5, 7 and 9), so the
    canary sees the seconds the calls saw; fewer calls than samples take several at a point."""
    if not 1 <= done <= count:
        raise ValueError(f"canary_points: call {done} of {count}")
    return sum(1 for k in range(1, samples + 1) if max(1, math.ceil((k - 0.5) * count / samples)) == done)


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineState:
    """What the machine did during one measurement window; stored in a metric's context under "machine"."""

    wall_s: float
    cpu_per_wall: float
    """Process CPU time / wall time (all threads: 1.0 is one busy core)."""
    cpus: int | None = None
    steal_share: float | None = None
    """Stolen ticks / all ticks of all CPUs; None when the window held fewer than MIN_TICKS ticks."""
    others_cores: float | None = None
    """Cores kept busy by everything but this process (and, when ``others_outside_tree``, the processes it started)."""
    others_outside_tree: bool = False
    """``others_cores`` leaves out this process's descendants (rank processes, a server under test), so it counts
    other work only and the rule reads it; states stored before this existed counted the ranks and are not read."""
    runqueue_share: float | None = None
    """This process's threads' run-queue wait / (run + wait)."""
    tree_cpu_per_wall: float | None = None
    """CPU time of the processes this one started / wall time (None where the kernel lists no children, and in
    states stored before it existed): with ``cpu_per_wall``, whose work the window was (RUNQUEUE_OWN_SHARE)."""
    pressure_share: float | None = None
    """Share of the window in which some task on the machine waited for a CPU (PSI)."""
    load1: float | None = None
    procs_running: int | None = None
    canary_s: list[float] = field(default_factory=list)
    canary_cpu_per_wall: float | None = None
    canary_version: str = CANARY_VERSION
    python: str = field(default_factory=platform.python_version)
    kernel_canary_s: dict[str, list[float]] = field(default_factory=dict)
    """Per kernel canary ("sgemm", "copy"): seconds per sample; empty in states stored before they existed."""
    kernel_canary_version: str = KERNEL_CANARY_VERSION
    kernel_library: str | None = None
    """numpy and its BLAS build the kernel canaries ran on (``kernel_library()``)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MachineState:
        """Rebuild a stored state; unknown keys are ignored, a missing or mistyped required one raises ValueError."""
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        for required in ("wall_s", "cpu_per_wall"):
            if not isinstance(kwargs.get(required), (int, float)):
                raise ValueError(f"stored machine state lacks a number {required!r}")
        canary = kwargs.get("canary_s", [])
        if not _positive_numbers(canary):
            raise ValueError("stored machine state: canary_s must be a list of positive numbers")
        kernel = kwargs.get("kernel_canary_s", {})
        if not isinstance(kernel, dict) or not all(
            isinstance(k, str) and _positive_numbers(v) for k, v in kernel.items()
        ):
            raise ValueError("stored machine state: kernel_canary_s must map names to lists of positive numbers")
        return cls(**kwargs)


def _positive_numbers(values: Any) -> bool:
    return isinstance(values, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values
    )


def state_between(
    before: Snapshot,
    after: Snapshot,
    canary: tuple[list[float], float] | None = None,
    kernel_canaries: Mapping[str, list[float]] | None = None,
    kernel_library: str | None = None,
    *,
    between_calls: bool = False,
) -> MachineState:
    """The machine's state over the window between two snapshots (pure). ``between_calls``: the canaries were
    taken between the window's timed calls, not after it (their versions say so: ``BETWEEN_CALLS``)."""
    wall = max(after.wall_s - before.wall_s, 1e-9)
    # Waits for the turn inside the window (a pair taking turns) are the partner's time: read outside them.
    waits = after.turn_waits - before.turn_waits
    measuring = max(wall - waits.wall_s, 1e-9)
    own_cpu = max(after.process_cpu_s - before.process_cpu_s, 0.0)
    steal = others = None
    cpus = None
    tree = before.tree_cpu_s is not None and after.tree_cpu_s is not None
    tree_cpu = max(after.tree_cpu_s - before.tree_cpu_s, 0.0) if tree else 0.0  # type: ignore[operator]
    if before.stat is not None and after.stat is not None:
        cpus = after.stat.cpus
        ticks = after.stat.cpu.total - before.stat.cpu.total - waits.ticks
        if ticks >= MIN_TICKS:
            steal = max(after.stat.cpu.steal - before.stat.cpu.steal - waits.steal_ticks, 0) / ticks
            busy_cores = max(after.stat.cpu.busy - before.stat.cpu.busy - waits.busy_ticks, 0) / ticks * cpus
            others = max(busy_cores - (own_cpu + tree_cpu) / measuring, 0.0)
    runqueue = None
    if before.schedstat is not None and after.schedstat is not None:
        run = after.schedstat[0] - before.schedstat[0]
        wait = after.schedstat[1] - before.schedstat[1]
        # threads that ended inside the window make a sum go down: then the share is unknown, not negative
        if run > 0 and wait >= 0:
            wait = max(wait - waits.run_queue_ns, 0)
            runqueue = wait / (run + wait)
    pressure = None
    if before.pressure_us is not None and after.pressure_us is not None:
        pressure = min(max((after.pressure_us - before.pressure_us) / 1e6 / wall, 0.0), 1.0)
    return MachineState(
        wall_s=wall,
        cpu_per_wall=own_cpu / measuring,
        cpus=cpus,
        steal_share=steal,
        others_cores=others,
        others_outside_tree=tree and others is not None,
        runqueue_share=runqueue,
        tree_cpu_per_wall=tree_cpu / measuring if tree else None,
        pressure_share=pressure,
        load1=after.load.one if after.load else None,
        procs_running=after.stat.procs_running if after.stat else None,
        canary_s=list(canary[0]) if canary else [],
        canary_cpu_per_wall=canary[1] if canary else None,
        kernel_canary_s={name: list(values) for name, values in (kernel_canaries or {}).items()},
        kernel_library=kernel_library if kernel_canaries else None,
        canary_version=CANARY_VERSION + (BETWEEN_CALLS if between_calls else ""),
        kernel_canary_version=KERNEL_CANARY_VERSION + (BETWEEN_CALLS if between_calls else ""),
    )


def _ranked() -> bool:
    """Whether this process is one rank of a job of several (torchrun's or a launcher's WORLD_SIZE)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


class MachineWindow:
    """Snapshots around a block and canaries in it or at its end; ``state`` once the block has ended.

    A timer that calls :meth:`between_calls` after each timed call gets the Python and sgemm canaries taken
    between its calls, where they see the seconds the calls saw: a state of the machine lasting a second or two
    (seen on this project's VM: the workload's matmul ~20% slower, nothing in ``/proc`` to show it) can fall on
    the window and miss a canary taken after it. Otherwise they run at the end. The copy canary (recorded, not
    judged) always runs at the end. ``canary=False`` skips the canaries (a caller that takes its own)."""

    def __init__(self, *, canary: bool = True, waited: Callable[[], TurnWaits] | None = None) -> None:
        self._canary = canary
        self._waited = waited
        """The totals of the session's waits for its turn so far (left out of the window's signals), or None."""
        self._before: Snapshot | None = None
        self.state: MachineState | None = None
        self._python_s: list[float] = []
        self._python_cpu_s = 0.0
        self._sgemm_s: list[float] = []

    def between_calls(self, done: int, count: int) -> None:
        """A timer's hook, outside its timed part, after call ``done`` (1-based) of ``count``: takes the canary
        samples due there (:func:`canary_points`). Not in a rank of a multi-rank job: each rank's canary would fall
        inside another rank's timed call (a collective waits for it), so theirs run at the end, all at once."""
        if not self._canary or _ranked():
            return
        for _ in range(canary_points(done, count)):
            (seconds,), cpu_share = run_canary(1)
            self._python_s.append(seconds)
            self._python_cpu_s += cpu_share * seconds
            self._sgemm_s.extend(run_kernel_canaries(1, names=("sgemm",))["sgemm"])

    def __enter__(self) -> MachineWindow:
        self._before = self._snapshot()
        return self

    def _snapshot(self) -> Snapshot:
        return read_snapshot(self._waited() if self._waited is not None else None)

    def __exit__(self, *exc_info: object) -> None:
        assert self._before is not None
        self.state = self.close()

    def close(self) -> MachineState:
        """The state from entry until now (also usable without ``with``: ``start()`` then ``close()``)."""
        if self._before is None:
            raise RuntimeError("MachineWindow.close() before it was entered")
        between = bool(self._python_s)
        canary: tuple[list[float], float] | None = None
        kernels: dict[str, list[float]] | None = None
        if between:
            canary = (self._python_s, self._python_cpu_s / sum(self._python_s))
            kernels = {"sgemm": self._sgemm_s, **run_kernel_canaries(names=("copy",))}
        elif self._canary:
            canary, kernels = run_canary(), run_kernel_canaries()
        library = kernel_library() if self._canary else None
        return state_between(self._before, self._snapshot(), canary, kernels, library, between_calls=between)

    def start(self) -> MachineWindow:
        return self.__enter__()


def others_limit(cpus: int) -> float:
    """Cores other processes may keep busy before a window counts as shared (OTHERS_LIMIT_*)."""
    return max(OTHERS_LIMIT_CORES, OTHERS_LIMIT_SHARE * cpus)


def waits_behind_itself(state: MachineState) -> bool:
    """Whether the window's waits for a CPU were behind the work of this process and the ones it started (or its
    sibling ranks) alone: other processes were measured apart from them and kept less than ``others_limit`` busy.
    A job that runs more threads than the machine has cores waits so in every sitting, the baseline's too: such a
    wait is part of the workload, not another process's load."""
    return bool(
        state.others_outside_tree
        and state.tree_cpu_per_wall is not None
        and state.others_cores is not None
        and state.cpus
        and state.others_cores < others_limit(state.cpus)
    )


def own_work(state: MachineState) -> bool:
    """Whether this process did RUNQUEUE_OWN_SHARE or more of its tree's CPU work in the window (True where the
    tree's share is unknown), so that its threads' run-queue wait says something about the workload."""
    if state.tree_cpu_per_wall is None:
        return True
    total = state.cpu_per_wall + state.tree_cpu_per_wall
    return total <= 0 or state.cpu_per_wall / total >= RUNQUEUE_OWN_SHARE


def contention_reasons(state: MachineState) -> dict[str, str]:
    """Why this window's machine was contended, by signal ("steal", "runqueue", "others", "canary_cpu"), each with
    its figures; empty when nothing says so."""
    reasons = {}
    if state.steal_share is not None and state.steal_share >= STEAL_LIMIT:
        reasons["steal"] = f"steal {state.steal_share:.1%} of CPU time (limit {STEAL_LIMIT:.0%})"
    behind_itself = waits_behind_itself(state)
    if (
        state.runqueue_share is not None
        and state.runqueue_share >= RUNQUEUE_LIMIT
        and own_work(state)
        and not behind_itself
    ):
        reasons["runqueue"] = (
            f"threads waited for a CPU {state.runqueue_share:.1%} of the time (limit {RUNQUEUE_LIMIT:.0%})"
        )
    if state.others_outside_tree and state.others_cores is not None and state.cpus:
        limit = others_limit(state.cpus)
        if state.others_cores >= limit:
            reasons["others"] = (
                f"other processes kept {state.others_cores:.1f} of {state.cpus} cores busy (limit {limit:.2g})"
            )
    if state.canary_cpu_per_wall is not None and state.canary_cpu_per_wall < CANARY_CPU_LIMIT and not behind_itself:
        reasons["canary_cpu"] = (
            f"the single-thread canary got {state.canary_cpu_per_wall:.0%} of its wall time on a CPU "
            f"(limit {CANARY_CPU_LIMIT:.0%})"
        )
    return reasons


def contention(state: MachineState) -> str | None:
    """Why this window's machine was contended (the reasons, with figures), or None when nothing says so."""
    return "; ".join(contention_reasons(state).values()) or None


@dataclass(frozen=True, slots=True)
class Canary:
    """One reference workload of the machine's state: how to read it from a state, and its noise prior."""

    name: str
    """"python", or a kernel canary's key in ``MachineState.kernel_canary_s``."""
    short: str
    """Its name in details and notes: "canary" (the Python loop, as before the kernel canaries), "sgemm canary"."""
    label: str
    """How messages name it ("the reference canary", "the memory canary (a 32 MiB copy)")."""
    prior: float
    """Prior between-session sd (log scale) of its median."""

    def median(self, state: MachineState) -> float | None:
        values = self.samples(state)
        return statistics.median(values) if values else None

    def fastest(self, state: MachineState) -> float | None:
        values = self.samples(state)
        return min(values) if values else None

    def samples(self, state: MachineState) -> list[float]:
        return list(state.canary_s if self.name == "python" else state.kernel_canary_s.get(self.name) or [])

    def build(self, state: MachineState | Mapping[str, Any]) -> tuple[Any, Any]:
        """What two states must share for their timings of this canary to be compared: its version (the workload,
        and whether it ran between the calls) and the Python or numpy build it ran on. Reads a stored state's plain
        dict too (the roll-up's notes), where a missing version is the first one."""
        field_of = state.get if isinstance(state, Mapping) else functools.partial(getattr, state)
        if self.name == "python":
            return field_of("canary_version", CANARY_VERSION), field_of("python", None)
        return field_of("kernel_canary_version", KERNEL_CANARY_VERSION), field_of("kernel_library", None)

    def comparable(self, a: MachineState, b: MachineState) -> bool:
        if self.median(a) is None or self.median(b) is None:
            return False
        return self.build(a) == self.build(b)


PYTHON_CANARY = Canary("python", "canary", "the reference canary", CANARY_PRIOR)
CANARIES = (
    PYTHON_CANARY,
    Canary("sgemm", "sgemm canary", "the vector-math canary (a 64x64 float32 product)", 0.03),
)
"""The canaries the rule judges by. Each prior is its median's between-process sd measured on this project's quiet
2-core VM, rounded up: 2.5% (python), 2.4% (sgemm), ten processes each (docs/machine-state.md). The copy canary
is recorded (``kernel_canary_s["copy"]``) and not judged: quiet, ten processes put its sd at 5.4%, but between
the sessions of `gpuperf ab` comparisons its medians moved 20-45% with the workload unmoved (why was not
found); judged, it left out pairs that were fine."""


def canary_deviation(
    current: MachineState, references: Sequence[MachineState], canary: Canary = PYTHON_CANARY
) -> tuple[float, float] | None:
    """(log of current canary median / the references' median, the tolerance on that log), or None.

    The tolerance is CANARY_BAND_SDS between-session sds: the references' own spread of canary medians pooled
    with the canary's prior (``CANARY_PRIOR_RUNS`` degrees of freedom), widened for a new session against k
    references.
    """
    medians = [m for ref in references if canary.comparable(current, ref) and (m := canary.median(ref))]
    now = canary.median(current)
    if not medians or now is None:
        return None
    logs = [math.log(m) for m in medians]
    k = len(logs)
    sample_var = statistics.variance(logs) if k >= 2 else 0.0
    dof = (k - 1) + CANARY_PRIOR_RUNS
    sd = math.sqrt(((k - 1) * sample_var + CANARY_PRIOR_RUNS * canary.prior**2) / dof)
    return math.log(now) - statistics.median(logs), CANARY_BAND_SDS * sd * math.sqrt(1 + 1 / k)


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineCheck:
    """The machine-state rule's answer for one metric against its baseline's runs."""

    current: str | None
    """Why the current measurement ran on a machine that was not itself (re-measuring may help), or None."""
    baseline: str | None
    """Why the baseline cannot be judged against as if clean (re-measuring cannot help), or None."""
    dropped: tuple[int, ...] = ()
    """Indexes of baseline runs left out: recorded under contention while clean runs remain."""
    detail: str = ""
    slower_now: float | None = None
    """When the canary alone says the machine is slower now (no other sign of contention): by what factor (> 1).
    A slower machine can make a metric look worse by up to its CANARY_EXPLAINS_POWER, never better."""
    slower_then: float | None = None
    """When the canary alone says the baseline's machine was slower: by what factor (> 1). It can make the
    current run look better by up to its CANARY_EXPLAINS_POWER, never worse."""
    explains_worse: float = 1.0
    """The largest factor by which the current window's state can make a metric look worse (``explains``)."""
    explains_better: float = 1.0
    """The largest factor by which the baseline runs' state can make the current run look better."""

    @property
    def conditions(self) -> str | None:
        return "; ".join(filter(None, (self.current, self.baseline))) or None

    def as_dict(self) -> dict[str, Any]:
        return {
            "comparable": self.conditions is None,
            "current": self.current,
            "baseline": self.baseline,
            "dropped_baseline_runs": list(self.dropped),
            "detail": self.detail,
            "explains_worse": self.explains_worse if math.isfinite(self.explains_worse) else None,
            "explains_better": self.explains_better if math.isfinite(self.explains_better) else None,
        }


def time_share(state: MachineState) -> float:
    """How much longer than on a machine of its own a window's work may have taken for want of a CPU: 1 / (1 - w)
    for the share w of the window's wall time its threads spent waiting in the run queue (the canary's wait where
    theirs was not read, or was another process's work; none where it was behind the workload's own threads,
    ``waits_behind_itself``), times 1 / (1 - s) for the share s stolen by the hypervisor. A workload that mostly
    sleeps waits little of its wall time, however long each wake-up waits."""
    wait = None
    if waits_behind_itself(state):
        pass  # the workload's own threads queued behind each other, in the baseline's sitting as in this one
    elif state.runqueue_share is not None and own_work(state) and state.runqueue_share < 1:
        per_wall = state.runqueue_share / (1 - state.runqueue_share) * state.cpu_per_wall  # wait / wall
        wait = min(state.runqueue_share, per_wall)
    elif state.canary_cpu_per_wall is not None:
        wait = 1 - min(1.0, state.canary_cpu_per_wall)
    factor = 1.0
    for share in (wait, state.steal_share):
        if share is not None and share > 0:
            factor = factor / (1 - share) if share < 1 else math.inf
    return factor


def canary_factor(now: MachineState, then: Sequence[MachineState], canary: Canary) -> float | None:
    """By what factor ``canary`` ran slower per CPU second in ``now`` than in ``then`` (> 1: slower), or None: its
    fastest sample now over the median of its fastest samples then. A wait for a CPU only adds to a sample, so the
    fastest is the one that ran uninterrupted; the wait is ``time_share``'s, not counted twice."""
    fastest = [f for state in then if canary.comparable(now, state) and (f := canary.fastest(state))]
    current = canary.fastest(now)
    if not fastest or current is None:
        return None
    return current / statistics.median(fastest)


def explains(current: MachineState | None, baseline: Sequence[MachineState]) -> tuple[float, float]:
    """The largest factors (worse, better) by which the machine's state can have moved a timing: the current
    window's time share (``time_share``) times the square of the largest slowdown per CPU second any canary shows
    now (CANARY_EXPLAINS_POWER) can make it look worse; the baseline runs' largest time share times the square
    of the largest slowdown their canaries showed then can make it look better. Contention only slows. Other
    processes busy on the other cores (caches, memory bandwidth) show in the canaries; without one, nothing
    bounds them."""
    worse = better = 1.0
    if current is not None:
        worse = time_share(current)
        factors = [f for canary in CANARIES if (f := canary_factor(current, baseline, canary)) is not None]
        if factors:
            worse *= max(1.0, max(factors)) ** CANARY_EXPLAINS_POWER
            better *= max(1.0, 1 / min(factors)) ** CANARY_EXPLAINS_POWER
        elif "others" in contention_reasons(current):
            worse = math.inf  # other work on the other cores, and no canary to say what it did to this one
    if baseline:
        better *= max(time_share(state) for state in baseline)
    return worse, better


def compare_machine(current: MachineState | None, baseline: Sequence[MachineState | None]) -> MachineCheck:
    """Whether a measurement and its baseline's runs were taken on a machine that was itself.

    * The current window contended (``contention``) -> ``current`` says why.
    * A baseline run contended, or its canary slower than the other runs' beyond their noise, is dropped while
      a clean run remains; when none remains, ``baseline`` says why (re-record it on a quiet machine).
    * The current canary against the clean baseline runs' canaries: slower beyond the band -> ``current`` (this
      session's machine is slower); faster -> ``baseline`` (the baseline was recorded on a slower machine).

    Runs without a stored state (files written before this existed) are neither dropped nor compared.
    """
    details: list[str] = []
    dirty: dict[int, str] = {}
    known = [(i, state) for i, state in enumerate(baseline) if state is not None]
    for i, state in known:
        why = contention(state)
        if why:
            dirty[i] = why
    slow_canary: dict[int, str] = {}
    for i, state in known:  # a run whose canary is slow against the other runs' was taken on a loaded machine
        if i in dirty:
            continue
        others = [s for j, s in known if j != i and j not in dirty]
        for canary in CANARIES:
            deviation = canary_deviation(state, others, canary) if others else None
            if deviation is not None and deviation[0] > deviation[1]:
                slow_canary[i] = f"its {canary.short} was {math.exp(deviation[0]) - 1:.0%} slower than the other runs'"
                break
    dirty |= slow_canary
    clean = [(i, state) for i, state in known if i not in dirty]
    unknown = len(baseline) - len(known)
    baseline_why = None
    dropped: tuple[int, ...] = ()
    if dirty:
        listing = "; ".join(f"run {i + 1}: {why}" for i, why in sorted(dirty.items()))
        if clean or unknown:
            dropped = tuple(sorted(dirty))
            details.append(f"baseline runs left out as recorded under contention ({listing})")
        else:
            baseline_why = (
                f"every baseline run was recorded on a contended machine ({listing}); re-record the baseline "
                "on a quiet machine"
            )
    current_why = contention(current) if current is not None else None
    contended_now = current_why is not None
    slower_now = slower_then = None
    if current is not None and clean:
        slower: list[tuple[float, str]] = []  # (factor, why) per canary beyond its band
        faster: list[tuple[float, str]] = []
        for canary in CANARIES:
            deviation = canary_deviation(current, [state for _, state in clean], canary)
            if deviation is None:
                continue
            shift, band = deviation
            change = math.exp(shift) - 1
            details.append(f"{canary.short} {change:+.1%} against the baseline's (band ±{math.exp(band) - 1:.1%})")
            if shift > band:
                why = f"{canary.label} ran {change:.0%} slower than in the baseline: the machine is slower now"
                slower.append((math.exp(shift), why))
            elif shift < -band:
                why = (
                    f"{canary.label} ran {-change / (1 + change):.0%} slower when the baseline was recorded "
                    "than now: the baseline came from a slower or loaded machine; re-record it"
                )
                faster.append((math.exp(-shift), why))
        # A machine slower now by the largest factor any canary shows can make a metric look worse by about that
        # much; canaries that disagree in direction bound nothing.
        if slower:
            current_why = "; ".join(filter(None, (current_why, *(why for _, why in slower))))
            if not faster:
                slower_now = None if contended_now or baseline_why else max(f for f, _ in slower)
        if faster and baseline_why is None:
            baseline_why = "; ".join(why for _, why in faster)
            if not slower:
                slower_then = None if contended_now else max(f for f, _ in faster)
    if current is None:
        details.append("no machine state recorded with this measurement")
    judged = [state for i, state in known if i not in dropped]
    worse, better = explains(current, judged)
    return MachineCheck(
        current=current_why,
        baseline=baseline_why,
        dropped=dropped,
        detail="; ".join(details),
        slower_now=slower_now,
        slower_then=slower_then,
        explains_worse=worse,
        explains_better=better,
    )
