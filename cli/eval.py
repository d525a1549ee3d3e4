"""``magnet eval <task>``: the measurements of :mod:`magnetsdk.eval`, one command per task.

Each command loads the model, calls one library function, writes the JSON result (``--output``,
default ``runs/eval/TASK-TIME.json``) and prints it with the option every command has,
``--format table|json|jsonl`` (``table`` by default; :mod:`magnetsdk.cli.output`).

This file is longer than the ~400 lines other modules keep to because it holds one click command
per task, mostly option declarations; the measurements themselves live in :mod:`magnetsdk.eval`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from magnetsdk.cli.errors import fail
from magnetsdk.cli.options import (
    candidate_ranking_option,
    candidates_option,
    copy_guard_option,
    cut_unclosed_option,
    line_breaks_option,
    model_options,
    no_repeat_ngram_option,
    open_magnet,
    pool_stops_option,
    resample_copies_option,
    resample_ranking_option,
    whole_sentences_option,
)
from magnetsdk.cli.output import emit, format_option

from magnetsdk.copies import DEFAULT_INFILL_TOKENS
from magnetsdk.layout import INFILL_LAYOUTS

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def _common(command: Callable) -> Callable:
    command = click.option(
        "--output",
        "-o",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Where to write the JSON result [default: runs/eval/TASK-TIME.json].",
    )(command)
    command = click.option(
        "--limit", type=click.IntRange(min=1), default=None, help="Use only the first N items (quick checks)."
    )(command)
    return format_option("table")(model_options(command))


def _run(task: str, output: Path | None, fmt: str, evaluate: Callable[[], Any]) -> None:
    """Call the library, turning its errors into click errors; save and print the result."""
    try:
        result = evaluate()
    except (ValueError, FileNotFoundError) as error:
        raise fail(error) from None
    if output is None:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        output = Path("runs") / "eval" / f"{task}-{stamp}.json"
    result.save(output)
    emit(result.to_dict(), fmt, lambda: click.echo(result.table()))
    click.echo(f"wrote {output}", err=True)


@click.group(name="eval")
def eval_group() -> None:
    """Measure a model: sts, repetition, infill, probe, dependence, lm; compare several."""


@eval_group.command()
@click.argument("files", nargs=-1, required=True, type=_FILE)
@click.option(
    "--data-format",
    type=click.Choice(["stsb", "sick", "tsv"]),
    default=None,
    help="The files' format [default: detected per file].",
)
@click.option("--instruction", default=None, help="Instruction prefix [default: the model's].")
@click.option("--pooling", type=click.Choice(["last", "mean"]), default=None, help="[default: the model's]")
@click.option(
    "--attention", type=click.Choice(["causal", "bidirectional"]), default=None, help="[default: the model's]"
)
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--max-length", default=None, type=click.IntRange(min=8), help="[default: the model's]")
@click.option(
    "--echo/--no-echo", default=None, help="Echo embeddings: each text twice [default: the model's]."
)
@click.option(
    "--principal-shift",
    type=click.Choice(["shift", "remove"]),
    default=None,
    help="Fit the first principal component on --shift-texts and shift by it (e + w*v1) or remove "
    "it [default: the model's stored shift, if any].",
)
@click.option("--shift-weight", default=1.0, show_default=True, type=float, help="w of e + w*v1.")
@click.option(
    "--shift-texts",
    type=_FILE,
    default=None,
    help="Texts to fit the component on: one per line (.jsonl: 'text'). Not the evaluated pairs.",
)
@_common
def sts(
    files,
    data_format,
    instruction,
    pooling,
    attention,
    batch_size,
    max_length,
    echo,
    principal_shift,
    shift_weight,
    shift_texts,
    limit,
    output,
    fmt,
    model,
    adapter,
    device,
    dtype,
):
    """Spearman x100 of embedding cosine vs gold scores (STS-B csv, SICK, s1<TAB>s2<TAB>score).

    --model may also be a saved sentence-transformers model directory (one with modules.json).
    """
    from magnetsdk.eval.encoder import MagnetEncoder, is_sentence_transformers_dir, load_sentence_transformer
    from magnetsdk.eval.sts import evaluate_sts

    if is_sentence_transformers_dir(model):
        if adapter or instruction is not None or pooling or attention or max_length or echo is not None:
            raise click.UsageError(
                "a sentence-transformers model is encoded as it is: drop --adapter, --instruction, "
                "--pooling, --attention and --max-length"
            )
        encoder = load_sentence_transformer(model, device)
    else:
        magnet = open_magnet(model, adapter, device, dtype)
        encoder = MagnetEncoder(magnet, instruction, pooling, attention, max_length, echo)
        if (principal_shift is None) != (shift_texts is None):
            raise click.UsageError("--principal-shift and --shift-texts go together: give both or neither")
        if principal_shift is not None:
            _fit_shift(encoder, shift_texts, principal_shift, shift_weight, batch_size)
    _run("sts", output, fmt, lambda: evaluate_sts(encoder, list(files), data_format, limit, batch_size))


@eval_group.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--split", default="test", show_default=True, help="Which qrels/SPLIT.tsv to score.")
@click.option("--query-instruction", default=None, help="Instruction for queries [default: the model's].")
@click.option(
    "--document-instruction", default=None, help="Instruction for documents [default: the model's]."
)
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1))
@_common
def retrieval(
    directory,
    split,
    query_instruction,
    document_instruction,
    batch_size,
    limit,
    output,
    fmt,
    model,
    adapter,
    device,
    dtype,
):
    """nDCG@10, recall@10/100 and MRR@10 on a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv).

    --model may also be a saved sentence-transformers model directory (one with modules.json); it
    encodes queries and documents with its own prompts.
    """
    from magnetsdk.eval.encoder import MagnetEncoder, is_sentence_transformers_dir, load_sentence_transformer
    from magnetsdk.eval.retrieval import evaluate_retrieval, read_beir

    try:  # the folder is checked before a model is loaded
        data = read_beir(directory, split, limit)
    except (ValueError, FileNotFoundError) as error:
        raise click.ClickException(str(error)) from None
    if is_sentence_transformers_dir(model):
        if adapter or query_instruction is not None or document_instruction is not None:
            raise click.UsageError(
                "a sentence-transformers model is encoded with its own prompts: drop --adapter, "
                "--query-instruction and --document-instruction"
            )
        encoder = load_sentence_transformer(model, device)
    else:
        encoder = MagnetEncoder(open_magnet(model, adapter, device, dtype))
    _run(
        "retrieval",
        output,
        fmt,
        lambda: evaluate_retrieval(encoder, data, query_instruction, document_instruction, batch_size),
    )


def _fit_shift(encoder, texts_file: Path, mode: str, weight: float, batch_size: int) -> None:
    """Fit the principal component with the evaluation's own encode options."""
    from magnetsdk.records import read_texts

    try:
        texts = read_texts(texts_file, "text")
        encoder.magnet.fit_principal_component(
            texts,
            mode,
            weight,
            instruction=encoder.instruction,
            pooling=encoder.pooling,
            attention=encoder.attention,
            max_length=encoder.max_length,
            echo=encoder.echo,
            batch_size=batch_size,
        )
    except ValueError as error:
        raise click.ClickException(f"cannot fit the principal component on {texts_file}: {error}") from None


