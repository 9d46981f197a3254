"""Recording: the `perf` object a test measures with, and running a user's command as a measured child."""
