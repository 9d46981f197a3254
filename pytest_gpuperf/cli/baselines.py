"""`gpuperf baselines diff OLD NEW`: what a baseline regeneration changed, entry by entry, for review.

OLD and NEW are baseline folders (``<hardware-slug>/<module>.json``) or two baseline files. Every file is read
with the store's own validation, so a corrupt file is named rather than diffed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_gpuperf.cli.loading import InputError, check_regular_file, walk_files
from pytest_gpuperf.cli.tables import render, write_output
from pytest_gpuperf.core.stats.unpaired import summarize
from pytest_gpuperf.machine.fingerprint import stack_changes

COLUMNS = (
    ("file", "file"),
    ("test", "test"),
    ("name", "metric/curve"),
    ("change", "change"),
    ("old", "old"),
    ("new", "new"),
    ("ratio", "new/old"),
    ("detail", "detail"),
)


def read_folder(root: Path) -> dict[str, dict[str, Any]]:
    """Baseline documents by path relative to ``root`` (or the file name when ``root`` is a file)."""
    from pytest_gpuperf.core.store.baselines import StoreError, read_document

    if root.is_dir():
        files = [path for path in walk_files(root, (".json",)) if len(path.relative_to(root).parts) == 2]
        if not files:
            raise InputError(f"{root}: no baseline files (<hardware-slug>/<module>.json) in this folder")
    else:
        check_regular_file(root)  # a device or FIFO is refused before the store's reader opens it
        files = [root]
    documents = {}
    for path in files:
        try:
            documents[path.name if root.is_file() else path.relative_to(root).as_posix()] = read_document(path)
        except StoreError as error:
            raise InputError(str(error)) from None
    return documents


def entries(document: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    found = {}
    for test, entry in document["tests"].items():
        for name, metric in (entry.get("metrics") or {}).items():
            found[(test, "metric", name)] = metric
        for name, curve in (entry.get("curves") or {}).items():
            found[(test, "curve", name)] = curve
    return found


def describe_metric(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    def median(entry: dict[str, Any]) -> float:
        return summarize([v for run in entry["runs"] for v in run["samples"]]).median

    row: dict[str, Any] = {}
    if old:
        row["old"] = f"{median(old):.4g} {old['unit']} ({len(old['runs'])} run(s))"
    if new:
        row["new"] = f"{median(new):.4g} {new['unit']} ({len(new['runs'])} run(s))"
    if old and new:
        old_median, new_median = median(old), median(new)
        row["ratio"] = new_median / old_median if old_median else None
        details = stack_changes(old["runs"][-1]["stack"], new["runs"][-1]["stack"])
        if old["unit"] != new["unit"] or old["higher_is_better"] != new["higher_is_better"]:
            details.insert(
                0,
                f"meaning changed: {old['unit']}/{old['higher_is_better']} -> {new['unit']}/{new['higher_is_better']}",
            )
        row["detail"] = details
    return row


def describe_curve(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    def final(entry: dict[str, Any]) -> str:
        ends = [run["values"][-1] for run in entry["runs"] if run["values"]]
        return f"final {min(ends):.4g}..{max(ends):.4g} ({len(entry['runs'])} run(s))" if ends else "empty"

    row: dict[str, Any] = {"old": final(old) if old else None, "new": final(new) if new else None}
    if old and new and old["runs"] and new["runs"]:
        row["detail"] = stack_changes(old["runs"][-1]["stack"], new["runs"][-1]["stack"])
    return row


def diff(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for file in sorted(set(old) | set(new)):
        old_entries = entries(old[file]) if file in old else {}
        new_entries = entries(new[file]) if file in new else {}
        for key in sorted(set(old_entries) | set(new_entries)):
            before, after = old_entries.get(key), new_entries.get(key)
            if before == after:
                continue
            change = "added" if before is None else "removed" if after is None else "changed"
            describe = describe_metric if key[1] == "metric" else describe_curve
            rows.append(
                {
                    "file": file,
                    "test": key[0],
                    "kind": key[1],
                    "name": key[2],
                    "change": change,
                    **describe(before, after),
                }
            )
    return rows


def run(args: argparse.Namespace) -> int:
    old_path, new_path = Path(args.old), Path(args.new)
    rows = diff(read_folder(old_path), read_folder(new_path))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["change"]] = counts.get(row["change"], 0) + 1
    notes = [", ".join(f"{n} {change}" for change, n in sorted(counts.items())) or "no differences"]
    write_output(
        render(
            title=f"gpuperf baselines diff {old_path} -> {new_path}",
            columns=COLUMNS,
            rows=rows,
            notes=notes,
            fmt=args.format,
        ),
        Path(args.output) if args.output else None,
    )
    return 0
