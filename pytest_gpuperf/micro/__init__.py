"""Kernel-level microbenchmarks: timing helpers and the pytest plugin that registers the `micro` marker."""
