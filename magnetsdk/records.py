"""Reading text and record files: the one reader behind every command, evaluation, training and index.

Formats, chosen by the file's suffix:

- ``.jsonl``: one JSON object per non-blank line;
- ``.csv`` / ``.tsv``: a header row naming the columns, then one record per row;
- anything else (``.txt``): one text per non-blank line.

Files are read as UTF-8 (a byte-order mark is dropped). Every problem is reported with the file
and line (``path:LINE: what was wrong``) as a :class:`DataError`; a file that cannot be read at all
is a ``FileNotFoundError`` that says why. A reader that should go on past a bad record (the index
skips and reports it) passes ``strict=False`` and gets the problem back instead of an error.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORD_SUFFIXES = (".jsonl", ".csv", ".tsv")


class DataError(ValueError):
    """A data file that cannot be used; the message names the file (and line) and what to change."""


@dataclass(frozen=True)
class Row:
    """One record of a file: its line (a table's header is line 1) and its fields, or the problem."""

    line: int
    fields: dict[str, Any]
    problem: str | None = None  # only with strict=False: why the record could not be read


def read_text(path: str | Path) -> str:
    """The file's text, decoded as UTF-8."""
    source = Path(path)
    try:
        raw = source.read_bytes()
    except OSError as error:
        raise FileNotFoundError(f"cannot read {source}: {error.strerror or error}") from None
    return decode_text(raw, str(source))


def decode_text(raw: bytes, name: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{name} is not UTF-8 text (byte {error.start}: {raw[error.start : error.start + 1]!r}); "
            "convert it to UTF-8 first"
        ) from None


def jsonl_rows(content: str, name: str, strict: bool = True) -> Iterator[Row]:
    """The objects of JSON-lines ``content`` (from the file ``name``), blank lines skipped."""
    for number, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            yield _problem(name, number, f"not valid JSON ({error.msg})", strict)
            continue
        if not isinstance(value, dict):
            yield _problem(name, number, f"expected a JSON object, got {type(value).__name__}", strict)
            continue
        yield Row(number, value)


def table_rows(
    content: str, name: str, required: tuple[str, ...] = (), delimiter: str = ",", strict: bool = True
) -> Iterator[Row]:
    """The rows of a CSV/TSV table whose header row names ``required`` columns (and maybe more)."""
    reader = csv.DictReader(io.StringIO(content, newline=""), delimiter=delimiter)
    header = reader.fieldnames or []
    missing = [c for c in required if c not in header]
    if missing:
        yield _problem(
            name,
            1,
            f"the header row has no {' or '.join(map(repr, missing))} column (columns: {header}); "
            f"name the columns {list(required)} in it",
            strict,
        )
        return
    for row in reader:
        number = reader.line_num
        if any(row.get(c) is None for c in required):
            yield _problem(name, number, f"fewer columns than the header {header}", strict)
            continue
        yield Row(number, {k: v for k, v in row.items() if k is not None})


def rows(path: str | Path, required: tuple[str, ...] = ()) -> list[Row]:
    """The records of a ``.jsonl``, ``.csv`` or ``.tsv`` file, each holding the ``required`` keys."""
    source = Path(path)
    suffix = source.suffix.lower()
    if suffix not in RECORD_SUFFIXES:
        raise DataError(f"{source}: records are read from {list(RECORD_SUFFIXES)} files, not {suffix!r}")
    content = read_text(source)
    if suffix == ".jsonl":
        found = list(jsonl_rows(content, str(source)))
        for row in found:
            missing = [k for k in required if k not in row.fields]
            if missing:
                raise DataError(
                    f"{source}:{row.line}: missing {missing}; each line needs the keys {list(required)} "
                    f"(found {sorted(row.fields)})"
                )
        return found
    return list(table_rows(content, str(source), required, "\t" if suffix == ".tsv" else ","))


def read_texts(path: str | Path, field: str = "text", strip: bool = True) -> list[str]:
    """The non-blank texts of a file: its lines, or the string ``field`` of each record.

    ``strip=False`` keeps a line's own spaces (a prompt's trailing space matters to a generator)."""
    source = Path(path)
    if source.suffix.lower() not in RECORD_SUFFIXES:
        lines = read_text(source).splitlines()
    else:
        lines = []
        for row in rows(source, (field,)):
            value = row.fields[field]
            if not isinstance(value, str):
                raise DataError(f'{source}:{row.line}: expected "{field}" to be a string, got {value!r}')
            lines.append(value)
    return [line.strip() if strip else line for line in lines if line.strip()]


def _problem(name: str, line: int, what: str, strict: bool) -> Row:
    if strict:
        raise DataError(f"{name}:{line}: {what}")
    return Row(line, {}, what)
