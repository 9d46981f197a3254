"""What a test's recorder reads of its session while measuring: the ``BaselineView`` protocol, and no baseline.

The session (core/session/) implements the view for one test; the recorder (perf.py) depends on this protocol
only, so it never reaches the store or the verdict itself. A view reads: asking it changes nothing the session
keeps. It may not import core/session/ (the layer above) nor anything at run time: its types are annotations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pytest_gpuperf.core.record.perf import MetricRecord
    from pytest_gpuperf.core.store.baselines import Curve
    from pytest_gpuperf.core.verdict.vocabulary import Comparison
    from pytest_gpuperf.machine.contention import MachineState
    from pytest_gpuperf.machine.telemetry import TelemetrySummary


class BaselineView(Protocol):
    """One test's stored baseline, as its recorder needs it, and the verdict a metric would get now."""

    def curves(self, name: str) -> list[Curve]:
        """The stored reference curves of curve ``name`` for this hardware (empty if none)."""
        ...

    def telemetry(self, name: str) -> TelemetrySummary | None:
        """The device conditions metric ``name``'s baseline was measured under; None: clocks are not compared."""
        ...

    def machine(self, name: str) -> list[MachineState | None] | None:
        """The machine state stored with each of metric ``name``'s baseline runs (None for a run without one);
        None: the machine's state is not judged (it may still be recorded: ``Settings.machine_check``)."""
        ...

    def preview(self, metric: MetricRecord) -> Comparison | None:
        """The verdict ``metric`` would get now, for sequential sampling; None: never extend a measurement."""
        ...


class NoBaseline:
    """The view of a recorder without a session (a tool, a unit test): nothing stored, no verdict to preview."""

    def curves(self, name: str) -> list[Curve]:
        return []

    def telemetry(self, name: str) -> TelemetrySummary | None:
        return None

    def machine(self, name: str) -> list[MachineState | None] | None:
        return None

    def preview(self, metric: MetricRecord) -> Comparison | None:
        return None


NO_BASELINE = NoBaseline()