@eval_group.command()
@click.argument("file", type=_FILE)
@click.option("--prefix-tokens", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--new-tokens", default=128, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--decoding",
    type=click.Choice(["greedy", "nucleus"]),
    multiple=True,
    help="Repeatable [default: greedy and nucleus].",
)
@click.option("--top-p", default=0.9, show_default=True, type=click.FloatRange(0, 1, min_open=True))
@click.option("--temperature", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--full-length",
    is_flag=True,
    help="Hold back EOS so every continuation has --new-tokens tokens (equal lengths across models).",
)
@click.option(
    "--judge",
    help="A model (name or directory, e.g. default-base) that reads every continuation again: its "
    "perplexity of them and the share of tokens it gives p < 1e-6 (implausible).",
)
@_common
def repetition(
    file,
    prefix_tokens,
    new_tokens,
    decoding,
    top_p,
    temperature,
    seed,
    batch_size,
    full_length,
    judge,
    limit,
    output,
    fmt,
    model,
    adapter,
    device,
    dtype,
):
    """rep-4 and rep-sen of continuations of the prefixes in FILE (lines, or jsonl "prefix")."""
    from magnetsdk.eval.repetition import evaluate_repetition

    magnet = open_magnet(model, adapter, device, dtype)
    judge_model = open_magnet(judge, None, device, dtype) if judge else None
    _run(
        "repetition",
        output,
        fmt,
        lambda: evaluate_repetition(
            magnet,
            file,
            prefix_tokens=prefix_tokens,
            new_tokens=new_tokens,
            limit=limit,
            top_p=top_p,
            temperature=temperature,
            seed=seed,
            batch_size=batch_size,
            decodings=decoding or ("greedy", "nucleus"),
            full_length=full_length,
            judge=judge_model,
        ),
    )


