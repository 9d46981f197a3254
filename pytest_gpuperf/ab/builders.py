"""Stacks and their building, for `gpuperf bisect`: a stack is a set of exact pins; a mixed stack is the good one
with some components at the bad one's version; a Builder turns a stack into a Python to run (a command prefix).

CachedBuilder builds each pin set once under its cache folder: a venv layered on the running environment with
the pins pip-installed on top, or a --build TEMPLATE run through the shell. Every build command is a supervised
group (core/record/children.py): stopped with what it started on Ctrl-C or SIGTERM, and at ``timeout_s``. A build
that fails is a BuildError (the step is UNBUILDABLE, with pip's own conflict line) and is remembered, one stopped
at its time is not; a template with a bad placeholder is a TemplateError (bad input). A layered venv is probed
once built (`pip check`, importing each pin): what its inherited packages break is a warning, said before any
session runs on it. May import ab/bisect_search.py; never cli/.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import signal
import site
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_gpuperf.ab.bisect_search import is_swappable
from pytest_gpuperf.core.record.children import Stopping, Supervised

Stack = dict[str, str]
BUILD_STOPPING = Stopping(first=signal.SIGTERM)
"""A build is stopped from SIGTERM on: a shell's background jobs ignore SIGINT, and a build has no results to
write first."""


def canonical(name: str) -> str:
    """PEP 503 normalised name: 'Torch_Audio' and 'torch-audio' are one component."""
    return re.sub(r"[-_.]+", "-", name).lower()


def mixed_stack(good: Mapping[str, str], bad: Mapping[str, str], swapped: frozenset[str]) -> Stack:
    """The good stack with the ``swapped`` components at the bad stack's version (dropped where bad lacks one)."""
    stack = {name: version for name, version in good.items() if name not in swapped and is_swappable(name)}
    stack.update({name: bad[name] for name in swapped if name in bad})
    return dict(sorted(stack.items()))


def pins_text(stack: Mapping[str, str]) -> list[str]:
    return [f"{name}=={version}" for name, version in sorted(stack.items())]


class BuildError(Exception):
    """The stack cannot be built (pip conflict, a failing template): the step is UNBUILDABLE."""


class BuildTimeout(BuildError):
    """A build stopped at its time limit: UNBUILDABLE for this run, tried again by the next."""


class TemplateError(ValueError):
    """A --build template with a placeholder it cannot fill: bad input, not an unbuildable stack."""


Builder = Callable[[Stack], tuple[str, ...]]
"""Materialises a stack, returns its Python as a command prefix; raises BuildError."""


@dataclass(slots=True)
class CachedBuilder:
    """Builds each pin set once into cache/<hash>; a folder holding 'gpuperf-built' is reused."""

    cache: Path
    template: str | None = None
    built: int = 0
    """Builds run by this process (cache hits not counted)."""
    failed: int = 0
    """Of them, those that failed (the stack is UNBUILDABLE)."""
    warnings: dict[str, list[str]] = field(default_factory=dict)
    """Per built folder, what its inherited packages break (inherited_breaks), said once through ``log``."""
    log: Callable[[str], None] = field(default=lambda line: None)
    timeout_s: float | None = None
    """The longest one build may run (`gpuperf bisect --budget`); None: no limit."""

    def __call__(self, stack: Stack) -> tuple[str, ...]:
        pins = pins_text(stack)
        key = hashlib.sha256("\n".join([sys.executable, self.template or "", *pins]).encode()).hexdigest()[:16]
        folder = self.cache / key
        done = folder / "gpuperf-built"
        failed = folder / "gpuperf-unbuildable"
        if failed.is_file():
            raise BuildError(failed.read_text(encoding="utf-8").strip())
        if not done.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "requirements.txt").write_text("\n".join(pins) + "\n", encoding="utf-8")
            self.built += 1
            self.log(f"  build {folder}: {' '.join(pins)}")
            try:
                if self.template is None:
                    _build_venv(folder, pins, self.timeout_s)
                else:
                    _build_template(folder, pins, self.template, self.timeout_s)
            except BuildTimeout:
                self.failed += 1
                raise
            except BuildError as error:
                self.failed += 1
                failed.write_text(f"{error}\n", encoding="utf-8")
                raise
            done.write_text("\n".join(pins) + "\n", encoding="utf-8")
        breaks = folder / CHECK_FILE
        if breaks.is_file() and str(folder) not in self.warnings:
            found = [line for line in breaks.read_text(encoding="utf-8").splitlines() if line.strip()]
            if found:
                self.warnings[str(folder)] = found
                for line in found:
                    self.log(f"  warning: {' '.join(pins)}: {line}")
        return _prefix(folder)


def _prefix(folder: Path) -> tuple[str, ...]:
    pointer = folder / "gpuperf-python"
    if pointer.is_file():
        try:
            line = pointer.read_text(encoding="utf-8").strip().splitlines()
            prefix = tuple(shlex.split(line[0])) if line else ()
        except (OSError, UnicodeDecodeError, ValueError) as error:  # ValueError: an unbalanced quote
            raise BuildError(
                f"{pointer}: cannot be read as a command ({error}); fix its first line or delete {folder} to build "
                "it again"
            ) from None
        if prefix:
            return prefix
    python = folder / "bin" / "python"
    if not python.exists():
        raise BuildError(f"{folder}: the build left neither gpuperf-python nor bin/python")
    return (str(python),)


