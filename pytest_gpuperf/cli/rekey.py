"""`gpuperf baselines rekey`: move this machine's baselines from its former hardware key to its current one.

The CPU part of the key was once the CPU's model name ("cpu-amd-epyc-2c-24gib"); it is now vendor, family/model
and vector ISA ("cpu-amd-f25m17-avx512-bf16-2c-24gib", see docs/baselines.md). The former key cannot be turned
into the new one on paper (it lacks the family, model and ISA), so the move is made on the machine that recorded
the baselines: it computes both keys here, renames the folder (with ``git mv`` inside a git work tree, so history
follows) and writes the new key into each file's ``hardware_key``. Each file is validated before anything moves.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

from pytest_gpuperf.cli.loading import InputError


def _git_tracked(folder: Path) -> bool:
    if shutil.which("git") is None:
        return False
    out = subprocess.run(
        ["git", "-C", str(folder), "ls-files", "--error-unmatch", "."], capture_output=True, text=True, check=False
    )
    return out.returncode == 0


def run(args: argparse.Namespace) -> int:
    from pytest_gpuperf.core.session.session import resolve_device
    from pytest_gpuperf.core.store.baselines import StoreError, read_document, write_atomic
    from pytest_gpuperf.machine.fingerprint import collect

    root = Path(args.baselines)
    try:
        device = resolve_device(args.device)
    except Exception as error:  # pytest.UsageError when cuda is asked for and absent
        raise InputError(str(error)) from None
    fingerprint = collect(device)
    old, new = root / fingerprint.legacy_slug, root / fingerprint.slug
    if old == new:
        print(f"{new}: this machine's key did not change; nothing to do")
        return 0
    if not old.is_dir():
        if new.is_dir():
            print(f"{new}: already keyed by this machine's current key; nothing to do")
            return 0
        raise InputError(
            f"{old}: no such folder; `gpuperf baselines rekey` moves the baselines this machine recorded under "
            f"its former key ({fingerprint.legacy_slug}); run it on the machine that recorded them"
        )
    if new.exists():
        raise InputError(f"{new} exists already beside {old}: merge them by hand (or delete one) and run this again")
    files = sorted(old.glob("*.json"))
    documents = {}
    for path in files:
        try:
            documents[path.name] = read_document(path)
        except StoreError as error:
            raise InputError(str(error)) from None
    verb = "would move" if args.dry_run else "moved"
    if not args.dry_run:
        if _git_tracked(old):
            subprocess.run(["git", "-C", str(old.parent), "mv", old.name, new.name], check=True)
            verb += " (git mv)"
        else:
            old.rename(new)
        for name, document in documents.items():
            document["hardware_key"] = fingerprint.hardware_key
            write_atomic(new / name, document)
    print(f"{verb} {old} -> {new} ({len(files)} file(s), hardware_key updated in each)")
    if not args.dry_run:
        print(f"next: git add -A {root} && git commit -m 'baselines: rekeyed to {fingerprint.slug}'")
    return 0
