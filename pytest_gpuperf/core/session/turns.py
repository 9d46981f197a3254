"""Taking turns with the other session of a `gpuperf ab` pair: the session's side (no torch, no pytest).

With ``--gpuperf-take-turns PREFIX`` a session asks for the one turn of its pair before each perf test's setup and
each measured round, and keeps it until it asks again or exits; the partner waits, blocked on a pipe. The channel
is two named pipes per side that `gpuperf ab` makes (ab/turns.py holds the other end): ``PREFIX.ask`` (this side
writes ``?`` to ask, ``.`` when done) and ``PREFIX.grant`` (it reads ``!``). End-of-file on the grant pipe means
`gpuperf ab` is gone: the session goes on alone and says so once. Why pipes, and what taking turns buys:
docs/design/taking-turns.md.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

from pytest_gpuperf.machine.contention import TurnWaits, turn_counters

ASK = b"?"
GRANT = b"!"
DONE = b"."


class TurnError(Exception):
    """The turn channel cannot be opened: it names the path and what to do."""


def check_channel(prefix: str) -> None:
    """Raise TurnError unless both pipes of ``prefix`` exist as named pipes (checked when the session starts)."""
    for path in (Path(prefix + ".ask"), Path(prefix + ".grant")):
        if not path.exists() or not stat.S_ISFIFO(path.stat().st_mode):
            raise TurnError(
                f"--gpuperf-take-turns {prefix}: {path} is not a named pipe; the option is set by "
                "`gpuperf ab --take-turns`, which makes the pipes (a container must mount its --out folder)"
            )


class Turns:
    """This session's end of the turn channel, opened at the first ask."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._ask: int | None = None
        self._grant: int | None = None
        self._alone = False
        self.asked = 0
        """How many turns this session asked for (the results record it)."""

    def _open(self) -> None:
        check_channel(self.prefix)
        ask, grant = Path(self.prefix + ".ask"), Path(self.prefix + ".grant")
        self._ask = os.open(ask, os.O_WRONLY)  # gpuperf ab holds the read end open: this does not block
        self._grant = os.open(grant, os.O_RDONLY)

    def take(self) -> None:
        """Give back the turn held, if any, and wait until it is this session's again."""
        if self._alone:
            return
        if self._ask is None:
            self._open()
        assert self._ask is not None and self._grant is not None
        self.asked += 1
        try:
            os.write(self._ask, ASK)
            answer = os.read(self._grant, 1)
        except BrokenPipeError:
            answer = b""
        if answer != GRANT:
            self._alone = True
            print(
                f"gpuperf: the turn channel {self.prefix} closed (gpuperf ab gone?); measuring without turns",
                file=sys.stderr,
            )

    def done(self) -> None:
        """Tell `gpuperf ab` this session measures no more (its partner may run alone); close the pipes."""
        if self._ask is not None:
            try:
                os.write(self._ask, DONE)
            except OSError:
                pass
            os.close(self._ask)
            self._ask = None
        if self._grant is not None:
            os.close(self._grant)
            self._grant = None


class TakingTurns:
    """The session's gate (core/record/gate.py) in a pair taking turns: every point waits for the turn.

    It keeps the totals of its waits (``waited``): the partner's load while this session waits is the pair's own,
    and the machine windows leave it out (machine/contention.py ``TurnWaits``)."""

    def __init__(self, turns: Turns) -> None:
        self.turns = turns
        self._waited = TurnWaits()

    def before_test(self) -> None:
        self._take()

    def before_round(self) -> None:
        self._take()

    def before_call(self) -> None:
        self._take()

    def waited(self) -> TurnWaits:
        return self._waited

    def close(self) -> None:
        self.turns.done()  # the partner may now run alone

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Counts what the machine does in the block as a wait for the turn (``waited``)."""
        before = turn_counters()
        try:
            yield
        finally:
            after = turn_counters()
            if before is not None and after is not None:
                self._waited = self._waited + (after - before)

    def _take(self) -> None:
        with self.waiting():
            self.turns.take()