def _run_logged(argv: list[str], log_file: Path, timeout_s: float | None) -> None:
    """``argv`` as a supervised group, its output appended to ``log_file``; what it leaves running is ended."""
    with log_file.open("ab") as log:
        try:
            with Supervised(argv, stdout=log, stopping=BUILD_STOPPING) as child:
                try:
                    code = child.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    raise BuildTimeout(
                        f"the build ran past --budget {timeout_s:g} s and was stopped with what it started (log "
                        f"{log_file}); give a longer --budget, or build the stack beforehand"
                    ) from None
        except OSError as error:
            raise BuildError(f"{argv[0]}: cannot be started ({error.strerror or error}) (log {log_file})") from None
    if code != 0:
        lines = log_file.read_text(encoding="utf-8", errors="replace").splitlines()
        raise BuildError(f"exit {code}: {failure_reason(lines)[:300]} (log {log_file})")


_DEPENDS = re.compile(r"^\s*\S+ \S+ depends on \S")


def failure_reason(lines: list[str]) -> str:
    """The line of a failed build's log that says why: pip's own conflict line ("torch 2.5.0 depends on
    nvidia-nccl-cu12==2.20.5", under "The conflict is caused by:") before its generic last ERROR line
    ("ResolutionImpossible: for help visit ..."), else the last ERROR line, else the last line."""
    text = [line.strip() for line in lines if line.strip()]
    conflicts = [line for line in text if _DEPENDS.match(line)]
    if conflicts:
        return "; ".join(dict.fromkeys(conflicts))
    errors = [line for line in text if "ERROR" in line and "for help visit" not in line]
    if errors:
        return errors[-1]
    return next((line for line in reversed(text) if "ERROR" in line), text[-1] if text else "")


def _build_venv(folder: Path, pins: list[str], timeout_s: float | None) -> None:
    """A venv that sees the running environment's packages after its own, the pins installed into it."""
    log = folder / "build.log"
    venv = folder
    _run_logged([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], log, timeout_s)
    python = venv / "bin" / "python"
    answer = folder / "purelib.txt"
    where = "import sys, sysconfig; open(sys.argv[1], 'w').write(sysconfig.get_paths()['purelib'])"
    _run_logged([str(python), "-c", where, str(answer)], log, timeout_s)
    own = answer.read_text(encoding="utf-8").strip()
    layers = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    seen: list[str] = []
    for path in layers:
        if path not in seen and Path(path).is_dir() and Path(path) != Path(own):
            seen.append(path)
    # An `import` line of a .pth runs at start-up: addsitedir also reads the running env's own .pth files
    # (editable installs), and appends, so what the pins install in the venv comes first.
    (Path(own) / "zz-gpuperf-layer.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({path!r})" for path in seen) + "\n", encoding="utf-8"
    )
    _run_logged(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *pins], log, timeout_s
    )
    names = [pin.split("==", 1)[0] for pin in pins]
    _run_logged([str(python), "-c", _PROBE, str(folder / CHECK_FILE), str(folder), *names], log, timeout_s)


CHECK_FILE = "gpuperf-inherited.txt"
"""What a layered venv's inherited packages break, one finding a line (empty: nothing), written after its build."""

_PROBE = r"""
import contextlib, importlib, importlib.metadata as md, io, os, re, subprocess, sys, warnings
out, own, names = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3:]
found = []
check = subprocess.run([sys.executable, "-m", "pip", "check", "--disable-pip-version-check"], capture_output=True,
                       text=True)
for line in check.stdout.splitlines():
    if line.split(" ", 1)[0].lower().replace("_", "-") in names:
        found.append("pip check: " + line.strip())
inherited = {}
for dist in md.distributions():
    where = os.path.realpath(str(dist.locate_file("")))
    if not where.startswith(own + os.sep) and dist.metadata["Name"]:
        inherited.setdefault(dist.metadata["Name"].lower(), (dist.version, where))
for name in names:
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    tops = (dist.read_text("top_level.txt") or "").split() or [name.replace("-", "_")]
    for top in [t for t in tops if not t.startswith("_")][:3]:
        said = io.StringIO()
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(said):
            warnings.simplefilter("always")
            try:
                importlib.import_module(top)
            except BaseException as error:
                said.write(f"{type(error).__name__}: {error}\n")
        lines = [f"{w.category.__name__}: {w.message}" for w in caught
                 if not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning, FutureWarning))]
        lines += [line.strip() for line in said.getvalue().splitlines() if line.strip()][:2]
        for line in lines[:3]:
            named = [f"{n} {v} inherited from {w}" for n, (v, w) in sorted(inherited.items())
                     if n not in names and re.search(rf"\b{re.escape(n)}\b", line.lower())]
            found.append(f"import {top}: {line[:200]}" + (f" ({'; '.join(named)})" if named else ""))
open(out, "w").write("".join(line + "\n" for line in found))
"""
"""Run by the stack's own Python after its build: `pip check` lines about a pinned package, and what importing
each pinned package warns or raises (an old torch under an inherited numpy 2: "Failed to initialize NumPy"), with
the inherited distributions the message names."""


def _build_template(folder: Path, pins: list[str], template: str, timeout_s: float | None) -> None:
    values = {
        "pins": " ".join(shlex.quote(pin) for pin in pins),
        "requirements": shlex.quote(str(folder / "requirements.txt")),
        "dir": shlex.quote(str(folder)),
        "python": shlex.quote(sys.executable),
    }
    try:
        command = template.format(**values)
    except (KeyError, IndexError, ValueError) as error:
        raise TemplateError(
            f"--build {template!r}: bad placeholder ({error}); use {{pins}} {{requirements}} {{dir}} {{python}}"
        ) from None
    _run_logged(["/bin/sh", "-c", command], folder / "build.log", timeout_s)
