"""Estimators: pure functions from samples to figures
(intervals, paired statistics, convergence, sittings, fleet placement)."""
