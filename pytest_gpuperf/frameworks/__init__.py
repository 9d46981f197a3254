"""Adapters that read what ML frameworks write (log lines, JSON, JSONL) into gpuperf metrics, for
``perf.run_command`` (core/record/command.py). One module per framework, each adapter behind core/record/readings.py's
``Adapter`` protocol; the generic ``JsonlAdapter`` and ``RegexAdapter`` are configured by the test. No torch."""

from pytest_gpuperf.frameworks.generic import JsonlAdapter, Metric, RegexAdapter

__all__ = ["JsonlAdapter", "Metric", "RegexAdapter"]
