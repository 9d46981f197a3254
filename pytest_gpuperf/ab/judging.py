"""The judging of pairs: the comparison's PairedRules from its first complete pair, each complete pair's
figures added to its metrics (or left out, ab/leave_out.py), every undecided metric judged on its paired
log-ratios (core/stats/paired.py), and whether another pair could still change a verdict.

Invariant: a decided metric keeps its verdict; a metric's looks are its judged pairs, the count the sequential
boundary is calibrated on. Runs nothing, prints nothing. May import core/, machine/ and ab/'s model, reading and
leave_out; never cli/.
"""

from __future__ import annotations

from pytest_gpuperf.ab.leave_out import left_out, rules_for
from pytest_gpuperf.ab.model import AbPlan, AbResult, MetricOutcome, PairRecord
from pytest_gpuperf.ab.reading import session_metrics
from pytest_gpuperf.core.stats.paired import PairedRules, log_ratio
from pytest_gpuperf.core.verdict.paired import judge
from pytest_gpuperf.core.verdict.policy import paired_policy_for
from pytest_gpuperf.core.verdict.vocabulary import Verdict


def rules_from(plan: AbPlan, pair: PairRecord) -> PairedRules:
    """The comparison's rules, from its first complete pair. The flag level is the invocation's: ``plan.alpha``
    over the metrics both sessions recorded (Bonferroni), so an A/A comparison of many metrics is flagged in at
    most ``alpha`` of runs, not one metric's ``alpha`` times their number."""
    figure = plan.session_figure
    both = set(session_metrics(pair.side("A").document or {}, figure))
    both &= set(session_metrics(pair.side("B").document or {}, figure))
    if plan.metrics is not None:
        both &= plan.metrics
    return paired_policy_for(
        threshold=plan.threshold,
        recorded=(pair.side("A").document or {}).get("settings"),
        alpha=plan.alpha / max(1, len(both)),
        min_pairs=plan.min_pairs,
        max_pairs=plan.max_pairs,
    )


def add_pair(pair: PairRecord, result: AbResult) -> None:
    """A complete pair's figures added to each wanted metric both sides measured (unless the metric is decided,
    has had its last look, or a leave-out rule strikes the pair); a metric only one side measured is MISSING."""
    figure = result.plan.session_figure
    a = session_metrics(pair.side("A").document or {}, figure)
    b = session_metrics(pair.side("B").document or {}, figure)
    wanted = result.plan.metrics
    rules = rules_for(taking_turns=result.plan.take_turns)
    for key in sorted(set(a) | set(b)):
        if wanted is not None and key not in wanted:
            continue
        source = a.get(key) or b[key]
        metric = result.metrics.get(key)
        if metric is None:
            metric = result.metrics[key] = MetricOutcome(
                test=key[0], metric=key[1], unit=source.unit, higher_is_better=source.higher_is_better
            )
        if key in a and key in b:
            metric.missing = None
            if metric.decided or (result.rules is not None and len(metric.log_ratios) >= result.rules.max_pairs):
                continue  # decided, or its last look taken: AMBIGUOUS stays AMBIGUOUS
            reason = left_out(a[key], b[key], rules)
            if reason:
                metric.contended.append(f"pair {pair.index}: {reason}")
                continue
            metric.a_figures.append(a[key].figure)
            metric.b_figures.append(b[key].figure)
            try:
                metric.log_ratios.append(
                    log_ratio(a[key].figure, b[key].figure, higher_is_better=metric.higher_is_better)
                )
            except ValueError:
                metric.a_figures.pop()
                metric.b_figures.pop()
        elif not metric.log_ratios:
            metric.missing = "only in A" if key in a else "only in B"


def at_last_look(result: AbResult, max_pairs: int, max_left_out: int) -> bool:
    """Whether no further pair can change a verdict: every undecided metric has had its last look (max_pairs pairs
    judged), or the pairs run reach max_pairs plus the pairs that may replace those the machine's state left out.
    A metric's looks are its judged pairs, the count the sequential boundary is calibrated on, so replacing a
    left-out pair keeps the error rates (the choice never reads the metric's figures)."""
    done = result.complete_pairs
    if done >= max_pairs + max_left_out:
        return True
    if done < max_pairs:
        return False
    pending = [m for m in result.metrics.values() if not m.decided and not m.missing]
    return all(len(m.log_ratios) >= max_pairs for m in pending)


def judge_all(result: AbResult) -> int:
    """Every undecided metric judged on its log-ratios so far; returns how many metrics are decided."""
    assert result.rules is not None
    boundary = result.rules.boundary()
    for metric in result.metrics.values():
        if metric.decided or metric.missing or not metric.log_ratios:
            continue
        metric.judgement = judge(metric.log_ratios, result.rules, boundary)
        if metric.judgement.verdict is not Verdict.AMBIGUOUS:
            metric.decided_at = len(metric.log_ratios)
            if metric.judgement.verdict in (Verdict.REGRESSED, Verdict.IMPROVED):
                metric.components = result.stack_changes
    return sum(1 for m in result.metrics.values() if m.decided)
