"""The `gpuperf` command. Each subcommand is a function taking parsed arguments and returning an exit status."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def cmd_env(args: argparse.Namespace) -> int:
    from pytest_gpuperf.fingerprint import collect
    from pytest_gpuperf.session import resolve_device

    try:
        device = resolve_device(args.device)
    except Exception as error:  # pytest.UsageError when cuda is asked for and absent
        print(f"gpuperf env: {error}", file=sys.stderr)
        return 2
    fingerprint = collect(device)
    if args.json:
        print(json.dumps(fingerprint.as_dict(), indent=1, sort_keys=True))
        return 0
    print(f"hardware key: {fingerprint.slug}")
    for name, value in fingerprint.hardware_key.items():
        print(f"  {name}: {json.dumps(value, sort_keys=True)}")
    print("stack:")
    for name, value in fingerprint.stack.items():
        print(f"  {name}: {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuperf",
        description="Inspect and analyse pytest-gpuperf runs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    env = commands.add_parser(
        "env", help="print this machine's fingerprint (hardware key and stack); example: gpuperf env --json",
        description="Print the hardware key that baselines are matched on and the stack that is recorded.",
    )
    env.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    env.add_argument("--json", action="store_true", help="print JSON instead of text")
    env.set_defaults(run=cmd_env)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    return int(args.run(args))


if __name__ == "__main__":
    raise SystemExit(main())
