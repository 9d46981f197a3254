"""Subcommands of the `gpuperf` command; cli.py imports each one only when it runs."""
