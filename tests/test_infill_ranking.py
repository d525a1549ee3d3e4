"""Magnet.infill(candidates=N): fills ranked by the filled text's causal likelihood."""

from __future__ import annotations

import json

import pytest
import torch

from magnetsdk.eval.infill import evaluate_infill, word_f1
from magnetsdk.ranking import fill_log_likelihood, shorter_spans

TEXT = "The cat [GAP] on the mat."


def hf_log_likelihood(magnet, text: str) -> float:
    """The reference: the Hugging Face model's own causal forward, summed log p of every token after the first."""
    ids = torch.tensor([magnet.prefix + magnet.tokenizer(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        logits = magnet.model(input_ids=ids).logits[0].float()
    logp = logits[:-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
    first = max(len(magnet.prefix), 1) - 1  # the tokens after the prefix (after the first, with none)
    return float(logp[first:].sum())


def test_shorter_spans_end_at_clause_boundaries_with_and_without_punctuation():
    assert shorter_spans(" Paris, France.") == [" Paris,", " Paris", " Paris, France"]
    assert shorter_spans(" in 1905; then, at last.") == [
        " in 1905;",
        " in 1905",
        " in 1905; then,",
        " in 1905; then",
        " in 1905; then, at last",
    ]
    assert shorter_spans(" Paris") == [] and shorter_spans(".") == [] and shorter_spans(" x.") == [" x"]
    assert shorter_spans(" 3.5 km") == []  # a full stop inside a number is no clause boundary


def test_the_most_likely_filled_text_wins(llama_magnet):
    result = llama_magnet.infill(TEXT, candidates=5, seed=0, max_new_tokens=5)
    scores = [c.log_likelihood for c in result.candidates]
    assert len(scores) >= 2 and scores == sorted(scores, reverse=True)
    assert result.spans == result.candidates[0].spans
    assert result.text == "The cat" + result.spans[0] + " on the mat."
    # These texts are shorter than the ranking window, so the scores differ exactly as the whole
    # texts' likelihoods do (the shared beginning adds the same to each).
    whole = [
        hf_log_likelihood(llama_magnet, "The cat" + c.spans[0] + " on the mat.") for c in result.candidates
    ]
    for candidate, reference in zip(result.candidates, whole, strict=True):
        assert candidate.log_likelihood - scores[0] == pytest.approx(reference - whole[0], abs=1e-3)
    assert scores[0] > whole[0]  # the shared beginning is not scored
    # The greedy fill is one of the candidates, and each filled text is scored once.
    greedy = llama_magnet.infill(TEXT, max_new_tokens=5, candidates=1)
    assert greedy.spans in [c.spans for c in result.candidates] and greedy.candidates == []
    texts = ["The cat" + c.spans[0] + " on the mat." for c in result.candidates]
    assert len(set(texts)) == len(texts)


def test_ranked_fills_are_reproducible_and_follow_the_seeding_rule(llama_magnet):
    texts = [TEXT, "A dog [GAP] in the park while [GAP] play."]
    together = llama_magnet.infill(texts, candidates=3, seed=5, max_new_tokens=4)
    again = llama_magnet.infill(texts, candidates=3, seed=5, max_new_tokens=4, batch_size=1)
    assert [r.candidates for r in together] == [r.candidates for r in again]
    # Text 1's sampled candidates are seeded 5 + 1 * 2 + 0 and + 1: alone, that is seed 7.
    alone = llama_magnet.infill(texts[1], candidates=3, seed=7, max_new_tokens=4)
    assert alone.candidates == together[1].candidates
    assert all(len(c.spans) == 2 for c in together[1].candidates)


def test_ranking_options_are_checked(llama_magnet):
    with pytest.raises(ValueError, match='candidates=0 must be "auto" or an integer of at least 1'):
        llama_magnet.infill(TEXT, candidates=0)
    with pytest.raises(ValueError, match="candidates=True"):
        llama_magnet.infill(TEXT, candidates=True)
    with pytest.raises(ValueError, match="candidates='some'"):
        llama_magnet.infill(TEXT, candidates="some")
    with pytest.raises(ValueError, match="candidate_temperature=0 would make every sampled fill the greedy"):
        llama_magnet.infill(TEXT, candidates=2, candidate_temperature=0, resample_copies=0)
    with pytest.raises(ValueError, match="top_p"):
        llama_magnet.infill(TEXT, candidates=2, candidate_top_p=0)
    # With one candidate and no resampling the candidate settings are not used, so they are not checked.
    assert llama_magnet.infill(
        TEXT, candidates=1, candidate_temperature=0, resample_copies=0, max_new_tokens=2
    ).spans


def test_word_f1():
    assert word_f1(" Paris", " Paris.") == 1.0
    assert word_f1(" the city of Paris", " Paris") == pytest.approx(2 * 0.25 * 1 / 1.25)
    assert word_f1(" London", " Paris") == 0.0 and word_f1("", " Paris") == 0.0


def test_eval_infill_ranks_the_generated_fills(llama_magnet, tmp_path):
    items = [
        {"left": "The cat", "span": " sat", "right": " on the mat."},
        {"left": "A dog", "span": " ran", "right": " in the park."},
    ]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    result = evaluate_infill(
        llama_magnet, path, generate=2, max_new_tokens=3, show_progress=False, candidates=3
    )
    ranked = llama_magnet.infill(
        [f"{i['left']}[GAP]{i['right']}" for i in items], max_new_tokens=3, candidates=3, seed=0
    )
    generated = [row["generated"] for row in result.details["infills"][llama_magnet.infill_layout.name]]
    assert generated == [r.spans[0] for r in ranked]
    expected = sum(word_f1(r.spans[0], i["span"]) for r, i in zip(ranked, items, strict=True)) / 2
    assert result.figures["gold_f1"] == pytest.approx(expected) and result.settings["candidates"] == 3


def test_a_fill_without_a_word_is_ranked_only_when_every_fill_lacks_one(llama_magnet):
    from magnetsdk.ranking import best_fill

    tokenizer = llama_magnet.tokenizer
    comma, word = (tokenizer(s, add_special_tokens=False)["input_ids"] for s in (" ,", " sat"))
    segments, moved = ["The cat", " on the mat."], [" "]
    chosen = best_fill(llama_magnet, segments, [[comma], [word]], moved, ranked=True)
    assert [c.spans for c in chosen.candidates] == [[" sat"]]
    alone = best_fill(llama_magnet, segments, [[comma]], moved, ranked=True)
    assert alone.spans == [" ,"]


def test_ranking_reads_a_window_around_where_the_fills_differ(llama_magnet):
    left = llama_magnet.tokenizer(" the cat sat on the mat" * 20, add_special_tokens=False)["input_ids"]
    fills = [[5, 6], [7]]
    right = left[:50]
    texts = [left + f + right for f in fills]
    scores = fill_log_likelihood(llama_magnet.model, texts, [], llama_magnet.pad_id, context=16, after=8)
    # The same as scoring the window by hand: 16 tokens before the fill, the fill, 8 tokens after.
    cut = [left[-16:] + f + right[:8] for f in fills]
    by_hand = []
    for ids in cut:
        with torch.no_grad():
            logits = llama_magnet.model(input_ids=torch.tensor([ids])).logits[0].float()
        logp = logits[:-1].log_softmax(-1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
        by_hand.append(float(logp[15:].sum()))
    assert scores == pytest.approx(by_hand, abs=1e-3)
    # Per token: the same sums over the same windows, divided by how many tokens each scored.
    means = fill_log_likelihood(
        llama_magnet.model, texts, [], llama_magnet.pad_id, context=16, after=8, per_token=True
    )
    assert means == pytest.approx([by_hand[0] / 10, by_hand[1] / 9], abs=1e-4)
    assert fill_log_likelihood(llama_magnet.model, [texts[0]], [], llama_magnet.pad_id) == [0.0]
    # after_only: the 8 tokens after the fill alone, read with the 16 tokens before them.
    after = fill_log_likelihood(
        llama_magnet.model, texts, [], llama_magnet.pad_id, context=16, after=8, after_only=True
    )
    by_hand = []
    for f in fills:
        ids = (left + f)[-16:] + right[:8]
        with torch.no_grad():
            logits = llama_magnet.model(input_ids=torch.tensor([ids])).logits[0].float()
        logp = logits[:-1].log_softmax(-1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
        by_hand.append(float(logp[15:].sum()))
    assert after == pytest.approx(by_hand, abs=1e-3)


def test_right_ranking_keeps_whole_sentences_that_copy_nothing_and_scores_what_follows(llama_magnet):
    from magnetsdk.ranking import best_fill

    tokenizer = llama_magnet.tokenizer
    segments, moved = ["", " The dog ran to the park and sat down."], [""]
    fills = [" A cat sat.", " A cat", " The dog ran to the park and sat down."]
    options = [[tokenizer(f, add_special_tokens=False)["input_ids"]] for f in fills]
    chosen = best_fill(llama_magnet, segments, options, moved, ranked=True, ranking="right")
    # " A cat" ends inside a sentence and the third copies its right side: one fill is left.
    assert [c.spans for c in chosen.candidates] == [[" A cat sat."]] and chosen.spans == [" A cat sat."]
    # Among whole sentences the one after which the right side is likeliest wins.
    two = [*fills[:1], " Two birds flew."]
    options = [[tokenizer(f, add_special_tokens=False)["input_ids"]] for f in two]
    chosen = best_fill(llama_magnet, segments, options, moved, ranked=True, ranking="right")
    texts = [tokenizer(f + segments[1], add_special_tokens=False)["input_ids"] for f in two]
    scores = fill_log_likelihood(
        llama_magnet.model, texts, llama_magnet.prefix, llama_magnet.pad_id, batch_size=16, after_only=True
    )
    assert [c.log_likelihood for c in chosen.candidates] == pytest.approx(
        sorted(scores, reverse=True), abs=1e-4
    )
    assert chosen.spans == [two[max(range(2), key=scores.__getitem__)]]
    # Every fill a fragment: they are ranked all the same.
    options = [[tokenizer(f, add_special_tokens=False)["input_ids"]] for f in (" A cat", " Two")]
    assert best_fill(llama_magnet, segments, options, moved, ranked=True, ranking="right").candidates


def test_auto_ranks_a_gap_inside_a_sentence_and_keeps_one_greedy_fill_between_sentences(llama_magnet):
    from magnetsdk.ranking import AUTO_CANDIDATES, candidate_plan

    inside, between = TEXT, "The cat sat. [GAP] The dog ran."
    texts = [["The cat", " on the mat."], ["The cat sat.", " The dog ran."], ["", " The dog ran."]]
    assert candidate_plan("auto", "auto", texts) == [
        (AUTO_CANDIDATES, "total"),
        (1, "total"),
        (AUTO_CANDIDATES, "right"),
    ]
    assert candidate_plan(3, "total", [["a", "b"], ["", " D"]]) == [(3, "total"), (3, "total")]
    assert candidate_plan("auto", "right", texts[:1]) == [(AUTO_CANDIDATES, "right")]
    with pytest.raises(ValueError, match="candidate_ranking='mean' is not one of auto, total, right"):
        candidate_plan("auto", "mean", texts)
    both = llama_magnet.infill([inside, between], seed=0, max_new_tokens=4)  # candidates="auto"
    assert both[0] == llama_magnet.infill(inside, candidates=AUTO_CANDIDATES, seed=0, max_new_tokens=4)
    assert both[1] == llama_magnet.infill(between, candidates=1, seed=0, max_new_tokens=4)
    assert both[0].candidates and both[1].candidates == []
    # In a mixed call each ranked text's candidates are seeded as in a call that ranks them all.
    ranked_alone = llama_magnet.infill(
        [between, inside], candidates=AUTO_CANDIDATES, seed=0, max_new_tokens=4
    )
    mixed = llama_magnet.infill([between, inside], seed=0, max_new_tokens=4, batch_size=2)
    assert mixed[1].candidates == ranked_alone[1].candidates


def test_auto_ranks_a_gap_at_the_start_by_the_text_after_it(llama_magnet):
    text = "[GAP] The dog ran to the park."
    auto = llama_magnet.infill(text, max_new_tokens=6)
    assert auto == llama_magnet.infill(
        text, max_new_tokens=6, candidates=8, candidate_ranking="right", seed=0
    )
    assert auto.candidates and auto != llama_magnet.infill(
        text, max_new_tokens=6, candidates=8, candidate_ranking="total", seed=0
    )


def test_a_text_that_opens_with_its_gap_does_not_open_with_a_space(llama_magnet):
    from magnetsdk.infilling import InfillResult, without_opening_space

    tokenizer = llama_magnet.tokenizer
    ids = tokenizer(" A dog ran.", add_special_tokens=False)["input_ids"]
    spaced = InfillResult(text=" A dog ran. The cat sat.", spans=[" A dog ran."], span_ids=[ids])
    dropped = without_opening_space(spaced, ["", " The cat sat."], [""], tokenizer)
    assert dropped.text == "A dog ran. The cat sat." and dropped.spans == ["A dog ran."]
    assert dropped.span_ids == [tokenizer("A dog ran.", add_special_tokens=False)["input_ids"]]
    # Text (or a space the caller wrote) before the gap keeps the fill as it is.
    assert without_opening_space(spaced, ["Hi.", " The cat sat."], [""], tokenizer) is spaced
    assert without_opening_space(spaced, ["", " The cat sat."], [" "], tokenizer) is spaced
    for result in llama_magnet.infill(["[GAP] The cat sat.", "[GAP] A dog ran."], max_new_tokens=6):
        assert not result.text[:1].isspace() and result.text.startswith(result.spans[0])
