"""``Magnet.infill(whole_sentences=True)``: a gap between sentences stays open until its fill ends one."""

from __future__ import annotations

import pytest

from magnetsdk.decoding import Sampling
from magnetsdk.infilling import SpanProgram, decode_spans
from magnetsdk.layout import LayoutTokens, infill_layout
from magnetsdk.unclosed import between_sentences, sentence_final_ids

TOKENS = LayoutTokens("m", "g", "s", "e", mask_id=4, gap_id=1, span_id=2, end_id=3)


def test_gaps_between_sentences_need_text_after_them_and_a_sentence_start():
    assert between_sentences("", " The museum reopened.")  # the start of a text
    assert between_sentences("It rained.", " The museum reopened.")
    assert not between_sentences("The museum is in", " Paris.")  # the left side goes on
    assert not between_sentences("It rained.", ", and then it stopped.")  # the right side goes on
    assert not between_sentences("It rained.", "")  # the end of a text: nothing to hand over to
    assert not between_sentences("", "  ")


def test_the_sentence_final_tokens_end_on_a_stop_mark_and_closers_only():
    from magnetsdk.testing import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    final = sentence_final_ids(tokenizer)
    texts = {tokenizer.decode([i]) for i in final}
    assert {".", "!", "?"} <= texts
    assert all(t.rstrip(" \"')]\u201d\u2019")[-1:] in ".!?" for t in texts)
    assert not final & set(tokenizer.all_special_ids)
    comma = tokenizer(",", add_special_tokens=False)["input_ids"]
    assert len(comma) == 1 and comma[0] not in final


def test_a_gap_between_sentences_may_close_only_after_a_sentence_end():
    # Two gaps: the first between sentences (token 9 ends a sentence), the second not.
    row = SpanProgram(
        2, TOKENS, infill_layout("spm"), 4, frozenset({3}), sentence_gaps=(True, False), sentence_final={9}
    )
    assert row.suppressed() == [3]  # no span closes before its first token
    first = SpanProgram(
        1, TOKENS, infill_layout("spm"), 4, frozenset({3}), sentence_gaps=(True,), sentence_final={9}
    )
    first.advance(9)
    assert first.suppressed() == [3]  # a full stop alone is no sentence
    row.advance(5)
    assert row.suppressed() == [3]  # "5" is a fragment: END stays held
    row.advance(9)
    assert row.suppressed() == []  # after a sentence end it may close
    row.advance(6)
    assert row.suppressed() == [3]  # ... and is held again once the fill goes on
    row.advance(7)
    assert row.suppressed() == [3]
    row.advance(8)  # the budget of 4 tokens is spent: the span closes without a sentence end
    assert row.spans == [[5, 9, 6, 7]]
    row.advance(8)
    assert row.suppressed() == []  # the second gap sits inside a sentence: it may close at once


@pytest.fixture
def eager_to_close(llama_magnet):
    """The tiny model with END made its likeliest token wherever END is allowed."""
    end_id = llama_magnet.layout.end_id

    def boost_end(module, inputs, logits):
        logits[..., end_id] += 50.0
        return logits

    handle = llama_magnet.model.get_output_embeddings().register_forward_hook(boost_end)
    yield llama_magnet
    handle.remove()


def test_decoded_fills_of_sentence_gaps_end_a_sentence_or_use_the_budget(eager_to_close):
    magnet = eager_to_close
    final = sentence_final_ids(magnet.tokenizer)
    contexts = [
        [magnet.tokenizer(p, add_special_tokens=False)["input_ids"] for p in t.split("[GAP]")]
        for t in ("[GAP] The cat sat.", "The dog ran. [GAP] The cat sat.", "The cat [GAP] on the mat.")
    ]
    kwargs = dict(max_new_tokens=6, sampling=Sampling(temperature=1.0, seed=3), layout="spm")
    args = (magnet.model, contexts, magnet.layout, magnet.prefix, magnet.pad_id)
    whole = [(True,), (True,), (False,)]
    spans = decode_spans(*args, sentence_gaps=whole, sentence_final_ids=final, **kwargs)
    plain = decode_spans(*args, **kwargs)
    assert [len(span) for (span,) in plain] == [1, 1, 1]  # END wins as soon as it may
    for (span,), (kept_open,) in zip(spans, whole, strict=True):
        assert len(span) > 1 and (len(span) == 6 or span[-1] in final) if kept_open else len(span) == 1
    with pytest.raises(ValueError, match="sentence_gaps has 1 entries for 3 texts"):
        decode_spans(*args, sentence_gaps=[(True,)], sentence_final_ids=final, **kwargs)


def test_infill_with_whole_sentences_keeps_a_start_gap_open(eager_to_close):
    magnet = eager_to_close
    texts = ["[GAP] The cat sat on the mat.", "The dog ran. [GAP] The cat sat."]
    options = dict(max_new_tokens=12, candidates=1, resample_copies=0, cut_unclosed=False)
    final = sentence_final_ids(magnet.tokenizer)
    for result in magnet.infill(texts, whole_sentences=True, **options):
        (ids,) = result.span_ids
        assert len(ids) == 12 or (len(ids) > 1 and ids[-1] in final)
    assert all(len(r.span_ids[0]) == 1 for r in magnet.infill(texts, whole_sentences=False, **options))
    inside = "The cat [GAP] on the mat."
    assert len(magnet.infill(inside, whole_sentences=True, **options).span_ids[0]) == 1
    with pytest.raises(ValueError, match="whole_sentences='yes' must be True or False"):
        magnet.infill(inside, whole_sentences="yes")
