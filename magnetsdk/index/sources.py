"""Reading files into documents: ``.txt``/``.md`` (one document per file), ``.jsonl`` (one per line)
and ``.csv`` (one per row), from files and folders (recursively), and which stored documents a
re-run should prune because their source is gone.

Files that are binary or not UTF-8, and records without text, are skipped and reported by name
(the rest are still read). Document ids are stable, so re-indexing can skip unchanged documents
and the same file is never added twice: a file's absolute path (its folder resolved, its own name
kept, so a link inside the folder is named as the link), plus ``:LINE`` or ``:ROW`` for records
that carry no ``id``; the working directory and how the folder was spelled do not matter.
Links (to files or folders) that lead out of the folder given are skipped with a warning unless
``follow_links`` is set; with it, they are read and named by where they sit in the folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from magnetsdk.index.documents import Document
from magnetsdk.records import DataError, decode_text, jsonl_rows, table_rows

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst"}
RECORD_SUFFIXES = {".jsonl", ".csv"}
SUPPORTED = TEXT_SUFFIXES | RECORD_SUFFIXES


@dataclass
class SourceReport:
    documents: list[Document] = field(default_factory=list)
    files: int = 0  # files read
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file or record, why)
    roots: list[str] = field(default_factory=list)  # the paths given, as document paths are named
    kept: set[str] = field(default_factory=set)  # files that exist but were (partly) skipped: not pruned


def read_sources(
    paths: list[str | Path], text_field: str = "text", id_field: str = "id", follow_links: bool = False
) -> SourceReport:
    """Documents from files and folders; folders contribute their files with a supported suffix."""
    report = SourceReport()
    for name, path in _expand(paths, follow_links, report):
        try:
            raw = path.read_bytes()
        except OSError as error:
            _skip(report, name, name, f"cannot be read ({error.strerror or error})")
            continue
        if b"\x00" in raw[:8192]:
            _skip(report, name, name, "binary file")
            continue
        try:
            content = decode_text(raw, name)
        except DataError as error:
            _skip(report, name, name, f"{error}; it was not indexed")
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
            _skip(report, name, name, "empty file")
    return report


def stale_documents(sources: dict[str, str | None], report: SourceReport) -> list[str]:
    """Ids of stored documents (``id -> path``) that came from under a path of this run, whose file
    is gone or no longer yields them; files that still exist but were skipped keep theirs."""
    found = {d.id for d in report.documents}

    def under(path: str, tops: Iterable[str]) -> bool:
        return any(path == top or path.startswith(top.rstrip("/") + "/") for top in tops)

    return sorted(
        doc_id
        for doc_id, path in sources.items()
        if path is not None
        and doc_id not in found
        and under(path, report.roots)
        and not under(path, report.kept)
    )


def _skip(report: SourceReport, where: str, source: str, why: str) -> None:
    report.skipped.append((where, why))
    report.kept.add(source)


def _expand(paths: list[str | Path], follow_links: bool, report: SourceReport) -> list[tuple[str, Path]]:
    """``(document path, file)`` for every file to read, each real file once."""
    files: list[tuple[str, Path]] = []
    for given in paths:
        path = Path(given).expanduser()
        if path.is_dir():
            root = path.resolve()
            report.roots.append(root.as_posix())
            files += _walk(root, follow_links, report)
        elif path.is_file():
            # A file named explicitly is read whatever its suffix (as text).
            name = (path.absolute().parent.resolve() / path.name).as_posix()
            report.roots.append(name)
            files.append((name, path))
        else:
            raise FileNotFoundError(f"{path} does not exist")
    seen: set[Path] = set()
    unique = []
    for name, f in files:
        if f.resolve() not in seen:
            seen.add(f.resolve())
            unique.append((name, f))
    return unique


def _walk(root: Path, follow_links: bool, report: SourceReport) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    visited = {root}
    for folder, dirs, names in os.walk(root, followlinks=follow_links):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in list(dirs):
            link = here / d
            real = link.resolve()
            if link.is_symlink() and not follow_links:
                if not real.is_relative_to(root):
                    why = f"a link to {real}, outside {root}; --follow-links reads it"
                    _skip(report, link.as_posix(), link.as_posix(), why)
            elif real in visited:
                dirs.remove(d)  # a cycle, or a folder already walked through another link
            else:
                visited.add(real)
        for name in sorted(names):
            file = here / name
            if name.startswith(".") or file.suffix.lower() not in SUPPORTED or not file.is_file():
                continue
            if not follow_links and file.is_symlink() and not file.resolve().is_relative_to(root):
                why = f"a link to {file.resolve()}, outside {root}; --follow-links reads it"
                _skip(report, file.as_posix(), file.as_posix(), why)
                continue
            found.append((file.as_posix(), file))
    return found


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
        _skip(report, where, source, f"no {text_field!r} text")
        return
    metadata = dict(record.get("metadata") or {}) if isinstance(record.get("metadata"), dict) else {}
    for key, value in record.items():
        if key not in (text_field, id_field, "metadata"):
            metadata.setdefault(key, value)
    metadata["path"] = source
    doc_id = record.get(id_field)
    report.documents.append(Document(str(doc_id) if doc_id not in (None, "") else default_id, text, metadata))


def _read_jsonl(content: str, name: str, text_field: str, id_field: str, report: SourceReport) -> None:
    for row in jsonl_rows(content, name, strict=False):
        where = f"{name}:{row.line}"
        if row.problem is not None:
            _skip(report, where, name, row.problem)
        else:
            _record(row.fields, where, where, name, text_field, id_field, report)


def _read_csv(content: str, name: str, text_field: str, id_field: str, report: SourceReport) -> None:
    for number, row in enumerate(table_rows(content, name, (text_field,), strict=False), 1):
        if row.problem is not None and row.line == 1:  # the header: the whole file is skipped
            _skip(report, name, name, row.problem)
            return
        where = f"{name}:{number}"
        if row.problem is not None:
            _skip(report, where, name, row.problem)
        else:
            _record(row.fields, where, where, name, text_field, id_field, report)
