"""Puts the run's fingerprint into ``--junitxml`` output, so `gpuperf` commands can read a JUnit file's stack.

JUnit testcase properties carry each metric (report.junit_properties) but nothing says where the run was taken.
This adds the testsuite property ``gpuperf.fingerprint`` (results.FINGERPRINT_PROPERTY, the format's owner): the
JSON of ``Fingerprint.as_dict()``; and the job's coverage, ``gpuperf.coverage.*`` (results.coverage_properties).
"""

from __future__ import annotations

import json

import pytest

from pytest_gpuperf.core.session.state import session_key
from pytest_gpuperf.core.store.results import FINGERPRINT_PROPERTY, coverage_properties

__all__ = ["FINGERPRINT_PROPERTY", "pytest_sessionfinish"]


@pytest.hookimpl(tryfirst=True)  # before junitxml's own sessionfinish writes the file
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if getattr(config, "workeroutput", None) is not None:
        return  # an xdist worker: the controller writes the JUnit file
    state = config.stash.get(session_key, None)
    if state is None or not state.measured_anything():
        return
    try:
        from _pytest.junitxml import xml_key  # where record_testsuite_property finds the writer too
    except ImportError:  # a pytest without it: the file simply lacks the property
        return
    writer = config.stash.get(xml_key, None)
    if writer is not None:
        writer.add_global_property(FINGERPRINT_PROPERTY, json.dumps(state.fingerprint.as_dict(), sort_keys=True))
        coverage = state.coverage_document()
        for name, value in coverage_properties(coverage) if coverage else []:
            writer.add_global_property(name, value)
