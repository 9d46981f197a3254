"""The plugin's core: options, run state, recording (`Perf`), statistics and verdicts, the baseline store, and the
terminal/JUnit report. It imports no workload package (training, inference, micro, distributed, models) and no
command-line module; tests/unit/test_layout.py holds that rule."""
