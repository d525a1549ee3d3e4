"""Inverse-cloze positives: sentences, passages, the mixture with pairs, the config, a tiny run."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from magnetsdk.train.config import PositiveSource, TrainConfig
from magnetsdk.train.data import DataError, Pair
from magnetsdk.train.ict import (
    ICTViews,
    MixedViews,
    context_around,
    mix_in_ict,
    repeats_for_share,
    split_sentences,
)
from magnetsdk.train.metrics import read_metrics
from magnetsdk.train.trainer import _Run
from magnetsdk.train.views import PairViews

PARAGRAPHS = [
    "The cat sat on the mat all day. It looked at the door and waited. Nobody came home before dark. "
    "At night it slept by the warm stove.",
    "Paris is the capital of France . It is a city of museums and old bridges . "
    "The river Seine runs through it from east to west .",
    "A single sentence is not a paragraph.",
]


def test_sentences_are_split_in_plain_and_wikitext_spacing():
    assert split_sentences(PARAGRAPHS[0]) == [
        "The cat sat on the mat all day.",
        "It looked at the door and waited.",
        "Nobody came home before dark.",
        "At night it slept by the warm stove.",
    ]
    assert len(split_sentences(PARAGRAPHS[1])) == 3
    assert split_sentences('He said "go home." Then he left. H. americanus is a lobster.') == [
        'He said "go home."',
        "Then he left.",
        "H. americanus is a lobster.",
    ]
    assert split_sentences("He left . <unk> stayed at home .") == ["He left .", "<unk> stayed at home ."]
    assert split_sentences("Too short. Ok.") == ["Too short. Ok."]  # a fragment joins the one before


def test_the_context_is_the_nearest_sentences_without_the_query():
    sentences = ["a b c.", "d e f.", "g h i.", "j k l.", "m n o."]
    assert context_around(sentences, 2, 6) == "d e f. j k l."  # one before, one after
    assert context_around(sentences, 2, 100) == "a b c. d e f. j k l. m n o."
    assert context_around(sentences, 0, 6) == "d e f. g h i."  # the first sentence: only after
    assert context_around(sentences, 4, 1) == "j k l."  # at least one sentence, whatever the budget


def test_every_sentence_of_every_paragraph_is_a_query_once():
    views = ICTViews(PARAGRAPHS, max_words=12)
    assert views.size == 7  # 4 + 3 sentences; the one-sentence text gives none
    anchors, positives, negatives = views.views(list(range(views.size)))
    assert negatives == [None] * 7
    assert Counter(anchors) == Counter(split_sentences(PARAGRAPHS[0]) + split_sentences(PARAGRAPHS[1]))
    for anchor, positive in zip(anchors, positives, strict=True):
        assert anchor not in positive and positive
    assert ICTViews(PARAGRAPHS, max_words=13).views([1]) == (  # 8 + 5 words
        ["It looked at the door and waited."],
        ["The cat sat on the mat all day. Nobody came home before dark."],
        [None],
    )
    assert views.views([1])[1] == ["The cat sat on the mat all day."]  # 12 words: the first only
    with pytest.raises(DataError, match="3 or more sentences"):
        ICTViews(["One sentence.", "Another one here."])


def test_repeats_give_the_share_with_the_fewest_items():
    assert repeats_for_share(100, 100, 0.5) == (1, 1)
    assert repeats_for_share(100, 300, 0.5) == (3, 1)
    assert repeats_for_share(300, 100, 0.25) == (1, 1)
    r_pairs, r_ict = repeats_for_share(3300, 7000, 0.3)
    assert abs(r_ict * 7000 / (r_pairs * 3300 + r_ict * 7000) - 0.3) <= 0.005


def test_mixed_views_read_both_sources_at_the_share():
    pairs = PairViews([Pair(f"anchor {i}", f"positive {i}", f"negative {i}") for i in range(21)])
    ict = ICTViews(PARAGRAPHS, max_words=12)  # 7 items
    mixed = MixedViews(pairs, ict, share=0.25)
    assert mixed.repeats == (1, 1) and mixed.size == 28 and mixed.share == 0.25
    anchors, positives, negatives = mixed.views([0, 21, 20, 27])
    assert anchors[0] == "anchor 0" and negatives[0] == "negative 0"
    assert anchors[1] == split_sentences(PARAGRAPHS[0])[0] and negatives[1] is None
    assert anchors[2] == "anchor 20" and anchors[3] == split_sentences(PARAGRAPHS[1])[2]
    assert mixed.name == "pairs+ict"
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        MixedViews(pairs, ict, share=1.0)


def test_config_accepts_ict_and_checks_the_share(tmp_path):
    assert TrainConfig(data=["a.txt"], positives="ict").positives is PositiveSource.ICT
    with pytest.raises(ValueError, match="ict_share=1.5 must be between 0 and 1"):
        TrainConfig(data=["a.txt"], pairs=["p.jsonl"], ict_share=1.5)
    pairs = PairViews([Pair("a", "b")] * 4)
    shared = TrainConfig(data=["a.txt"], pairs=["p.jsonl"], ict_share=0.5, sscl_max_length=32)
    mixed = mix_in_ict(pairs, PARAGRAPHS, shared)
    assert isinstance(mixed, MixedViews) and mixed.extra.max_words == 15  # (32 - 12) * 3 // 4
    assert mix_in_ict(pairs, PARAGRAPHS, TrainConfig(data=["a.txt"], pairs=["p.jsonl"])) is pairs
    alone = TrainConfig(data=["a.txt"], positives="ict", ict_share=0.5)
    with pytest.raises(ValueError, match="positives='ict' with ict_share=0"):
        mix_in_ict(pairs, PARAGRAPHS, alone)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(
    ("setting", "views"),
    [({"positives": "ict"}, ICTViews), ({"positives": "pairs", "ict_share": 0.5}, MixedViews)],
)
def test_a_tiny_run_trains_on_inverse_cloze_positives(tmp_path, base_dir, setting, views):
    text = tmp_path / "text.txt"
    text.write_text("\n".join(PARAGRAPHS * 3) + "\n", encoding="utf-8")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(
            json.dumps({"anchor": f"A dog number {i}.", "positive": f"A dog {i}."}) + "\n" for i in range(8)
        ),
        encoding="utf-8",
    )
    config = TrainConfig(
        base_model=base_dir,
        data=[str(text)],
        pairs=[str(pairs)],
        output_dir=str(tmp_path / "run"),
        max_steps=2,
        batch_size=4,
        max_length=32,
        sscl_max_length=48,
        warmup_steps=1,
        progress=False,
        mntp_weight=0.0,
        msg_weight=0.0,
        **setting,
    )
    run = _Run(config, None, None, resume=False)
    assert type(run.batches.views) is views
    if views is MixedViews:
        assert run.batches.views.share == pytest.approx(0.5, abs=0.005)
    result = run.run()
    records = read_metrics(result.metrics_path)
    assert len(records) == 2 and all(r["sscl"] is not None and r["sscl"] > 0 for r in records)
    saved = json.loads((result.output_dir / "magnet_config.json").read_text())
    assert saved["training"]["config"]["positives"] == setting["positives"]
    assert saved["training"]["config"]["ict_share"] == setting.get("ict_share", 0.0)
