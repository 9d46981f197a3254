"""`python -m pytest_gpuperf.cli`: the `gpuperf` command without its console script."""

from pytest_gpuperf.cli.main import main

raise SystemExit(main())
