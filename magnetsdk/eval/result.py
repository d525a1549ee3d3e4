"""The result of one evaluation run, and its one JSON writer and reader.

A result holds the figures (the numbers a reader compares), the settings that produced them, the
identity of the model, the sha256 of every data file, when it ran and how long it took, and the
table that was printed. Task-specific material for reading (generated continuations, infills)
goes under ``details``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from magnetsdk.config import atomic_write_text
from magnetsdk.loading import file_sha256

RESULT_FORMAT_VERSION = 1


def data_file(path: str | os.PathLike) -> dict[str, str]:
    """``{"path", "sha256"}`` of a data file, so a result says exactly what it measured."""
    resolved = Path(path)
    if not resolved.is_file():
        raise FileNotFoundError(f"data file {resolved} not found; pass an existing file")
    return {"path": str(resolved), "sha256": file_sha256(resolved)}


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def render_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain aligned text table (floats with two decimals)."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.2f}"
        return str(value)

    cells = [[str(h) for h in headers]] + [[cell(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for index, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass
class EvalResult:
    task: str
    figures: dict[str, Any]  # the headline numbers, flat: name -> value
    headers: list[str]  # the printed table
    rows: list[list[Any]]
    settings: dict[str, Any]
    model: dict[str, Any]  # Magnet.identity.to_dict() or the identity of another encoder
    data: list[dict[str, str]]  # data_file() of every input file
    started: str = field(default_factory=utc_now)
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    format_version: int = RESULT_FORMAT_VERSION

    def table(self) -> str:
        return render_table(self.headers, self.rows)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["table"] = self.table()
        return data

    def save(self, path: str | os.PathLike) -> Path:
        """Write the result as JSON, atomically."""
        target = Path(path)
        atomic_write_text(target, json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n")
        return target

    @classmethod
    def load(cls, path: str | os.PathLike) -> EvalResult:
        source = Path(path)
        try:
            data = json.loads(source.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"result file {source} not found") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{source} is not a JSON result file ({error})") from None
        if not isinstance(data, dict) or "task" not in data or "figures" not in data:
            raise ValueError(f"{source} is not a magnet eval result (no 'task' and 'figures' keys)")
        version = data.get("format_version", RESULT_FORMAT_VERSION)
        if version > RESULT_FORMAT_VERSION:
            raise ValueError(
                f"{source} has format_version {version}, newer than this magnetsdk reads "
                f"({RESULT_FORMAT_VERSION}); upgrade magnetsdk"
            )
        data.pop("table", None)
        data["format_version"] = RESULT_FORMAT_VERSION
        return cls(**data)