@eval_group.command()
@click.argument("file", type=_FILE)
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--generate", default=0, show_default=True, type=click.IntRange(min=0), help="Also fill the first N gaps."
)
@click.option(
    "--max-new-tokens", default=DEFAULT_INFILL_TOKENS, show_default=True, type=click.IntRange(min=1)
)
@click.option(
    "--layout",
    "layouts",
    multiple=True,
    type=click.Choice([*INFILL_LAYOUTS, "all"]),
    help="Infill layout(s) to score, repeatable; 'all' scores every layout [default: the model's own].",
)
@candidates_option(
    "Fill the --generate gaps as Magnet.infill(candidates=..., seed=0) does (auto: 8 ranked for a gap "
    "inside a sentence or at the text's start, one greedy fill between sentences)."
)
@candidate_ranking_option
@line_breaks_option
@no_repeat_ngram_option
@copy_guard_option
@resample_copies_option
@resample_ranking_option
@pool_stops_option
@cut_unclosed_option
@whole_sentences_option
@_common
def infill(
    file,
    batch_size,
    generate,
    max_new_tokens,
    layouts,
    candidates,
    candidate_ranking,
    line_breaks,
    no_repeat_ngram,
    copy_guard,
    resample_copies,
    resample_ranking,
    pool_stops,
    cut_unclosed,
    whole_sentences,
    limit,
    output,
    fmt,
    model,
    adapter,
    device,
    dtype,
):
    """Span perplexity with both sides (per layout), a shuffled-right control and the left side
    only; FILE is jsonl {"left", "span", "right"}."""
    from magnetsdk.eval.infill import evaluate_infill

    names = list(INFILL_LAYOUTS) if "all" in layouts else list(dict.fromkeys(layouts)) or None
    magnet = open_magnet(model, adapter, device, dtype)
    _run(
        "infill",
        output,
        fmt,
        lambda: evaluate_infill(
            magnet,
            file,
            limit,
            batch_size,
            generate,
            max_new_tokens,
            layouts=names,
            candidates=candidates,
            candidate_ranking=candidate_ranking,
            line_breaks=line_breaks,
            no_repeat_ngram=no_repeat_ngram,
            copy_guard=copy_guard,
            resample_copies=resample_copies,
            resample_ranking=resample_ranking,
            pool_stops=pool_stops,
            cut_unclosed=cut_unclosed,
            whole_sentences=whole_sentences,
        ),
    )


@eval_group.command()
@click.argument("train_file", type=_FILE)
@click.argument("test_file", type=_FILE)
@click.option("--column", default=-1, show_default=True, type=int, help="The tag column (-1: the last).")
@click.option(
    "--attention", type=click.Choice(["bidirectional", "causal"]), default="bidirectional", show_default=True
)
@click.option("--l2", default=1e-3, show_default=True, type=click.FloatRange(min=0))
@click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1))
@_common
def probe(
    train_file,
    test_file,
    column,
    attention,
    l2,
    batch_size,
    limit,
    output,
    fmt,
    model,
    adapter,
    device,
    dtype,
):
    """Linear probe on frozen token features (CoNLL files): accuracy, and entity F1 for IOB tags."""
    from magnetsdk.eval.probe import evaluate_probe

    magnet = open_magnet(model, adapter, device, dtype)
    _run(
        "probe",
        output,
        fmt,
        lambda: evaluate_probe(magnet, train_file, test_file, column, attention, limit, batch_size, l2),
    )


