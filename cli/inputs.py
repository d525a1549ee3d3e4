"""Reading texts for commands: from arguments, a file, or standard input.

A file holds one text per line; ``.jsonl``: the ``text`` field of each object; ``.csv``: the
``text`` column (the header row names the columns and is never a text). No texts at all is an
error, raised before any model is loaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from magnetsdk.records import DataError, decode_text, read_texts


def read_lines(path: Path) -> list[str]:
    """One text per line (``.jsonl``: the ``text`` field of each object, ``.csv``: the ``text``
    column); blank lines skipped, a line's own spaces kept (:func:`magnetsdk.records.read_texts`)."""
    try:
        return read_texts(path, "text", strip=False)
    except (DataError, FileNotFoundError) as error:
        raise click.ClickException(str(error)) from None


def gather_texts(arguments: tuple[str, ...], input_file: Path | None, what: str = "text") -> list[str]:
    """Texts from arguments, else ``--input`` (``-`` is stdin), else piped standard input."""
    if arguments:
        return list(arguments)
    if input_file is not None and str(input_file) != "-":
        texts = read_lines(input_file)
        source = str(input_file)
    elif input_file is not None or not sys.stdin.isatty():
        try:
            content = decode_text(sys.stdin.buffer.read(), "standard input")
        except DataError as error:
            raise click.ClickException(str(error)) from None
        texts = [line for line in content.splitlines() if line.strip()]
        source = "standard input"
    else:
        raise click.UsageError(f"give the {what} as arguments, with --input FILE, or on standard input")
    if not texts:
        raise click.ClickException(
            f"no input: {source} holds no {what} (only blank lines or nothing); give one {what} per line"
        )
    return texts
