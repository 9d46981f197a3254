"""The `gpuperf` command line: main.py parses it and imports each subcommand's module only when it runs."""