@eval_group.command()
@click.argument("file", type=_FILE)
@click.option(
    "--attention",
    type=click.Choice(["bidirectional", "causal"]),
    multiple=True,
    help="Repeatable [default: bidirectional and the model's own encode mode].",
)
@click.option("--min-tokens", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--max-tokens", default=256, show_default=True, type=click.IntRange(min=2))
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1))
@click.option("--heatmap", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write a PNG.")
@_common
def dependence(
    file,
    attention,
    min_tokens,
    max_tokens,
    batch_size,
    heatmap,
    limit,
    output,
    fmt,
    model,
    adapter,
    device,
    dtype,
):
    """Attention dependence DP_before / DP_main / DP_after over the texts of FILE (UBMoE-LLM)."""
    from magnetsdk.eval.dependence import evaluate_dependence

    magnet = open_magnet(model, adapter, device, dtype)
    _run(
        "dependence",
        output,
        fmt,
        lambda: evaluate_dependence(
            magnet, file, list(attention) or None, limit, min_tokens, max_tokens, batch_size, heatmap
        ),
    )


@eval_group.command()
@click.argument("file", type=_FILE)
@click.option("--context", default=512, show_default=True, type=click.IntRange(min=2), help="Window tokens.")
@click.option("--max-tokens", default=None, type=click.IntRange(min=2), help="Score only the first N tokens.")
@click.option("--batch-size", default=4, show_default=True, type=click.IntRange(min=1))
@_common
def lm(file, context, max_tokens, batch_size, limit, output, fmt, model, adapter, device, dtype):
    """Causal perplexity of the plain text in FILE, in non-overlapping windows."""
    from magnetsdk.eval.lm import evaluate_lm

    magnet = open_magnet(model, adapter, device, dtype)
    _run("lm", output, fmt, lambda: evaluate_lm(magnet, file, context, max_tokens, limit, batch_size))


@eval_group.command()
@click.argument("results", nargs=-1, type=_FILE)
@click.option("--model", "-m", default=None, help="Base model for the runs [default: the embedded model].")
@click.option(
    "--adapter",
    "adapters",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Repeatable: adapters to run.",
)
@click.option("--base/--no-base", default=True, show_default=True, help="Also run the model without adapter.")
@click.option("--sts", "sts_files", multiple=True, type=_FILE, help="Repeatable: STS files.")
@click.option("--repetition", "repetition_file", type=_FILE, default=None, help="Prefix file.")
@click.option("--infill", "infill_file", type=_FILE, default=None, help="Infill jsonl.")
@click.option("--dependence", "dependence_file", type=_FILE, default=None, help="Text file.")
@click.option("--lm", "lm_file", type=_FILE, default=None, help="Text file.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, help="Use only the first N items per task."
)
@click.option("--device", default="auto", show_default=True)
@click.option("--dtype", default="auto", show_default=True)
@click.option(
    "--output", "-o", type=click.Path(file_okay=False, path_type=Path), required=True, help="A folder."
)
@click.option("--no-plots", is_flag=True, help="Write only the Markdown table.")
def compare(
    results,
    model,
    adapters,
    base,
    sts_files,
    repetition_file,
    infill_file,
    dependence_file,
    lm_file,
    limit,
    device,
    dtype,
    output,
    no_plots,
):
    """Models side by side: a Markdown table and PNG plots per task.

    Pass earlier result files (RESULTS), and/or data files to run the tasks on the base model and
    each --adapter now (each run's JSON is written into the output folder too).
    """
    from magnetsdk.eval.compare import Suite, comparison_markdown, run_suite, write_comparison
    from magnetsdk.eval.result import EvalResult

    try:
        loaded = [EvalResult.load(p) for p in results]
        suite = Suite(list(sts_files), repetition_file, infill_file, dependence_file, lm_file, limit)
        runs = ([None] if base else []) + list(adapters)
        if suite.sts or suite.repetition or suite.infill or suite.dependence or suite.lm:
            for index, adapter in enumerate(runs):
                magnet = open_magnet(model, adapter, device, dtype)
                for result in run_suite(magnet, suite):
                    result.save(output / f"run{index}-{result.task}.json")
                    loaded.append(result)
        elif not loaded:
            raise click.UsageError(
                "give result files to compare, or data files (--sts, --infill, ...) to run"
            )
        written = write_comparison(loaded, output, plots=not no_plots)
    except (ValueError, FileNotFoundError) as error:
        raise fail(error) from None
    click.echo(comparison_markdown(loaded))
    for path in written:
        click.echo(f"wrote {path}", err=True)
