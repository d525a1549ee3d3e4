"""Fills that reach the token budget without closing, cut after their last whole sentence.

A greedy fill of a missing sentence that has not closed by ``max_new_tokens`` stops wherever the
budget runs out, often mid-word ("... and a 30-10 victory over the 1999 <"). With
``Magnet.infill(cut_unclosed=True)``, the default since it was measured (docs/results.md,
"Fills that end inside a sentence"), such a fill is cut after its last sentence end (".", "!" or
"?" followed by a space, a closing quote or bracket allowed between) when it holds one. A fill
without one, and every fill the model closed, is left as it is. ``InfillResult.cut`` says which
gaps were cut; their ``span_ids`` are the cut text's tokens. Nothing that is scored changes.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from magnetsdk.infilling import InfillResult, join_filled

# A sentence end: ".", "!" or "?", then any closing quotes or brackets (WikiText spaces them:
# ' " yes . " '), then a space.
_CLOSERS = r"(?:\s*[\"')\]])*"
_SENTENCE_END = re.compile(r"[.!?]" + _CLOSERS + r"(?= )")


def last_sentence_end(span: str) -> int | None:
    """Where ``span`` cut after its last sentence end would stop (None when it holds none)."""
    ends = [m.end() for m in _SENTENCE_END.finditer(span) if span[: m.start()].strip()]
    return ends[-1] if ends else None


def ends_inside_a_sentence(span: str) -> bool:
    """Whether ``span`` stops inside a sentence: its stripped text ends without ".", "!" or "?"."""
    return re.search(r"[.!?]" + _CLOSERS + r"$", span.strip()) is None


def cut_unclosed(
    result: InfillResult, segments: list[str], max_new_tokens: int, tokenizer: Any
) -> InfillResult:
    """``result`` with each gap whose fill used the whole budget cut after its last sentence end."""
    spans, ids, cut = list(result.spans), list(result.span_ids), []
    for gap, span in enumerate(spans):
        end = last_sentence_end(span) if len(ids[gap]) >= max_new_tokens else None
        cut.append(end is not None)
        if end is not None:
            spans[gap] = span[:end]
            ids[gap] = tokenizer(spans[gap], add_special_tokens=False)["input_ids"]
    if not any(cut):
        return replace(result, cut=cut)
    # ``spans`` are as written into the text (with any moved space), so nothing is moved again.
    text, written = join_filled(segments, spans, [""] * len(spans))
    return replace(result, text=text, spans=written, span_ids=ids, cut=cut)
