"""Inference workloads: an in-process continuous-batching engine, an external OpenAI-compatible engine, serving metrics,
the throughput-vs-interactivity Pareto front and output parity checks (docs/inference.md)."""
