"""Each evaluation metric on a hand-computed example."""

from __future__ import annotations

import math

import numpy as np
import pytest

from magnetsdk.eval.dependence import dependence
from magnetsdk.eval.probe import chunk_f1, iob_chunks, is_iob
from magnetsdk.eval.repetition import ngram_repetition, sentence_repetition, split_sentences
from magnetsdk.eval.scoring import perplexity
from magnetsdk.eval.sts import pair_cosines, spearman


def test_spearman_of_a_known_ranking():
    # Rank differences d = (-1, 1, -1, 1, 0): rho = 1 - 6 * 4 / (5 * (25 - 1)) = 0.8.
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    # Ties get average ranks: y ranks (1, 2, 3.5, 5, 3.5); Pearson of the ranks by hand.
    x, y = np.array([1, 2, 3, 4, 5.0]), np.array([1, 2, 3.5, 5, 3.5])
    expected = ((x - 3) * (y - 3)).sum() / math.sqrt(((x - 3) ** 2).sum() * ((y - 3) ** 2).sum())
    assert spearman([10, 20, 30, 40, 50], [5, 6, 7, 8, 7]) == pytest.approx(expected)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_pair_cosines():
    a = np.array([[1.0, 0.0], [1.0, 1.0], [2.0, 0.0]])
    b = np.array([[0.0, 3.0], [2.0, 2.0], [-1.0, 0.0]])
    np.testing.assert_allclose(pair_cosines(a, b), [0.0, 1.0, -1.0], atol=1e-12)


def test_rep4_of_a_known_token_list():
    # 4-grams of 1 2 3 4 1 2 3 4: (1234) (2341) (3412) (4123) (1234): 4 unique of 5.
    assert ngram_repetition([1, 2, 3, 4, 1, 2, 3, 4], 4) == pytest.approx(0.2)
    assert ngram_repetition([7, 7, 7, 7, 7, 7], 4) == pytest.approx(1 - 1 / 3)
    assert ngram_repetition([1, 2, 3, 4, 5], 4) == 0.0
    assert ngram_repetition([1, 2, 3], 4) is None  # no 4-gram: left out of the average


def test_rep_sen_of_a_known_text():
    text = "The cat sat. The dog ran!\nThe cat sat. Why?"
    assert split_sentences(text) == ["The cat sat.", "The dog ran!", "The cat sat.", "Why?"]
    assert sentence_repetition(text) == pytest.approx(1 / 4)  # 4 sentences, 3 unique
    assert sentence_repetition("A. A. A.") == pytest.approx(2 / 3)
    assert sentence_repetition("   ") is None


def test_dependence_of_a_hand_made_attention_matrix():
    attention = np.array(
        [
            [0.5, 0.3, 0.2],
            [0.2, 0.6, 0.2],
            [0.1, 0.1, 0.8],
        ]
    )
    before, main, after = dependence(attention)
    assert before == pytest.approx((0 + 0.2 + 0.2) / 3)
    assert main == pytest.approx((0.5 + 0.6 + 0.8) / 3)
    assert after == pytest.approx((0.5 + 0.2 + 0) / 3)
    assert before + main + after == pytest.approx(1.0)
    causal = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    assert dependence(causal)[2] == 0.0
    with pytest.raises(ValueError, match="square"):
        dependence(np.ones((2, 3)))


def test_iob_chunks_and_entity_f1():
    assert iob_chunks(["B-PER", "I-PER", "O", "B-LOC"]) == {("PER", 0, 2), ("LOC", 3, 4)}
    # IOB1: an I- tag after O or after another type opens a chunk; B- splits adjacent chunks.
    assert iob_chunks(["I-ORG", "I-ORG", "I-PER", "B-PER", "O"]) == {
        ("ORG", 0, 2),
        ("PER", 2, 3),
        ("PER", 3, 4),
    }
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "B-MISC"]]
    # gold chunks: PER 0-2, LOC 3-4, ORG 0-1 (3); predicted: PER 0-1, LOC, ORG, MISC (4); correct: 2.
    scores = chunk_f1(gold, predicted)
    assert scores["precision"] == pytest.approx(50.0)
    assert scores["recall"] == pytest.approx(200 / 3)
    assert scores["f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3) * 100)
    assert is_iob(["B-NP", "I-NP", "O"]) and not is_iob(["NN", "VB"]) and not is_iob(["O", "O"])


def test_perplexity_is_token_weighted():
    nll = [np.array([1.0, 3.0]), np.array([2.0])]
    assert perplexity(nll) == pytest.approx(math.exp(2.0))
    with pytest.raises(ValueError, match="no tokens"):
        perplexity([np.zeros(0)])
