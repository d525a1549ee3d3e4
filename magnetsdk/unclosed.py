"""Fills that reach the token budget without closing, cut after their last whole sentence.

A greedy fill of a missing sentence that has not closed by ``max_new_tokens`` stops wherever the
budget runs out, often mid-word ("... and a 30-10 victory over the 1999 <"). With
``Magnet.infill(cut_unclosed=True)``, the default since it was measured (docs/results.md,
"Fills that end inside a sentence"), such a fill is cut after its last sentence end (".", "!" or
"?" followed by a space, a closing quote or bracket allowed between) when it holds one. A full stop
after a title or an initial ("Mr.", "Dr.", "J.") is not a sentence end, and a double quote after a
sentence end counts as closing only when the fill opened one before it (an even count of quotes
before it means it opens the next sentence: ' won . " Then' is cut after "won ."). A fill without a
sentence end, and every fill the model closed, is left as it is. ``InfillResult.cut`` says which
gaps were cut; their ``span_ids`` are the cut text's tokens. Nothing that is scored changes.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from magnetsdk.infilling import InfillResult, join_filled, token_ids_where

# A sentence end: ".", "!" or "?", then any closing quotes or brackets (WikiText spaces them:
# ' " yes . " '), then a space.
_CLOSERS = r"(?:\s*[\"')\]])*"
_SENTENCE_END = re.compile(r"[.!?]" + _CLOSERS + r"(?= |$)")
# Words whose full stop abbreviates them (titles before a name, and a few that stand inside a
# sentence); a single capital letter other than "I" is an initial, and lower-case letters joined
# by full stops ("e.g.", "i.e.") abbreviate too.
ABBREVIATIONS = frozenset(
    "Mr Mrs Ms Dr St Jr Sr Prof Gen Col Lt Capt Sgt Rev Mt Gov Sen Rep Fr Hon Bros vs No Nos Vol".split()
)
_WORD_BEFORE = re.compile(r"(?:^|[\s(\"'])([A-Za-z]+)$")
_LOWER_DOTTED = re.compile(r"(?:^|[\s(])(?:[a-z]\.)+[a-z]$")  # "e.g", "i.e", "a.m"


def abbreviates(text: str) -> bool:
    """Whether the full stop right after ``text`` abbreviates its last word ("Mr", "J", "e.g")."""
    if _LOWER_DOTTED.search(text):
        return True
    found = _WORD_BEFORE.search(text)
    if found is None:
        return False
    word = found.group(1)
    return word in ABBREVIATIONS or (len(word) == 1 and word.isupper() and word != "I")


def sentence_ends(span: str) -> list[int]:
    """Where ``span`` could be cut after a whole sentence: after each sentence end, its closing quotes
    and brackets included, an opening double quote left out."""
    ends = []
    for m in _SENTENCE_END.finditer(span):
        before = span[: m.start()]
        if not before.strip() or (span[m.start()] == "." and abbreviates(before)):
            continue
        closers = span[m.start() + 1 : m.end()]
        if '"' in closers and before.count('"') % 2 == 0:  # the quote opens what follows
            ends.append(m.start() + 1 + len(closers[: closers.index('"')].rstrip()))
            continue
        ends.append(m.end())
    return ends


def last_sentence_end(span: str) -> int | None:
    """Where ``span`` cut after its last sentence end would stop (None when it holds none, or only
    at its very end, where there is nothing to cut)."""
    ends = [end for end in sentence_ends(span) if span[end:].strip()]
    return ends[-1] if ends else None


def ends_inside_a_sentence(span: str) -> bool:
    """Whether ``span`` stops inside a sentence: its stripped text does not end on a sentence end."""
    text = span.strip()
    return not any(not text[end:].strip() for end in sentence_ends(text))


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


def gap_inside_a_sentence(left: str, right: str) -> bool:
    """Whether a gap between ``left`` and ``right`` sits inside a sentence: the left side does not
    end on a sentence end (and is not empty), or the right side does not start one (it starts with a
    lower-case letter or a mark such as "," or ")"). A gap between whole sentences, at the start or
    at the end of a text, is not."""
    before, after = left.strip(), right.strip()
    if before and ends_inside_a_sentence(before):
        return True
    return bool(after) and not (after[0].isupper() or after[0].isdigit() or after[0] in "\"'(<[*•")


def between_sentences(left: str, right: str) -> bool:
    """Whether a gap sits between whole sentences with text after it: the right side starts a
    sentence and the left side is empty or ends one (``Magnet.infill(whole_sentences=True)`` keeps
    such a gap open until its fill ends a sentence)."""
    return bool(right.strip()) and not gap_inside_a_sentence(left, right)


# The marks a sentence-final token may end with after its sentence end (WikiText spaces them).
_TRAILING_CLOSERS = " \"')]\u201d\u2019"


def sentence_final_ids(tokenizer: Any) -> frozenset[int]:
    """The ids of every token whose text ends a sentence: ".", "!" or "?", then only closing quotes,
    brackets or spaces (" .", "!\"", ".)"); special tokens aside. A title's full stop ("Mr.") is
    one too: a token does not know the word before it."""
    return token_ids_where(tokenizer, lambda text: text.rstrip(_TRAILING_CLOSERS)[-1:] in (".", "!", "?"))
