"""Inference workloads: an in-process continuous-batching engine, external-engine adapters, serving metrics,
the throughput-vs-interactivity Pareto front and output parity checks (docs/inference.md)."""
