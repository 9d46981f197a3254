"""Both sessions at once, taking turns test by test and round by round (ab/turns.py brokers the turn); the side
the pair's order names first is granted the first turn.

A system without named pipes, or an --out where they cannot be made, is an AbError. May import ab/'s model,
reading, sessions, turns and pairs/protocol.py; never cli/ or ab/engine.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pytest_gpuperf.ab.model import AbError, AbPlan, SessionOutcome
from pytest_gpuperf.ab.pairs.protocol import TimeLeft, session_argv, session_files
from pytest_gpuperf.ab.reading import finished_session
from pytest_gpuperf.ab.turns import TurnChannelError, run_pair_taking_turns


@dataclass(frozen=True, slots=True, kw_only=True)
class TakingTurns:
    """The PairRunner of sessions taking turns."""

    def run_pair(
        self, plan: AbPlan, order: str, index: int, sessions_dir: Path, *, env: dict[str, str], time_left: TimeLeft
    ) -> Iterator[SessionOutcome]:
        timeout = time_left()
        files = {side: session_files(sessions_dir, index, side) for side in order}
        turns = {side: sessions_dir / f"{index:03d}-{side}.turn" for side in order}
        argvs = {side: session_argv(plan, side, files[side][0], turns[side]) for side in order}
        try:
            ran = run_pair_taking_turns(
                [argvs[side] for side in order],
                prefixes=[turns[side] for side in order],
                log_files=[files[side][1] for side in order],
                timeout=timeout,
                cwd=plan.cwd,
                env=env,
            )
        except TurnChannelError as error:
            raise AbError(str(error)) from None
        for side, (returncode, seconds) in zip(order, ran):
            yield finished_session(side, index, argvs[side], returncode, seconds, *files[side])
