"""Slurm's compressed node lists (``gpu-[01-03,07],login1``) expanded, and a node's address from ``scontrol``.

Pure parsing, standard library only: the plugin reads the job's first node to rendezvous without importing torch.
"""

from __future__ import annotations

import re
import subprocess

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class NodeListError(ValueError):
    """A node list that does not parse; the message quotes it and says where it failed."""


def expand(text: str) -> list[str]:
    """``n[1-3],gpu-[01,07]x`` -> ``["n1", "n2", "n3", "gpu-01x", "gpu-07x"]``; zero padding is kept."""
    if not text.strip():
        raise NodeListError("empty node list: expected names such as 'n[1-4]' or 'gpu01,gpu02'")
    names: list[str] = []
    for item in _split_top(text.strip(), text):
        names.extend(_expand_item(item, text))
    return names


def _split_top(text: str, whole: str) -> list[str]:
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise NodeListError(f"node list {whole!r}: nested '[' at character {index + 1}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise NodeListError(f"node list {whole!r}: ']' without '[' at character {index + 1}")
        elif char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    if depth:
        raise NodeListError(f"node list {whole!r}: '[' is never closed")
    items.append(text[start:])
    for item in items:
        if not item or any(c.isspace() for c in item):
            raise NodeListError(f"node list {whole!r}: empty or blank name {item!r}")
    return items


def _expand_item(item: str, whole: str) -> list[str]:
    open_at = item.find("[")
    if open_at < 0:
        return [item]
    close_at = item.index("]", open_at)
    prefix, body, rest = item[:open_at], item[open_at + 1 : close_at], item[close_at + 1 :]
    numbers: list[str] = []
    for part in body.split(","):
        found = _RANGE.match(part)
        if found is None:
            raise NodeListError(f"node list {whole!r}: {part!r} in [{body}] is not a number or a range a-b")
        low, high = found.group(1), found.group(2) or found.group(1)
        if int(high) < int(low):
            raise NodeListError(f"node list {whole!r}: range {part!r} runs backwards")
        width = len(low) if low.startswith("0") else 0
        numbers.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    tails = _expand_item(rest, whole) if "[" in rest else [rest]
    return [f"{prefix}{number}{tail}" for number in numbers for tail in tails]


def node_address(name: str, *, env: dict[str, str] | None = None, timeout_s: float = 20.0) -> str:
    """The address Slurm reaches ``name`` at (its NodeAddr): node names need not resolve (a cloud's, or
    several slurmd on one machine). Falls back to the name itself where scontrol does not answer."""
    try:
        done = subprocess.run(
            ["scontrol", "show", "node", name, "-o"], capture_output=True, text=True, timeout=timeout_s, env=env
        )
    except (OSError, subprocess.SubprocessError):
        return name
    found = re.search(r"\bNodeAddr=(\S+)", done.stdout)
    return found.group(1) if done.returncode == 0 and found else name


def main(argv: list[str] | None = None) -> int:
    """``python -m pytest_gpuperf.slurm.nodelist``: the address of the job's first node, for a rendezvous."""
    import os
    import sys

    args = sys.argv[1:] if argv is None else argv
    text = args[0] if args else os.environ.get("SLURM_JOB_NODELIST", "")
    try:
        nodes = expand(text)
    except NodeListError as error:
        where = "the argument" if args else "SLURM_JOB_NODELIST (unset outside a Slurm job)"
        print(f"pytest_gpuperf.slurm.nodelist: {error} (from {where})", file=sys.stderr)
        return 2
    print(node_address(nodes[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
