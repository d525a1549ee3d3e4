"""The fills' guards: the loop guard (``no_repeat_ngram``) and the copy guard (``copy_guard``)."""

from __future__ import annotations

import pytest
import torch

from magnetsdk.decoding import Sampling, ban_repeated_ngrams
from magnetsdk.infilling import decode_spans, given_guards


def banned_of(history, size, vocab=10):
    logits = torch.zeros(1, vocab)
    ban_repeated_ngrams(logits, [history], size)
    return [int(t) for t in torch.nonzero(torch.isinf(logits[0])).flatten()]


def test_bans_the_tokens_that_would_repeat_a_run():
    assert banned_of([1, 2, 3, 1, 2], 3) == [3]  # "1 2" was followed by 3
    assert banned_of([5, 6, 5, 7, 5], 2) == [6, 7]  # every token that followed a 5
    assert banned_of([1, 2, 3, 4], 2) == []  # the last token has not occurred before
    assert banned_of([1, 2], 3) == []  # too short to hold a run of 3
    assert banned_of([1, 2, 1, 2], 0) == []  # 0: off


def test_each_row_reads_its_own_history():
    logits = torch.zeros(2, 6)
    ban_repeated_ngrams(logits, [[1, 2, 1], [3, 4, 5]], 2)
    assert torch.isinf(logits[0, 2]) and torch.isinf(logits).sum() == 1


@pytest.mark.parametrize("size", [1, -1, True, 2.0])
def test_bad_sizes_are_refused_by_name(size):
    with pytest.raises(ValueError, match="no_repeat_ngram"):
        Sampling(no_repeat_ngram=size)


def repeated_runs(tokens, size):
    runs = [tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)]
    return len(runs) - len(set(runs))


def test_guarded_spans_hold_no_repeated_run_and_cache_equals_recompute(magnet):
    contexts = [
        [magnet.tokenizer(p, add_special_tokens=False)["input_ids"] for p in t.split("[GAP]")]
        for t in ["The cat [GAP] on the mat.", "[GAP] is the capital of France."]
    ]
    common = dict(max_new_tokens=24, eos_id=None, layout="spm")
    args = (magnet.model, contexts, magnet.layout, magnet._prefix, magnet._pad_id)
    with torch.no_grad():
        plain = decode_spans(*args, **common)
        guarded = decode_spans(*args, sampling=Sampling(no_repeat_ngram=2), **common)
        recomputed = decode_spans(*args, sampling=Sampling(no_repeat_ngram=2), use_cache=False, **common)
    # A tiny random model loops under greedy decoding; the guard removes every repeated bigram.
    assert sum(repeated_runs(spans[0], 2) for spans in plain) > 0
    assert all(repeated_runs(spans[0], 2) == 0 for spans in guarded)
    assert guarded == recomputed


def test_infill_passes_the_guard_through(llama_magnet):
    text = "The cat [GAP] on the mat."
    plain = llama_magnet.infill(text, max_new_tokens=16, no_repeat_ngram=0, resample_copies=0)
    assert repeated_runs(plain.span_ids[0], 2) > 0  # the tiny model loops when nothing stops it
    guarded = llama_magnet.infill(text, max_new_tokens=16, no_repeat_ngram=2)
    assert repeated_runs(guarded.span_ids[0], 2) == 0
    # The default guard: no run of 4 of the fill's own tokens comes back.
    assert repeated_runs(llama_magnet.infill(text, max_new_tokens=16, resample_copies=0).span_ids[0], 4) == 0
    with pytest.raises(ValueError, match="no_repeat_ngram"):
        llama_magnet.infill(text, no_repeat_ngram=1)


def test_context_runs_map_each_run_to_what_follows_it():
    from magnetsdk.copies import context_runs

    runs = context_runs([[1, 2, 3, 1, 2, 4], [7, 8]], 3)
    assert runs == {(1, 2): frozenset({3, 4}), (2, 3): frozenset({1}), (3, 1): frozenset({2})}
    assert context_runs([[1, 2]], 3) == {}  # no segment holds a run of 3


def test_a_span_that_has_written_a_context_run_may_not_go_on_with_it():
    from magnetsdk.copies import context_runs
    from magnetsdk.infilling import SpanProgram
    from magnetsdk.layout import LayoutTokens, infill_layout

    tokens = LayoutTokens("m", "g", "s", "e", mask_id=4, gap_id=1, span_id=2, end_id=3)
    row = SpanProgram(
        1, tokens, infill_layout("spm"), 8, frozenset({3}), frozenset(), 3, context_runs([[5, 6, 7]], 3)
    )
    assert row.suppressed() == [3]  # the first token: only END is held back, as without the guard
    row.advance(5)
    assert row.suppressed() == []
    row.advance(6)
    assert row.suppressed() == [7]  # "5 6 7" is the context's
    row.advance(9)
    assert row.suppressed() == []


