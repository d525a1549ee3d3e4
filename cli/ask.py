"""``magnet ask``: answer questions from an index with the model that built it.

A thin shell over :meth:`magnetsdk.Magnet.answer`: parse options, answer each question, turn
library errors into click errors and print a table or JSON lines.
"""

from __future__ import annotations

from pathlib import Path

import click
from magnetsdk.cli.errors import fail, index_errors
from magnetsdk.cli.options import model_options, open_magnet
from magnetsdk.cli.output import clip, emit, format_option, print_table


@click.command("ask")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.argument("questions", nargs=-1, required=True)
@click.option("-k", "k", default=3, show_default=True, type=int, help="Chunks retrieved per question.")
@click.option("--max-new-tokens", default=32, show_default=True, type=int, help="Longest answer, in tokens.")
@click.option(
    "--reuse/--no-reuse",
    default=True,
    show_default=True,
    help="Hybrid layout with cached context keys/values, or plain causal generation.",
)
@click.option("--temperature", default=0.0, show_default=True, type=float, help="0 is greedy.")
@click.option("--seed", default=None, type=int, help="Seed for sampling (temperature > 0).")
@click.option(
    "--chat/--plain",
    default=None,
    help="Frame chunks and question as a chat user message, or as plain text [default: chat when "
    "the tokenizer has a chat template].",
)
@format_option("table")
@model_options
def ask_command(
    directory,
    questions,
    k,
    max_new_tokens,
    reuse,
    temperature,
    seed,
    chat,
    fmt,
    model,
    adapter,
    device,
    dtype,
):
    """Answer each QUESTION from the chunks of the index in DIRECTORY (built with the same model)."""
    from magnetsdk.index import Index
    from magnetsdk.index.manifest import Manifest

    # The index commands' errors, plus a question that is not text or an index with no match.
    errors = (*index_errors(), LookupError)
    try:
        Manifest.load(directory)  # a missing or damaged index fails before the model loads
    except errors as error:
        raise fail(error) from None
    magnet = open_magnet(model, adapter, device, dtype)
    answers = []
    try:
        with Index.open(directory, magnet) as index:
            for question in questions:
                answers.append(
                    magnet.answer(
                        question,
                        index,
                        k=k,
                        max_new_tokens=max_new_tokens,
                        reuse=reuse,
                        temperature=temperature,
                        seed=seed,
                        chat=chat,
                    )
                )
    except errors as error:
        raise fail(error) from None
    records = [{"question": q, **a.to_dict()} for q, a in zip(questions, answers, strict=True)]
    emit(records, fmt, lambda: _print_answers(questions, answers))


def _print_answers(questions, answers) -> None:
    for number, (question, answer) in enumerate(zip(questions, answers, strict=True)):
        if number:
            click.echo()
        t = answer.timings
        click.echo(f"question: {question}")
        click.echo(f"answer:   {answer.text}")
        click.echo(
            f"time:     retrieve {t.retrieve:.3f}s  prefill {t.prefill:.3f}s  decode {t.decode:.3f}s  "
            f"({'hybrid, context cache ' + ('hit' if answer.cache_hit else 'miss') if answer.reuse else 'causal'}, "
            f"{answer.context_tokens} context tokens)"
        )
        rows = [
            [rank, f"{h.score:.3f}", h.document_id, clip(h.text, 80)] for rank, h in enumerate(answer.hits, 1)
        ]
        print_table(["rank", "score", "document", "chunk"], rows)


COMMANDS = [ask_command]
