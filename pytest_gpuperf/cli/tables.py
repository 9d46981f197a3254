"""Rendering a command's rows as an aligned text table, Markdown, JSON or a small HTML page."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_gpuperf.cli.output import emit, write_text

FORMATS = ("table", "md", "json", "html")


def render(
    *,
    title: str,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[dict[str, Any]],
    notes: Sequence[str] = (),
    fmt: str,
    extra: dict[str, Any] | None = None,
    head: Sequence[str] = (),
) -> str:
    """``columns`` are (row key, heading) pairs; JSON carries every key of every row, the others the columns.
    ``head`` lines (the roll-up) come before the table, ``notes`` after it."""
    if fmt == "json":
        return (
            json.dumps(
                {"title": title, "headline": list(head), "notes": list(notes), "rows": list(rows), **(extra or {})},
                indent=1,
                sort_keys=True,
                default=str,
            )
            + "\n"
        )
    cells = [[cell_text(row.get(key)) for key, _ in columns] for row in rows]
    headings = [heading for _, heading in columns]
    if fmt == "md":
        lines = [f"## {title}", ""] + ([f"    {line}" for line in head] + [""] if head else [])
        lines += ["| " + " | ".join(headings) + " |", "|" + " --- |" * len(headings)]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in cells]
        lines += [""] + [f"- {note}" for note in notes]
        return "\n".join(lines) + "\n"
    if fmt == "html":
        top = f"<pre>{html.escape(chr(10).join(head))}</pre>" if head else ""
        return html_page(title, top + html_table(headings, cells) + "".join(f"<p>{html.escape(n)}</p>" for n in notes))
    widths = [max([len(heading)] + [len(row[i]) for row in cells]) for i, heading in enumerate(headings)]
    lines = [title, *head, "  ".join(h.ljust(w) for h, w in zip(headings, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines + list(notes)) + "\n"


def cell_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "; ".join(str(v) for v in value) or "-"
    return str(value)


def html_table(headings: Sequence[str], cells: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings)
    body = "".join(
        "<tr>" + "".join(f'<td class="{_css(c)}">{html.escape(c)}</td>' for c in row) + "</tr>" for row in cells
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _css(cell: str) -> str:
    return {"REGRESSED": "bad", "FAIL": "bad", "IMPROVED": "good", "PASS": "ok"}.get(cell, "")


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f0f0f0; }
td.bad { background: #fbd5d5; font-weight: bold; }
td.good { background: #d5f0fb; }
td.ok { background: #dbf5d5; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
"""


def html_page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>\n"
    )


def write_output(text: str, output: Path | None, *, what: str = "output file") -> None:
    """To standard output, or to ``output`` (an error naming it when it cannot be written; see cli/output.py)."""
    if output is None:
        emit(text)
        return
    write_text(output, text, what=what)
