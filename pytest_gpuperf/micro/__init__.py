"""Kernel-level microbenchmarks: timing helpers and the pytest plugin with the device timer fixture."""
