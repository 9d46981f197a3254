"""pytest-gpuperf: ML training and inference workloads as pytest tests with statistical, stack-keyed baselines.

Importing this package must stay cheap: nothing here imports torch.
"""

__version__ = "0.1.0"
