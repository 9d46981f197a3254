"""The ``Gate``: where a test's recorder lets its session hold it back, and ``OPEN``, the gate that never does.

The recorder (perf.py) passes the gate before its test's machine window opens, then for each measurement before
each call it times itself, or before each round a timer of the test's own times (never both for one round). A
session alone never waits; a `gpuperf ab --take-turns` session waits there for its turn (core/session/turns.py).
What the machine did while a gate held the test back is not the test's: ``waited`` gives the totals of those
waits, which the machine windows leave out. May not import core/session/ (the layer above).
"""

from __future__ import annotations

from typing import Protocol

from pytest_gpuperf.machine.contention import TurnWaits


class Gate(Protocol):
    """The points of a session's tests at which the session may hold them back."""

    def before_test(self) -> None:
        """Before a test's own machine window opens (its setup)."""
        ...

    def before_round(self) -> None:
        """Before a measured round whose calls a timer of the test's own times (its warm-up included)."""
        ...

    def before_call(self) -> None:
        """Before each call the recorder times itself (warm-up calls and timed calls)."""
        ...

    def waited(self) -> TurnWaits:
        """The totals of the waits at this gate so far."""
        ...

    def close(self) -> None:
        """The session measures no more: whoever the gate waits on may go on alone."""
        ...


class OpenGate:
    """The gate of a session alone: no point holds it back, nothing is waited."""

    def before_test(self) -> None:
        pass

    def before_round(self) -> None:
        pass

    def before_call(self) -> None:
        pass

    def waited(self) -> TurnWaits:
        return TurnWaits()

    def close(self) -> None:
        pass


OPEN = OpenGate()
