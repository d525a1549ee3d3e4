"""Fills that used the whole token budget, cut after their last whole sentence (``cut_unclosed``)."""

from __future__ import annotations

import pytest

from magnetsdk.infilling import InfillResult
from magnetsdk.testing import tiny_tokenizer
from magnetsdk.unclosed import cut_unclosed, ends_inside_a_sentence, gap_inside_a_sentence, last_sentence_end


def test_the_last_sentence_end_followed_by_a_space_is_where_a_fill_is_cut():
    span = ' He won . She said " yes ." and then the 1999 <'
    assert span[: last_sentence_end(span)] == ' He won . She said " yes ."'
    assert last_sentence_end(" He won in 1999") is None  # no sentence end
    assert last_sentence_end(" He won .") is None  # the end is the fill's own last character
    assert last_sentence_end(" . and so on") is None  # nothing before the full stop


def test_titles_and_initials_do_not_end_a_sentence():
    assert last_sentence_end(" Mr. Smith came") is None
    assert last_sentence_end(" and Warner Bros. became the") is None
    span = " John F. Kennedy won. Dr. Jones said that"
    assert span[: last_sentence_end(span)] == " John F. Kennedy won."
    assert last_sentence_end(" so did I. Then he") == len(" so did I.")  # "I" is a word, not an initial
    assert ends_inside_a_sentence(" and met Mr.")
    assert last_sentence_end(" birds, e.g. crows and i.e. rooks") is None
    assert last_sentence_end(" in the U.S. It grew") == len(" in the U.S.")  # capitals: may end a sentence


def test_a_quote_after_a_sentence_end_closes_only_an_open_quotation():
    # An even count of quotes before it: it opens the next sentence and is left out of the cut.
    assert ' He won . " Then he'[: last_sentence_end(' He won . " Then he')] == " He won ."
    assert ' He won." Then he'[: last_sentence_end(' He won." Then he')] == " He won."
    # An odd count: it closes the quotation and stays.
    span = ' She said " yes . " and the'
    assert span[: last_sentence_end(span)] == ' She said " yes . "'
    assert ends_inside_a_sentence(' He won . "') and not ends_inside_a_sentence(' He said " no . "')


def test_a_fill_ends_inside_a_sentence_unless_it_stops_on_a_sentence_end():
    assert ends_inside_a_sentence(" and the 1999 <")
    assert not ends_inside_a_sentence(" He won .  ")
    assert not ends_inside_a_sentence(' She said " yes ! "')
    assert ends_inside_a_sentence(" He won ,")


def result(spans: list[str], budget_used: list[bool], tokenizer) -> InfillResult:
    ids = [tokenizer(s, add_special_tokens=False)["input_ids"] for s in spans]
    # A fill that used the budget holds exactly max_new_tokens ids; pad the others below it.
    ids = [i + [0] * (8 - len(i)) if used else i[:3] for i, used in zip(ids, budget_used, strict=True)]
    return InfillResult(text="", spans=spans, span_ids=ids)


def test_only_fills_that_used_the_budget_are_cut_and_the_text_is_rebuilt():
    tokenizer = tiny_tokenizer()
    segments = ["A", " and B", "."]
    found = result([" x . y z", " p . q r"], [True, False], tokenizer)
    out = cut_unclosed(found, segments, 8, tokenizer)
    assert out.spans == [" x .", " p . q r"] and out.cut == [True, False]
    assert out.text == "A x . and B p . q r."
    assert out.span_ids[0] == tokenizer(" x .", add_special_tokens=False)["input_ids"]
    assert out.span_ids[1] == found.span_ids[1]
    # Nothing to cut: the result stands, with every gap marked uncut.
    kept = cut_unclosed(result([" x y z"], [True], tokenizer), ["A", "."], 8, tokenizer)
    assert kept.spans == [" x y z"] and kept.cut == [False]


def test_infill_cuts_by_default_and_checks_the_option(llama_magnet):
    text = "The cat [GAP] on the mat."
    plain = llama_magnet.infill(text, max_new_tokens=12, cut_unclosed=False)
    cut = llama_magnet.infill(text, max_new_tokens=12)  # cut by default
    assert plain.cut == [] and len(cut.cut) == 1
    if cut.cut[0]:
        assert plain.spans[0].startswith(cut.spans[0]) and not ends_inside_a_sentence(cut.spans[0])
    else:
        assert cut.spans == plain.spans
    with pytest.raises(ValueError, match="cut_unclosed='yes' must be True or False"):
        llama_magnet.infill(text, cut_unclosed="yes")


@pytest.mark.parametrize(
    ("left", "right", "inside"),
    [
        ("The Eiffel Tower is in", ", the capital of France.", True),
        ("Mating occurs in the summer ,", " carried by the females .", True),
        ("It is old .", " it was built in 1900 .", True),  # the right side goes on a sentence
        ("It is old .", " The tower was built in 1900 .", False),
        ("It is old.", ' "Yes," he said.', False),
        ("", " The museum reopened in 2010.", False),  # a gap at the start of the text
        ("The museum reopened in 2010.", "", False),  # a gap at the end
        ("He met Dr.", " Smith in 1990.", True),  # a title's full stop ends no sentence
        ("It rose to 5 .", " 1990 was the peak .", False),
        ("Most laps led .", " * Pole position", False),  # a list bullet
    ],
)
def test_a_gap_inside_a_sentence_is_told_from_one_between_sentences(left, right, inside):
    assert gap_inside_a_sentence(left, right) is inside
