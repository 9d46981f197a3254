"""Persistence: the file formats (baselines, results, fleet spread), their strict parsing and atomic, locked writes."""
