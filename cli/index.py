"""``magnet index`` and ``magnet search``: build, summarise and query a retrieval index.

Thin shells over :mod:`magnetsdk.index`: parse options, call one library function, turn its
exceptions into click errors and print a table or JSON lines. Under ``accelerate launch`` the
indexing is sharded across processes (see :mod:`magnetsdk.index.sharding`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from magnetsdk.cli.errors import fail, index_errors
from magnetsdk.cli.options import check_device, model_options, open_magnet
from magnetsdk.cli.output import clip, emit, format_option, print_fields, print_table

from magnetsdk.index.types import INDEX_TYPE_NAMES


@click.command("index")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), help="The index directory.")
@click.option(
    "--stats", "stats_dir", type=click.Path(file_okay=False, path_type=Path), help="Summarise DIR and exit."
)
@model_options
@click.option(
    "--type",
    "index_type",
    type=click.Choice(INDEX_TYPE_NAMES),
    default=None,
    help="FAISS index type of a new index [default: exact].",
)
@click.option(
    "--chunk-tokens", default=None, type=click.IntRange(min=8), help="Tokens per chunk [default: 256]."
)
@click.option(
    "--chunk-overlap",
    default=None,
    type=click.IntRange(min=0),
    help="Tokens shared by consecutive chunks [default: 32].",
)
@click.option(
    "--document-instruction", default=None, help="Instruction for documents [default: the model's]."
)
@click.option("--query-instruction", default=None, help="Instruction for queries [default: the model's].")
@click.option(
    "--text-field",
    default="text",
    show_default=True,
    help="The text field of .jsonl and column of .csv files.",
)
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--prune/--no-prune",
    default=True,
    show_default=True,
    help="Remove documents whose source under PATHS is gone (deleted files, removed records).",
)
@click.option(
    "--follow-links", is_flag=True, help="Read links that lead out of a folder given (skipped by default)."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@format_option("table")
def index_command(
    paths, out, stats_dir, model, adapter, device, dtype, index_type, chunk_tokens, chunk_overlap,
    document_instruction, query_instruction, text_field, batch_size, prune, follow_links, quiet, fmt,
):  # fmt: skip
    """Index txt, md, jsonl and csv files and folders into DIR (--out); re-runs skip unchanged documents.

    Documents are named by their file's absolute path, so the same file is never added twice.
    Re-runs remove documents whose file under PATHS is gone (--no-prune keeps them). Run under
    `accelerate launch` to encode across processes or GPUs.
    """
    if stats_dir is not None:
        if paths or out:
            raise click.UsageError("--stats DIR takes no PATHS or --out")
        _print_stats(stats_dir, fmt)
        return
    if not paths or out is None:
        raise click.UsageError("give PATHS to index and --out DIR (or --stats DIR)")
    from magnetsdk.index.sharding import upsert_sharded, world_size
    from magnetsdk.index.sources import read_sources, stale_documents

    try:
        sources = read_sources(list(paths), text_field=text_field, follow_links=follow_links)
    except FileNotFoundError as error:
        raise fail(error) from None
    main_process = _rank() == 0
    if main_process:
        for where, why in sources.skipped:
            click.echo(f"warning: skipped {where}: {why}", err=True)
    if not sources.documents:
        raise click.ClickException(
            f"no documents to index in {', '.join(map(str, paths))} ({sources.files} files read, "
            f"{len(sources.skipped)} skipped); give txt, md, jsonl or csv files with text"
        )
    check_device(device)
    _check_existing_index(out)
    magnet = open_magnet(model, adapter, _rank_device(device), dtype)
    given = {
        "index_type": index_type,
        "chunk_tokens": chunk_tokens,
        "chunk_overlap": chunk_overlap,
        "document_instruction": document_instruction,
        "query_instruction": query_instruction,
    }
    options: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    pruner = (lambda index: stale_documents(index.document_sources(), sources)) if prune else None
    try:
        report = upsert_sharded(
            out, magnet, sources.documents, options, batch_size, progress=not quiet, prune=pruner
        )
    except index_errors() as error:
        raise fail(error) from None
    if report is None:
        return
    summary = {
        "out": str(out),
        "processes": world_size(),
        "files": sources.files,
        "skipped": len(sources.skipped),
        **report.to_dict(),
    }
    share = report.encode_seconds / report.seconds if report.seconds else 0.0
    emit(
        summary,
        fmt,
        lambda: click.echo(
            f"{out}: {report.added} added, {report.updated} re-indexed, {report.unchanged} unchanged, "
            f"{report.metadata_only} metadata updated, {report.removed} removed (source gone); "
            f"{report.chunks} chunks encoded in {report.seconds:.1f}s "
            f"({share:.0%} encoding, {world_size()} process(es))"
        ),
    )


def _check_existing_index(out: Path) -> None:
    """A damaged existing index is refused before the model loads."""
    from magnetsdk.index.manifest import Manifest

    if not (out / "manifest.json").is_file():
        return
    try:
        Manifest.load(out)
    except index_errors() as error:
        raise fail(error) from None


def _rank() -> int:
    import os

    return int(os.environ.get("RANK", "0"))


def _rank_device(device: str) -> str:
    """Under a multi-process launch, ``auto`` means this process's own GPU (LOCAL_RANK)."""
    import os

    if device != "auto" or "LOCAL_RANK" not in os.environ:
        return device
    import torch

    return f"cuda:{os.environ['LOCAL_RANK']}" if torch.cuda.is_available() else "cpu"


