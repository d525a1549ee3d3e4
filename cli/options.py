"""Options shared by commands that load a model, and the one place that loads it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
from magnetsdk.cli.errors import fail

from magnetsdk.checks import LINE_BREAKS
from magnetsdk.copies import RANKINGS, RESAMPLE_RANKINGS


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


class _Candidates(click.ParamType):
    """``auto`` or an integer >= 1, as ``Magnet.infill(candidates=...)`` takes it."""

    name = "auto|N"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | str:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = 0
        if number < 1:
            self.fail(f"{value!r} is neither auto nor an integer of at least 1", param, ctx)
        return number


def candidates_option(help_text: str) -> Callable[[Callable], Callable]:
    """``--candidates auto|N`` (default auto: rank 8 fills for a gap inside a sentence, else one
    greedy fill): how many fills ``Magnet.infill`` ranks."""
    return click.option("--candidates", default="auto", show_default=True, type=_Candidates(), help=help_text)


def line_breaks_option(command: Callable) -> Callable:
    """``--line-breaks auto|allow|forbid``: whether fills may break a line (``Magnet.infill(line_breaks=...)``)."""
    return click.option(
        "--line-breaks",
        default="auto",
        show_default=True,
        type=click.Choice(LINE_BREAKS),
        help="May a fill break a line? auto: only in a text that holds a line break itself.",
    )(command)


def _guard_option(flag: str, what: str) -> Callable[[Callable], Callable]:
    """A fill guard's run length in tokens (0: off); unset, ``Magnet.infill``'s default applies."""
    return click.option(
        flag, default=None, type=click.IntRange(min=0), help=f"{what} (0: off) [default: Magnet.infill's]."
    )


# ``Magnet.infill(no_repeat_ngram=...)`` and ``Magnet.infill(copy_guard=...)``.
no_repeat_ngram_option = _guard_option(
    "--no-repeat-ngram", "No fill repeats a run of this many of its own tokens"
)
copy_guard_option = _guard_option("--copy-guard", "No fill holds a run of this many tokens of its own text")
# ``Magnet.infill(resample_copies=...)``: a count of sampled fills, not a run length.
resample_copies_option = click.option(
    "--resample-copies",
    default=None,
    type=click.IntRange(min=0),
    help="A fill that copies 5 words of its own text is replaced by the likeliest of this many sampled "
    "fills that does not (0: off) [default: Magnet.infill's].",
)
# ``Magnet.infill(candidate_ranking=...)``.
candidate_ranking_option = click.option(
    "--candidate-ranking",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", *RANKINGS]),
    help="How ranked fills are scored: total (the filled text where the fills differ), right (the text "
    "after the fill, among fills that end a sentence); auto: right for a gap at a text's start, else total.",
)
# ``Magnet.infill(resample_ranking=...)``.
resample_ranking_option = click.option(
    "--resample-ranking",
    default=None,
    type=click.Choice(RESAMPLE_RANKINGS),
    help="How --resample-copies ranks its fills: total (with shorter cuts, summed log-likelihood) or "
    "per-token (whole fills, mean log-likelihood per token) [default: Magnet.infill's].",
)

# ``Magnet.infill(pool_stops=...)``.
pool_stops_option = click.option(
    "--pool-stops/--no-pool-stops",
    default=None,
    help="Pick END and EOS, which both close a fill, as one token with their summed probability "
    "[default: Magnet.infill's].",
)

# ``Magnet.infill(whole_sentences=...)``.
whole_sentences_option = click.option(
    "--whole-sentences/--no-whole-sentences",
    default=None,
    help="Keep a gap between whole sentences open until its fill ends a sentence [default: Magnet.infill's].",
)

# ``Magnet.infill(cut_unclosed=...)``.
cut_unclosed_option = click.option(
    "--cut-unclosed/--no-cut-unclosed",
    default=None,
    help="Cut a fill that used the whole token budget without closing after its last whole sentence "
    "[default: Magnet.infill's].",
)


def check_device(device: str) -> None:
    """Refuse a device that does not exist here before anything is loaded."""
    from magnetsdk.loading import pick_device

    try:
        pick_device(device)
    except ValueError as error:
        raise fail(error) from None


def open_magnet(model: str | None, adapter: str | None, device: str = "auto", dtype: str = "auto"):
    """Load a :class:`magnetsdk.Magnet`, turning library errors into click errors."""
    from magnetsdk import Magnet
    from magnetsdk.attention import AttentionBackendError

    check_device(device)
    try:
        return Magnet.from_pretrained(model, adapter=adapter, device=device, dtype=dtype)
    except (OSError, ValueError, AttentionBackendError) as error:
        raise fail(error) from None