def holds_context_run(span, segments, size):
    runs = {tuple(seg[i : i + size]) for seg in segments for i in range(len(seg) - size + 1)}
    return any(tuple(span[i : i + size]) in runs for i in range(len(span) - size + 1))


def test_copy_guarded_spans_hold_no_run_of_their_context(magnet):
    # Contexts that repeat themselves, so a tiny random model copies them when unguarded.
    texts = [
        "the cat sat on the mat the cat sat on the mat [GAP] the cat sat on the mat",
        "[GAP] a b a b a b a b",
    ]
    contexts = [
        [magnet.tokenizer(p, add_special_tokens=False)["input_ids"] for p in t.split("[GAP]")] for t in texts
    ]
    common = dict(max_new_tokens=24, eos_id=None, layout="spm")
    args = (magnet.model, contexts, magnet.layout, magnet._prefix, magnet._pad_id)
    with torch.no_grad():
        guarded = decode_spans(*args, copy_guard=3, **common)
        recomputed = decode_spans(*args, copy_guard=3, use_cache=False, **common)
    assert not any(
        holds_context_run(spans[0], segments, 3) for spans, segments in zip(guarded, contexts, strict=True)
    )
    assert guarded == recomputed


def test_infill_copy_guard_is_checked_by_name(llama_magnet):
    with pytest.raises(ValueError, match="copy_guard=1 must be 0"):
        llama_magnet.infill("The cat [GAP] on the mat.", copy_guard=1)
    plain = llama_magnet.infill("The cat [GAP] on the mat.", max_new_tokens=8)
    assert llama_magnet.infill("The cat [GAP] on the mat.", max_new_tokens=8, copy_guard=0) == plain


def test_front_ends_pass_on_only_the_guards_their_user_set():
    assert given_guards(no_repeat_ngram=None, copy_guard=None) == {}
    assert given_guards(no_repeat_ngram=0, copy_guard=None) == {"no_repeat_ngram": 0}
    assert given_guards(no_repeat_ngram=None, copy_guard=7) == {"copy_guard": 7}


def test_copies_text_looks_for_a_run_of_words_inside_one_side():
    from magnetsdk.copies import copies_segments, copies_text

    assert copies_text(" the capital of France is big", ["x", "Paris , the Capital of France is old"])
    assert not copies_text(
        " of France is big today", ["the capital of", "France is big today"]
    )  # across sides
    assert not copies_text(" four words only here", ["four words only here"])  # shorter than 5 words
    assert copies_text(" a b c", ["x a b c y"], n=3)
    assert copies_segments([" fine", " one two three four five"], ["one two three four five six", ""])
    assert not copies_segments([" fine"], ["one two three four five six", ""])


def test_a_fill_loops_from_the_unit_that_completes_a_repeated_run():
    from magnetsdk.copies import loop_offsets, loops

    text = " He was named the MVP . He was named the MVP again"
    # " He was named the MVP" comes back: its fifth unit completes the repeat; " again" ends it.
    assert loop_offsets(text) == [text.rindex("MVP")]
    assert loop_offsets(" a b c d e a b c d") == []  # the repeat is one unit short
    assert loops(" mid-@-@-@-@")  # marks are units: "@ - @ - @" repeats
    assert not loops(" second @-@ team all @-@ star")  # WikiText's joiner twice is no loop
    assert loop_offsets(" a b a b a", n=3) == [9]  # overlapping runs count: "a b a" from unit 3
    assert not loops("")


COPYING = "b b b b b b b b [GAP] b b b b b b"  # a tiny random model's greedy fill repeats " b"
# The resampling tests read it alone: one greedy fill without the default loop guard, ranked as they name.
PLAIN = {"no_repeat_ngram": 0, "resample_copies": 0, "candidates": 1}
UNGUARDED = {"no_repeat_ngram": 0, "candidates": 1}