def _print_stats(directory: Path, fmt: str) -> None:
    from magnetsdk.index import Index

    try:
        with Index.open(directory, None) as index:
            facts = index.stats()
    except index_errors() as error:
        raise fail(error) from None
    emit(facts, fmt, lambda: print_fields(facts))


def _parse_filters(filters: tuple[str, ...]) -> dict[str, list[Any]]:
    """``key=value`` pairs; a value that reads as a JSON number, bool or null also matches that value."""
    where: dict[str, list[Any]] = {}
    for item in filters:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--filter")
        options: list[Any] = [value]
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        if parsed != value and (parsed is None or isinstance(parsed, (bool, int, float))):
            options.append(parsed)
        where.setdefault(key, []).extend(options)
    return where


@click.command("search")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.argument("queries", nargs=-1, required=True)
@click.option("-k", "k", default=10, show_default=True, type=click.IntRange(min=1), help="Hits per query.")
@click.option("--filter", "filters", multiple=True, help="key=value on document metadata (repeat to narrow).")
@format_option("table")
@model_options
def search_command(directory, queries, k, filters, fmt, model, adapter, device, dtype):
    """Search the index in DIRECTORY for each QUERY (the model must be the one that built it)."""
    from magnetsdk.index import Index
    from magnetsdk.index.manifest import Manifest

    where = _parse_filters(filters)
    try:
        Manifest.load(directory)  # a missing or damaged index fails before the model loads
    except index_errors() as error:
        raise fail(error) from None
    magnet = open_magnet(model, adapter, device, dtype)
    try:
        with Index.open(directory, magnet) as index:
            results = index.search(list(queries), k=k, filter=where or None)
    except index_errors() as error:
        raise fail(error) from None
    records = [
        {"query": query, "rank": rank, **hit.to_dict()}
        for query, hits in zip(queries, results, strict=True)
        for rank, hit in enumerate(hits, 1)
    ]
    headers = (["query"] if len(queries) > 1 else []) + ["rank", "score", "document", "text"]
    rows = [
        ([r["query"]] if len(queries) > 1 else [])
        + [r["rank"], f"{r['score']:.3f}", r["document_id"], clip(r["text"], 90)]
        for r in records
    ]
    emit(records, fmt, lambda: print_table(headers, rows))


COMMANDS = [index_command, search_command]
