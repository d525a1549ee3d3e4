"""Reading files into documents: ``.txt``/``.md`` (one document per file), ``.jsonl`` (one per line)
and ``.csv`` (one per row), from files and folders (recursively).

Files that are binary or not UTF-8, and records without text, are skipped and reported by name
(the rest are still read). Document ids are stable across runs so re-indexing can skip unchanged
documents: a file's path (relative to the working directory when under it), plus ``:LINE`` or
``:ROW`` for records that carry no ``id``.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from magnetsdk.index.documents import Document

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst"}
RECORD_SUFFIXES = {".jsonl", ".csv"}
SUPPORTED = TEXT_SUFFIXES | RECORD_SUFFIXES


@dataclass
class SourceReport:
    documents: list[Document] = field(default_factory=list)
    files: int = 0  # files read
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file or record, why)


def read_sources(paths: list[str | Path], text_field: str = "text", id_field: str = "id") -> SourceReport:
    """Documents from files and folders; folders contribute their files with a supported suffix."""
    report = SourceReport()
    for path in _expand(paths):
        name = _stable_name(path)
        try:
            raw = path.read_bytes()
        except OSError as error:
            report.skipped.append((name, f"cannot be read ({error.strerror or error})"))
            continue
        if b"\x00" in raw[:8192]:
            report.skipped.append((name, "binary file"))
            continue
        try:
            content = raw.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            report.skipped.append((name, f"not UTF-8 (byte {error.start}); convert it to UTF-8 to index it"))
            continue
        report.files += 1
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            _read_jsonl(content, name, text_field, id_field, report)
        elif suffix == ".csv":
            _read_csv(content, name, text_field, id_field, report)
        elif content.strip():
            report.documents.append(Document(name, content, {"path": name}))
        else:
            report.skipped.append((name, "empty file"))
    return report


def _expand(paths: list[str | Path]) -> list[Path]:
    files: list[Path] = []
    for given in paths:
        path = Path(given).expanduser()
        if path.is_dir():
            files += sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and p.suffix.lower() in SUPPORTED
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        elif path.is_file():
            files.append(path)  # a file named explicitly is read whatever its suffix (as text)
        else:
            raise FileNotFoundError(f"{path} does not exist")
    seen: set[Path] = set()
    unique = []
    for f in files:
        if f.resolve() not in seen:
            seen.add(f.resolve())
            unique.append(f)
    return unique


def _stable_name(path: Path) -> str:
    resolved = path.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def _record(
    record: dict,
    where: str,
    default_id: str,
    source: str,
    text_field: str,
    id_field: str,
    report: SourceReport,
) -> None:
    text = record.get(text_field)
    if not isinstance(text, str) or not text.strip():
        report.skipped.append((where, f"no {text_field!r} text"))
        return
    metadata = dict(record.get("metadata") or {}) if isinstance(record.get("metadata"), dict) else {}
    for key, value in record.items():
        if key not in (text_field, id_field, "metadata"):
            metadata.setdefault(key, value)
    metadata["path"] = source
    doc_id = record.get(id_field)
    report.documents.append(Document(str(doc_id) if doc_id not in (None, "") else default_id, text, metadata))


def _read_jsonl(content: str, name: str, text_field: str, id_field: str, report: SourceReport) -> None:
    for number, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            report.skipped.append((where, f"not valid JSON ({error.msg})"))
            continue
        if not isinstance(record, dict):
            report.skipped.append((where, "not a JSON object"))
            continue
        _record(record, where, where, name, text_field, id_field, report)


def _read_csv(content: str, name: str, text_field: str, id_field: str, report: SourceReport) -> None:
    reader = csv.DictReader(io.StringIO(content))
    if reader.fieldnames is None or text_field not in reader.fieldnames:
        report.skipped.append((name, f"no {text_field!r} column (columns: {reader.fieldnames or []})"))
        return
    for number, row in enumerate(reader, 1):
        where = f"{name}:{number}"
        _record(
            {k: v for k, v in row.items() if k is not None}, where, where, name, text_field, id_field, report
        )
