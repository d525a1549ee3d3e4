"""How every command prints: one ``--format table|json|jsonl`` option and the printers behind it.

``table`` is aligned text for people, ``json`` one JSON document (an object for a command with one
result, else an array), ``jsonl`` one JSON object per line for pipes. ``--json`` is kept as the
older spelling of ``--format jsonl``.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import click

FORMATS = ["table", "json", "jsonl"]


def format_option(default: str) -> Callable[[Callable], Callable]:
    """Add ``--format`` (passed to the command as ``fmt``) and the hidden ``--json`` alias."""

    def decorate(command: Callable) -> Callable:
        @click.option(
            "--format",
            "-f",
            "fmt",
            type=click.Choice(FORMATS),
            default=default,
            show_default=True,
            help="table: aligned text; json: one JSON document; jsonl: one JSON object per line.",
        )
        @click.option("--json", "as_json", is_flag=True, hidden=True, help="The same as --format jsonl.")
        @functools.wraps(command)
        def wrapper(*args: Any, fmt: str, as_json: bool, **kwargs: Any) -> Any:
            return command(*args, fmt="jsonl" if as_json else fmt, **kwargs)

        return wrapper

    return decorate


def emit(records: list[dict[str, Any]] | dict[str, Any], fmt: str, table: Callable[[], None]) -> None:
    """Print ``records`` (a list, or one record) as JSON or JSON lines, or call ``table``."""
    if fmt == "json":
        sys.stdout.write(json.dumps(records, ensure_ascii=False, indent=2) + "\n")
    elif fmt == "jsonl":
        print_jsonl(records if isinstance(records, list) else [records])
    else:
        table()


def print_jsonl(records: list[dict[str, Any]]) -> None:
    for record in records:
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            click.echo("  ".join("-" * w for w in widths))


def print_fields(record: dict[str, Any]) -> None:
    """One record as a two-column field/value table."""
    print_table(["field", "value"], [[k, v] for k, v in record.items()])


def clip(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
