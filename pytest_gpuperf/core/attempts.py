"""Confirmation attempts: a test whose metrics look REGRESSED runs again through pytest's own runtest protocol.

A transient slowdown of a shared machine lasts seconds; a real regression shows in every attempt. So before a
REGRESSED verdict fails a test, the test is run once more (``--gpuperf-confirm N`` times at most) and
core/session.py ``confirm`` keeps REGRESSED only for the metrics that regressed in consecutive attempts.

Each attempt is a full setup/call/teardown: function-scoped fixtures are torn down and built afresh, so state a
test changed does not leak into the next attempt, and other plugins (durations, timeouts, JUnit) see each call
as a call. Wider-scoped fixtures (module, session) stay set up between attempts: tearing down only the test's
own node is what pytest does between two tests of one module. The attempt that asked for a confirmation is
reported with the outcome "rerun" (as pytest-rerunfailures reports its re-runs), so one test counts once.

This drives ``_pytest.runner.call_and_report``, the one step of the protocol pytest does not export; it is
what ``runtestprotocol`` itself calls and what re-run plugins build on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.core.session import GpuperfSession, MetricResult

attempt_key = pytest.StashKey[int]()
"""The attempt now running (1, 2, ...), set only while this module runs the item's protocol."""
_again_key = pytest.StashKey[bool]()
_previous_key = pytest.StashKey["list[MetricResult]"]()

RERUN = "rerun"


def settle(item: pytest.Item, session: GpuperfSession, results: list[MetricResult]) -> list[MetricResult] | None:
    """The final results of this attempt, or None when another attempt is to confirm a suspected regression.

    Called from the call phase, after the test body ran. Outside ``run_protocol`` (confirmation off, or another
    plugin runs the protocol) a test has one attempt and its results are final.
    """
    from pytest_gpuperf.core.session import confirm

    attempt = item.stash.get(attempt_key, None)
    if attempt is None:
        return results
    if attempt > 1:
        results = confirm(item.stash[_previous_key], results, attempt)
    if attempt <= session.settings.confirm and session.suspects_regression(results):
        item.stash[_previous_key] = results
        item.stash[_again_key] = True
        return None
    return results


def run_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """Run the item's setup/call/teardown once per attempt, logging one test's reports."""
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    attempt = 1
    while True:
        item.stash[attempt_key] = attempt
        item.stash[_again_key] = False
        reports = _one_attempt(item, nextitem)
        again = item.stash[_again_key]
        for report in reports:
            if again and report.when == "call" and report.passed:
                report.outcome = RERUN  # type: ignore[assignment]  # the outcome re-run plugins use
                report.longrepr = f"gpuperf: attempt {attempt} looks REGRESSED; running the test again to confirm"
                setattr(report, "gpuperf_attempt", attempt)  # noqa: B010  # travels with the report under xdist
            elif again and report.when == "teardown" and report.passed:
                # JUnit XML closes a test case at its teardown report: only the last attempt's closes it
                continue
            item.ihook.pytest_runtest_logreport(report=report)
        if not again:
            break
        attempt += 1
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _one_attempt(item: pytest.Item, nextitem: pytest.Item | None) -> list[pytest.TestReport]:
    """One setup/call/teardown of the item, as pytest's runtestprotocol does, reports not yet logged. When the
    call asked for another attempt, teardown stops at the item's parent: the test's own fixtures go, the
    module's and session's stay for the next attempt."""
    from _pytest.runner import call_and_report, show_test_item

    function = item if isinstance(item, pytest.Function) else None
    if function is not None and not function._request:
        function._initrequest()  # a fresh fixture request: this attempt builds its own function-scoped fixtures
    try:
        reports = [call_and_report(item, "setup", log=False)]
        if reports[0].passed:
            setup_only = item.config.getoption("setuponly", False)
            if item.config.getoption("setupshow", False):
                show_test_item(item, add_space=not setup_only)
            if not setup_only:
                reports.append(call_and_report(item, "call", log=False))
        if item.session.shouldfail or item.session.shouldstop:
            item.stash[_again_key] = False
            target: pytest.Item | pytest.Collector | None = None  # tear everything down, as runtestprotocol does
        elif item.stash[_again_key]:
            target = item.parent
        else:
            target = nextitem
        reports.append(call_and_report(item, "teardown", log=False, nextitem=target))
    finally:
        if function is not None:  # as runtestprotocol: the attempt's fixture values go with its teardown
            function._request = False  # type: ignore[assignment]
            function.funcargs = None  # type: ignore[assignment]
    return reports


def report_status(report: pytest.TestReport) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
    """The terminal's word for an attempt that asked for a confirmation."""
    if report.outcome == RERUN and getattr(report, "gpuperf_attempt", None):
        return RERUN, "R", ("RERUN", {"yellow": True})
    return None