def test_resample_copies_replaces_a_fill_that_copies_with_the_likeliest_that_does_not(llama_magnet):
    from magnetsdk.copies import copies_segments
    from magnetsdk.infilling import split_gaps

    magnet = llama_magnet
    segments = split_gaps(COPYING, "[GAP]")
    plain = magnet.infill(COPYING, max_new_tokens=12, **PLAIN)
    assert copies_segments(plain.spans, segments) and not plain.resampled
    fixed = magnet.infill(
        COPYING, max_new_tokens=12, resample_copies=8, resample_ranking="total", **UNGUARDED
    )
    assert fixed.resampled and not copies_segments(fixed.spans, segments)
    assert fixed.candidates and fixed.candidates[0].spans == fixed.spans
    assert not any(copies_segments(c.spans, segments) for c in fixed.candidates)
    scores = [c.log_likelihood for c in fixed.candidates]
    assert scores == sorted(scores, reverse=True)
    # Unseeded, the samples are seeded 0: a greedy call stays reproducible.
    again = {"max_new_tokens": 12, "resample_copies": 8, "resample_ranking": "total", **UNGUARDED}
    assert magnet.infill(COPYING, **again) == fixed
    assert magnet.infill(COPYING, seed=0, **again) == fixed
    assert magnet.infill(COPYING, seed=5, **again) != fixed


def test_resample_copies_leaves_fills_that_do_not_copy_alone(llama_magnet):
    from magnetsdk.copies import copies_segments
    from magnetsdk.infilling import split_gaps

    texts = ["The cat [GAP] on the mat.", COPYING, "[GAP] is the capital of France."]
    plain = llama_magnet.infill(texts, max_new_tokens=12, **PLAIN)
    fixed = llama_magnet.infill(texts, max_new_tokens=12, resample_copies=4, **UNGUARDED)
    for text, before, after in zip(texts, plain, fixed, strict=True):
        if copies_segments(before.spans, split_gaps(text, "[GAP]")):
            assert after.resampled
        else:
            assert after == before and not after.resampled
    assert [r.resampled for r in fixed] == [False, True, False]


def test_per_token_resampling_ranks_whole_fills_by_their_mean(llama_magnet):
    from magnetsdk.copies import copies_segments
    from magnetsdk.infilling import split_gaps
    from magnetsdk.ranking import fill_log_likelihood

    magnet = llama_magnet
    segments = split_gaps(COPYING, "[GAP]")
    total = magnet.infill(
        COPYING, max_new_tokens=12, resample_copies=8, resample_ranking="total", **UNGUARDED
    )
    fixed = magnet.infill(
        COPYING, max_new_tokens=12, resample_copies=8, resample_ranking="per-token", **UNGUARDED
    )
    assert fixed.resampled and not copies_segments(fixed.spans, segments)
    # The same eight samples: every fill ranked per token is one of them as decoded, while the
    # summed ranking also ranks their shorter cuts, so it holds at least as many.
    assert {tuple(c.spans) for c in fixed.candidates} <= {tuple(c.spans) for c in total.candidates}
    assert len(fixed.candidates) <= len(total.candidates)
    texts = [
        magnet.tokenizer(f"b b b b b b b b{c.spans[0]} b b b b b b", add_special_tokens=False)["input_ids"]
        for c in fixed.candidates
    ]
    means = fill_log_likelihood(magnet.model, texts, magnet.prefix, magnet.pad_id, per_token=True)
    assert [c.log_likelihood for c in fixed.candidates] == pytest.approx(means, abs=1e-4)
    assert means == sorted(means, reverse=True)


def test_bad_resample_rankings_are_refused_by_name(llama_magnet):
    with pytest.raises(ValueError, match="resample_ranking='mean' is not one of total, per-token"):
        llama_magnet.infill("The cat [GAP] on the mat.", resample_copies=4, resample_ranking="mean")


@pytest.mark.parametrize("count", [-1, True, 2.0])
def test_bad_resample_counts_are_refused_by_name(llama_magnet, count):
    with pytest.raises(ValueError, match="resample_copies="):
        llama_magnet.infill("The cat [GAP] on the mat.", resample_copies=count)


def test_resampling_needs_a_sampling_temperature_and_says_how_to_turn_it_off(llama_magnet):
    text, one = "The cat [GAP] on the mat.", {"candidates": 1}
    with pytest.raises(ValueError, match=r"candidate_temperature=0 .* or resample_copies=0"):
        llama_magnet.infill(text, resample_copies=4, candidate_temperature=0, **one)
    # On by default, so a temperature of 0 is refused without resample_copies=4 being given.
    with pytest.raises(ValueError, match=r"candidate_temperature=0 .* or resample_copies=0"):
        llama_magnet.infill(text, candidate_temperature=0, **one)
    # The default candidates="auto" ranks this gap inside a sentence, so it says how to stop that too.
    with pytest.raises(ValueError, match=r"candidate_temperature=0 .* or candidates=1"):
        llama_magnet.infill(text, candidate_temperature=0, resample_copies=0)
    # Off, the resampling settings are not used, so they are not checked either.
    off = llama_magnet.infill(text, candidate_temperature=0, resample_copies=0, max_new_tokens=2, **one)
    assert off.spans
