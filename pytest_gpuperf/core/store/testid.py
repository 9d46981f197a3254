"""The id a test is judged, stored and reported under: its pytest node id, except for the shipped suites.

pytest names a test by its path relative to the rootdir, or to the command-line argument it was found under when
it lies outside the rootdir, so an installed package's suites get ids that depend on where the package and the
working folder are (a bare ``test_training.py::...``, or one that climbs out through the virtual environment's
site-packages). Baselines keyed by such an id would not be found on the next machine. Invariant: a test in the
shipped suites is named by its place in the package, ``pytest_gpuperf/suites/<module>.py::<test>``, the id pytest
gives it in a checkout run from the repository root, so baselines recorded there judge installed runs and vice
versa.
"""

from __future__ import annotations

from pathlib import Path

SUITES_DIR = Path(__file__).resolve().parents[2] / "suites"
"""Where the shipped suites are, in a checkout or an installed package."""
SUITES_PREFIX = "pytest_gpuperf/suites"
"""Their path in the repository and in the package."""


def stable_test_id(path: Path, nodeid: str) -> str:
    """``nodeid``, or for a test in a file under the shipped suites, its install-independent id."""
    try:
        relative = path.resolve().relative_to(SUITES_DIR)
    except ValueError:
        return nodeid
    _, separator, rest = nodeid.partition("::")
    return f"{SUITES_PREFIX}/{relative.as_posix()}{separator}{rest}"
