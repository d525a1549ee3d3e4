"""Options shared by commands that load a model, and the one place that loads it."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import click


def model_options(command: Callable) -> Callable:
    """Add ``--model``, ``--adapter``, ``--device`` and ``--dtype`` to a command."""

    @click.option(
        "--model",
        "-m",
        default=None,
        help="Model name, directory or .gguf path [default: the embedded model].",
    )
    @click.option(
        "--adapter", default=None, type=click.Path(file_okay=False), help="A LoRA adapter directory."
    )
    @click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:1, ... or auto.")
    @click.option(
        "--dtype",
        default="auto",
        show_default=True,
        help="auto (fp32 on CPU, bf16 on CUDA), float32, bfloat16.",
    )
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return command(*args, **kwargs)

    return wrapper


def open_magnet(model: str | None, adapter: str | None, device: str = "auto", dtype: str = "auto"):
    """Load a :class:`magnetsdk.Magnet`, turning library errors into click errors."""
    from magnetsdk import Magnet
    from magnetsdk.attention import AttentionBackendError

    try:
        return Magnet.from_pretrained(model, adapter=adapter, device=device, dtype=dtype)
    except (FileNotFoundError, ValueError, AttentionBackendError) as error:
        raise click.ClickException(str(error)) from None


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
