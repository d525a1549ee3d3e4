"""Reading texts for commands: from arguments, a file, or standard input.

A file holds one text per line; ``.jsonl``: the ``text`` field of each object; ``.csv``: the
``text`` column (the header row names the columns and is never a text). No texts at all is an
error, raised before any model is loaded.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import click


def read_lines(path: Path) -> list[str]:
    """One text per line (``.jsonl``: the ``text`` field of each object, ``.csv``: the ``text``
    column); blank lines skipped."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise click.ClickException(f"cannot read {path}: {error.strerror or error}") from None
    try:
        content = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise click.ClickException(
            f"{path} is not UTF-8 text (byte {error.start}: {raw[error.start : error.start + 1]!r}); "
            "convert it to UTF-8 first"
        ) from None
    if path.suffix.lower() == ".csv":
        return _csv_texts(content, path)
    lines = [line for line in content.splitlines() if line.strip()]
    if path.suffix.lower() == ".jsonl":
        texts = []
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise click.ClickException(f"{path}:{number}: not valid JSON ({error.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise click.ClickException(f'{path}:{number}: expected an object with a "text" string')
            texts.append(record["text"])
        return texts
    return lines


def _csv_texts(content: str, path: Path) -> list[str]:
    reader = csv.DictReader(io.StringIO(content))
    if reader.fieldnames is None or "text" not in reader.fieldnames:
        raise click.ClickException(
            f"{path} has no 'text' column (columns: {reader.fieldnames or []}); name the column of "
            "texts 'text' in the header row"
        )
    return [row["text"] for row in reader if (row.get("text") or "").strip()]


def gather_texts(arguments: tuple[str, ...], input_file: Path | None, what: str = "text") -> list[str]:
    """Texts from arguments, else ``--input`` (``-`` is stdin), else piped standard input."""
    if arguments:
        return list(arguments)
    if input_file is not None and str(input_file) != "-":
        texts = read_lines(input_file)
        source = str(input_file)
    elif input_file is not None or not sys.stdin.isatty():
        data = sys.stdin.buffer.read()
        try:
            texts = [line for line in data.decode("utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError:
            raise click.ClickException("standard input is not UTF-8 text") from None
        source = "standard input"
    else:
        raise click.UsageError(f"give the {what} as arguments, with --input FILE, or on standard input")
    if not texts:
        raise click.ClickException(
            f"no input: {source} holds no {what} (only blank lines or nothing); give one {what} per line"
        )
    return texts
