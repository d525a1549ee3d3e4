"""``magnet encode | infill | generate | info | explain | shift | demo``: the runtime surfaces of one model."""

from __future__ import annotations

from pathlib import Path

import click
from magnetsdk.cli.errors import fail
from magnetsdk.cli.inputs import gather_texts
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
from magnetsdk.cli.output import emit, format_option, print_fields, print_table

from magnetsdk.copies import DEFAULT_INFILL_TOKENS

_INPUT = click.option(
    "--input",
    "-i",
    "input_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read one text per line from FILE (.jsonl: the 'text' field); '-' for stdin.",
)
_FORMAT = format_option("jsonl")


@click.command()
@click.argument("texts", nargs=-1)
@_INPUT
@model_options
@click.option("--instruction", default=None, help="Instruction prefix [default: the model's].")
@click.option("--pooling", type=click.Choice(["last", "mean"]), default=None, help="[default: the model's]")
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--max-length", default=None, type=click.IntRange(min=8), help="[default: the model's, 512]")
@click.option("--no-normalize", is_flag=True, help="Do not L2-normalise the embeddings.")
@click.option(
    "--echo/--no-echo", default=None, help="Echo embeddings: give each text twice [default: the model's]."
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the embeddings to a .npy file instead of printing them.",
)
@_FORMAT
def encode(
    texts,
    input_file,
    model,
    adapter,
    device,
    dtype,
    instruction,
    pooling,
    batch_size,
    max_length,
    no_normalize,
    echo,
    output,
    fmt,
):
    """Embed texts. Prints one JSON line per text, or a table of pairwise cosine similarities."""
    import numpy as np

    items = gather_texts(texts, input_file)
    magnet = open_magnet(model, adapter, device, dtype)
    try:
        vectors = magnet.encode(
            items,
            instruction=instruction,
            batch_size=batch_size,
            normalize=not no_normalize,
            max_length=max_length,
            pooling=pooling,
            echo=echo,
        )
    except (TypeError, ValueError) as error:
        raise fail(error) from None
    if output is not None:
        tmp = output.with_name(output.name + ".tmp.npy")
        np.save(tmp, vectors)
        tmp.replace(output)
        click.echo(f"wrote {vectors.shape[0]} x {vectors.shape[1]} embeddings to {output}", err=True)
        return

    def table() -> None:
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        sims = unit @ unit.T
        labels = [f"[{i}] {t[:40]}" for i, t in enumerate(items)]
        print_table(
            ["text", *[f"[{i}]" for i in range(len(items))]],
            [[label, *[f"{s:.3f}" for s in row]] for label, row in zip(labels, sims, strict=True)],
        )

    records = [
        {"text": t, "embedding": [round(float(x), 6) for x in v]} for t, v in zip(items, vectors, strict=True)
    ]
    emit(records, fmt, table)


@click.command()
@click.argument("texts", nargs=-1)
@_INPUT
@model_options
@click.option("--left", default=None, help="Text before the gap (instead of a marked text).")
@click.option("--right", default=None, help="Text after the gap.")
@click.option("--marker", default="[GAP]", show_default=True, help="The gap marker inside texts.")
@click.option(
    "--max-new-tokens", default=DEFAULT_INFILL_TOKENS, show_default=True, type=click.IntRange(min=1)
)
@click.option(
    "--temperature", default=0.0, show_default=True, type=click.FloatRange(min=0), help="0 is greedy."
)
@click.option("--top-p", default=1.0, show_default=True, type=click.FloatRange(0, 1, min_open=True))
@click.option("--seed", default=None, type=int)
@candidates_option(
    "Rank this many fills (the decoded one and the rest sampled) by the filled text's likelihood; "
    "auto: 8 for a gap inside a sentence or at the text's start, one greedy fill for gaps between sentences."
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
@_FORMAT
def infill(
    texts,
    input_file,
    model,
    adapter,
    device,
    dtype,
    left,
    right,
    marker,
    max_new_tokens,
    temperature,
    top_p,
    seed,
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
    fmt,
):
    """Fill the gaps marked in each text (default marker: [GAP]) using both sides."""
    if left is not None or right is not None:
        if texts or input_file:
            raise click.UsageError("give either marked texts or --left/--right, not both")
        items = [f"{left or ''}{marker}{right or ''}"]
    else:
        items = gather_texts(texts, input_file)
    from magnetsdk.infilling import given_guards  # imports torch: not at `magnet --help`

    magnet = open_magnet(model, adapter, device, dtype)
    try:
        results = magnet.infill(
            items,
            gap_marker=marker,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            candidates=candidates,
            candidate_ranking=candidate_ranking,
            line_breaks=line_breaks,
            **given_guards(
                no_repeat_ngram=no_repeat_ngram,
                copy_guard=copy_guard,
                resample_copies=resample_copies,
                resample_ranking=resample_ranking,
                pool_stops=pool_stops,
                cut_unclosed=cut_unclosed,
                whole_sentences=whole_sentences,
            ),
        )
    except (TypeError, ValueError) as error:
        raise fail(
            error,
            {
                "gap_marker": "--marker",
                "no_repeat_ngram": "--no-repeat-ngram",
                "copy_guard": "--copy-guard",
                "resample_copies": "--resample-copies",
                "resample_ranking": "--resample-ranking",
            },
        ) from None
    records = [{"input": t, "text": r.text, "spans": r.spans} for t, r in zip(items, results, strict=True)]
    emit(
        records,
        fmt,
        lambda: print_table(
            ["input", "spans", "filled"],
            [[t, " | ".join(r.spans), r.text] for t, r in zip(items, results, strict=True)],
        ),
    )


@click.command()
@click.argument("prompts", nargs=-1)
@_INPUT
@model_options
@click.option("--max-new-tokens", default=64, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--temperature", default=0.7, show_default=True, type=click.FloatRange(min=0), help="0 is greedy."
)
@click.option("--top-p", default=0.9, show_default=True, type=click.FloatRange(0, 1, min_open=True))
@click.option(
    "--repetition-penalty", default=1.1, show_default=True, type=click.FloatRange(min=0, min_open=True)
)
@click.option("--seed", default=None, type=int)
@click.option("--chat", is_flag=True, help="Wrap each prompt in the model's chat template.")
@_FORMAT
def generate(
    prompts,
    input_file,
    model,
    adapter,
    device,
    dtype,
    max_new_tokens,
    temperature,
    top_p,
    repetition_penalty,
    seed,
    chat,
    fmt,
):
    """Continue each prompt (causal generation)."""
    items = gather_texts(prompts, input_file, what="prompt")
    magnet = open_magnet(model, adapter, device, dtype)
    try:
        outputs = magnet.generate(
            items,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            repetition_penalty=repetition_penalty,
            seed=seed,
            chat=chat,
        )
    except (TypeError, ValueError) as error:
        raise fail(error) from None
    records = [{"prompt": p, "text": o} for p, o in zip(items, outputs, strict=True)]
    emit(
        records,
        fmt,
        lambda: print_table(
            ["prompt", "continuation"],
            [[p, o.replace("\n", " ")] for p, o in zip(items, outputs, strict=True)],
        ),
    )


@click.command()
@model_options
@_FORMAT
def info(model, adapter, device, dtype, fmt):
    """Show the model, device, embedding dimension and which modes it supports."""
    magnet = open_magnet(model, adapter, device, dtype)
    facts = magnet.info()
    emit(facts, fmt, lambda: print_fields(facts))


@click.command()
@click.argument("texts", nargs=-1)
@_INPUT
@model_options
@click.option(
    "-k", "top_k", default=10, show_default=True, type=click.IntRange(min=1), help="Tokens per text."
)
@_FORMAT
def explain(texts, input_file, model, adapter, device, dtype, top_k, fmt):
    """Show the tokens the LM head reads from each text's embedding (semantic alignment)."""
    items = gather_texts(texts, input_file)
    magnet = open_magnet(model, adapter, device, dtype)
    try:
        results = magnet.key_tokens(items, k=top_k)
    except (TypeError, ValueError) as error:
        raise fail(error) from None
    records = [
        {"text": t, "tokens": [{"token": tok, "p": round(p, 5)} for tok, p in r]}
        for t, r in zip(items, results, strict=True)
    ]
    emit(
        records,
        fmt,
        lambda: print_table(
            ["text", "key tokens"],
            [
                [t[:50], ", ".join(f"{tok.strip() or repr(tok)} {p:.2f}" for tok, p in r)]
                for t, r in zip(items, results, strict=True)
            ],
        ),
    )


@click.command()
@click.argument("texts", nargs=-1)
@_INPUT
@model_options
@click.option("--mode", type=click.Choice(["shift", "remove"]), default="shift", show_default=True)
@click.option("--weight", default=1.0, show_default=True, type=float, help="w of e + w*v1 (mode shift).")
@click.option(
    "--output",
    "-o",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A new (or empty) directory for the model with its stored shift (merged weights).",
)
def shift(texts, input_file, model, adapter, device, dtype, mode, weight, output):
    """Fit the first principal component of the embeddings of TEXTS and save the model with it.

    Every later encode of the saved model applies e + w*v1 (or removes v1), also through
    sentence-transformers. Fit on a sample of the texts you will embed, not on evaluation data.
    """
    items = gather_texts(texts, input_file)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        # Saving replaces a model directory whole: never over a folder that may hold a training run,
        # checkpoints or anything else this command did not write.
        raise click.ClickException(
            f"{output} already exists and is not empty; shift writes a new model directory and never "
            "replaces files it did not write: give a new or empty -o/--output directory"
        )
    magnet = open_magnet(model, adapter, device, dtype)
    try:
        fitted = magnet.fit_principal_component(items, mode, weight)
        magnet.save(output)
    except (ValueError, FileExistsError) as error:
        raise fail(error) from None
    click.echo(f"fitted {fitted.describe()} on {len(items)} texts; saved {output}", err=True)


@click.command()
@model_options
def demo(model, adapter, device, dtype):
    """Encode and compare sentences, infill a gap and generate a continuation."""
    from magnetsdk.demo import run_demo

    run_demo(open_magnet(model, adapter, device, dtype), echo=click.echo)


COMMANDS = [encode, infill, generate, info, explain, shift, demo]
