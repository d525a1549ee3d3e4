"""Reading texts for commands: from arguments, a file, or standard input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


def read_lines(path: Path) -> list[str]:
    """One text per line (``.jsonl``: the ``text`` field of each object); blank lines skipped."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise click.ClickException(f"cannot read {path}: {error.strerror or error}") from None
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise click.ClickException(
            f"{path} is not UTF-8 text (byte {error.start}: {raw[error.start : error.start + 1]!r}); "
            "convert it to UTF-8 first"
        ) from None
    lines = [line for line in content.splitlines() if line.strip()]
    if path.suffix == ".jsonl":
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


def gather_texts(arguments: tuple[str, ...], input_file: Path | None, what: str = "text") -> list[str]:
    """Texts from arguments, else ``--input`` (``-`` is stdin), else piped standard input."""
    if arguments:
        return list(arguments)
    if input_file is not None and str(input_file) != "-":
        return read_lines(input_file)
    if input_file is not None or not sys.stdin.isatty():
        data = sys.stdin.buffer.read()
        try:
            return [line for line in data.decode("utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError:
            raise click.ClickException("standard input is not UTF-8 text") from None
    raise click.UsageError(f"give the {what} as arguments, with --input FILE, or on standard input")
