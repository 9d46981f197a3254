"""The MLCommons checkers as library calls (mlperf-logging, pinned 4.1.68 in the ``mlperf`` extra): the compliance
checker on one log, the RCP checker and the MLPerf score on a folder of result_*.txt. The ruleset is always given
(the package's default moves with its releases). Imported only when a log is read: mlperf_logging loads lazily.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

RULESET = "5.1.0"
"""MLPerf Training v5.1, the round our users' published numbers are from."""
USAGE = "training"
INSTALL = "pip install 'pytest-gpuperf[mlperf]'"


class MissingChecker(Exception):
    """mlperf_logging is not installed; the message says how to install it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Compliance:
    """The compliance checker's word on one log."""

    passed: bool
    message: str
    """Its own messages, as it writes them (empty when it passed)."""
    ruleset: str
    version: str

    def describe(self) -> str:
        word = "passed" if self.passed else "FAILED"
        return f"{word} the MLCommons compliance checker (mlperf-logging {self.version}, {USAGE} {self.ruleset})"


def checker_version() -> str:
    try:
        return importlib.metadata.version("mlperf-logging")
    except importlib.metadata.PackageNotFoundError:
        raise MissingChecker(f"mlperf_logging is not installed; the MLPerf checks need it: {INSTALL}") from None


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """The checkers report through the root logger: catch what they say instead of printing it."""
    caught = io.StringIO()
    handler = logging.StreamHandler(caught)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield caught
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def check_compliance(path: Path, *, ruleset: str = RULESET) -> Compliance:
    """The compliance checker on ``path`` under ``ruleset``. It checks what the log says, not what ran: a
    ``status: aborted`` run passes it (``mlperf_log.RunLog.converged`` is what decides convergence)."""
    version = checker_version()
    from mlperf_logging.compliance_checker import mlp_compliance

    mlp_compliance.enqueued_configs.clear()  # a module-level queue: a checker that raised may have left some
    checker = mlp_compliance.make_checker(USAGE, ruleset, True, False)
    try:
        with _quiet():
            passed = bool(checker.check_file(str(path), f"{USAGE}_{ruleset}/common.yaml"))
    except Exception as error:  # the checker's own parser raises on JSON it does not expect (a line without "key")
        return Compliance(passed=False, message=f"the checker raised {type(error).__name__}: {error}",
                          ruleset=ruleset, version=version)  # fmt: skip
    finally:
        mlp_compliance.enqueued_configs.clear()
    parts = [*checker.overwritable.values(), *checker.not_overwritable]
    return Compliance(passed=passed, message="\n".join(parts), ruleset=ruleset, version=version)


def olympic_score(times: Sequence[float]) -> float | None:
    """MLPerf's score of a benchmark: the mean time-to-train of the converged runs without the fastest and the
    slowest. The package's own ``_compute_olympic_average`` (result_summarizer, pandas) is used: its
    ``compute_score`` command crashes in 4.1.68 ("too many values to unpack") and counts aborted runs as
    converged, so the runs are chosen here (converged only) and only the average is the package's."""
    checker_version()
    from mlperf_logging.result_summarizer.result_summarizer import _compute_olympic_average

    score = _compute_olympic_average(sorted(times), 0, 1)
    return None if score is None else float(score)


def rcp_word(folder: Path, *, ruleset: str = RULESET) -> str:
    """The RCP checker's verdict on a folder, in words. It fails only runs that converge faster than the reference
    convergence points allow (too fast to be credible); it is no regression detector, and a small proxy that
    reaches the target in few samples always fails it."""
    checker_version()
    from mlperf_logging.rcp_checker import rcp_checker

    try:
        with _quiet():
            # rcp_pass named: check_directory's default 'full_rcp' matches none of the names _get_rcp_data knows
            # ('full_rcps', 'pruned_rcps') and raises UnboundLocalError in 4.1.68; its command line's default is this
            passed, message, _ = rcp_checker.check_directory(
                str(folder), USAGE, ruleset, False, False, rcp_pass="pruned_rcps"
            )
    except Exception as error:  # its own reader does not survive every log the compliance checker passes
        return f"not decided: the RCP checker raised {type(error).__name__}: {error}"
    if passed:
        return f"passed ({message}): convergence no faster than the reference points allow"
    return (
        f"failed ({message}): the runs converge in fewer samples than MLPerf's reference convergence points allow "
        "(too fast to be credible at that batch size); a tiny proxy always does, and this says nothing of speed"
    )
