"""Which of a baseline's runs were recorded in one sitting, and whether a measurement shares their sitting (pure).

Owns ``Sittings`` and ``group_sittings``: runs less than ``SITTING_GAP`` apart (chained) are one sitting, told
apart by their dates alone. Invariants: a run without a readable date is a sitting of its own, and a measurement
without one shares none of the baseline's: both err toward the wider noise, never toward a false flag. What a new
sitting adds to the noise is core/stats/unpaired.py's. Imports only core/stats/. Rationale: docs/design/sittings.md.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

SITTING_GAP = dt.timedelta(hours=1)
"""Runs closer than this are one sitting. The VM's machine state correlates over seconds to minutes (consecutive
processes ~2 s apart correlate 0.40, 4-8 apart ~0: benchmarks/README.md); an hour joins the back-to-back runs of
one recording and keeps apart a recording and the next day's job."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Sittings:
    """A baseline's runs grouped by sitting, and where the measurement judged against them stands."""

    groups: tuple[tuple[int, ...], ...]
    """Indexes of the baseline runs, one tuple per sitting, in time order (undated runs last, one each)."""
    joined: bool
    """The measurement was taken in the sitting of every baseline run: no shift between sittings separates them."""

    @property
    def count(self) -> int:
        return len(self.groups)

    def without(self, dropped: Sequence[int]) -> Sittings:
        """The same grouping of the runs left when ``dropped`` (indexes) are left out, renumbered as the runs left
        are; a sitting left empty is gone. ``joined`` stays as it was: leaving runs out never joins sittings."""
        gone = set(dropped)
        kept = sorted(i for group in self.groups for i in group if i not in gone)
        index = {old: new for new, old in enumerate(kept)}
        groups = tuple(tuple(index[i] for i in group if i not in gone) for group in self.groups)
        return Sittings(groups=tuple(group for group in groups if group), joined=self.joined)


def parse_date(value: str | None) -> dt.datetime | None:
    """An ISO timestamp as an aware UTC datetime (a naive one is read as UTC), or None when it is not one."""
    if not value:
        return None
    try:
        stamp = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp.replace(tzinfo=dt.timezone.utc) if stamp.tzinfo is None else stamp.astimezone(dt.timezone.utc)


def group_sittings(run_dates: Sequence[str | None], measured_at: str | None) -> Sittings:
    """Group the baseline runs (their stored dates, in store order) into sittings and place the measurement."""
    dated = sorted((stamp, i) for i, value in enumerate(run_dates) if (stamp := parse_date(value)) is not None)
    groups: list[list[int]] = []
    spans: list[tuple[dt.datetime, dt.datetime]] = []
    for stamp, i in dated:
        if spans and stamp - spans[-1][1] < SITTING_GAP:
            groups[-1].append(i)
            spans[-1] = (spans[-1][0], stamp)
        else:
            groups.append([i])
            spans.append((stamp, stamp))
    undated = [i for i, value in enumerate(run_dates) if parse_date(value) is None]
    groups.extend([i] for i in undated)
    now = parse_date(measured_at)
    joined = (
        now is not None
        and not undated
        and len(spans) == 1
        and spans[0][0] - SITTING_GAP < now < spans[0][1] + SITTING_GAP
    )
    return Sittings(groups=tuple(tuple(sorted(group)) for group in groups), joined=joined)
