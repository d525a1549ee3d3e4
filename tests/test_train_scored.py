"""Scored pairs (``scored_pairs``): a supervised CoSENT term over graded similarity labels."""

from __future__ import annotations

import json
import math

import pytest
import torch
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.data import ScoredPair, read_scored_pairs, scored_draws, source_balanced
from magnetsdk.train.metrics import read_metrics
from magnetsdk.train.objectives import cosent
from magnetsdk.train.trainer import train

from magnetsdk import Magnet
from magnetsdk.records import DataError

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = [
    ("The cat sat on the mat.", "A cat was sitting on the mat.", 4.8),
    ("A dog runs in the park.", "A dog is running in a park.", 4.2),
    ("Paris is the capital of France.", "France has many museums.", 2.0),
    ("Stocks rose after the bank cut rates.", "She sells sea shells by the shore.", 0.2),
]


def write_scored(path, pairs=PAIRS, sources=None) -> str:
    rows = [{"text1": a, "text2": b, "score": s} for a, b, s in pairs]
    for row, source in zip(rows, sources or [], strict=False):
        row["source"] = source
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_cosent_matches_the_formula_by_hand():
    cos = torch.tensor([0.9, 0.2, 0.5])
    scores = torch.tensor([3.0, 1.0, 2.0])
    scale = 20.0
    # Ordered pairs (i above j): (0, 1), (0, 2), (2, 1); each adds exp(scale * (cos_j - cos_i)).
    expected = math.log(
        1 + math.exp(scale * (0.2 - 0.9)) + math.exp(scale * (0.5 - 0.9)) + math.exp(scale * (0.2 - 0.5))
    )
    assert float(cosent(cos, scores, scale)) == pytest.approx(expected, rel=1e-4)  # float32


def test_cosent_rewards_the_gold_order_and_reads_only_the_order_of_scores():
    scores = torch.tensor([0.5, 2.5, 4.0, 5.0])
    ordered = torch.tensor([0.1, 0.4, 0.7, 0.9])
    reversed_ = ordered.flip(0)
    assert float(cosent(ordered, scores, 20.0)) < 0.05 < 10 < float(cosent(reversed_, scores, 20.0))
    # Any increasing map of the labels leaves the loss unchanged.
    assert float(cosent(reversed_, scores * 10 - 3, 20.0)) == pytest.approx(
        float(cosent(reversed_, scores, 20.0))
    )
    # Equal scores are not compared: the loss is log(1) = 0.
    assert float(cosent(reversed_, torch.full((4,), 3.0), 20.0)) == 0.0


def test_cosent_gradient_pushes_a_misordered_pair_apart():
    cos = torch.tensor([0.2, 0.8], requires_grad=True)
    cosent(cos, torch.tensor([5.0, 0.0]), 20.0).backward()
    assert cos.grad[0] < 0 < cos.grad[1]  # descending raises the higher-scored pair's cosine


def test_scored_pairs_are_read_from_jsonl_and_tsv(tmp_path):
    jsonl = write_scored(tmp_path / "s.jsonl", PAIRS[:2])
    tsv = tmp_path / "s.tsv"
    tsv.write_text("text1\ttext2\tscore\nOne text.\tAnother text.\t1.5\n")
    found = read_scored_pairs([jsonl, str(tsv)])
    assert found == [
        ScoredPair(*PAIRS[0]),
        ScoredPair(*PAIRS[1]),
        ScoredPair("One text.", "Another text.", 1.5),
    ]


@pytest.mark.parametrize("score", ["high", None, "nan", True])
def test_a_score_that_is_not_a_number_names_its_line(tmp_path, score):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"text1": "a", "text2": "b", "score": 1.0})
        + "\n"
        + json.dumps({"text1": "c", "text2": "d", "score": score})
        + "\n"
    )
    with pytest.raises(DataError, match=r"bad.jsonl:2: score .* is not a number"):
        read_scored_pairs([str(path)])


def test_a_pair_s_source_is_read_when_given(tmp_path):
    path = write_scored(tmp_path / "s.jsonl", PAIRS[:3], sources=["captions", "", None])
    assert [p.source for p in read_scored_pairs([path])] == ["captions", None, None]


def test_source_balanced_draws_follow_the_power_of_each_source_s_count():
    sources = ["big"] * 60 + ["mid"] * 30 + ["small"] * 10
    assert source_balanced(sources, 1.0) == list(range(100))  # the items' own proportions
    for power, shares in ((0.0, (1, 1, 1)), (0.5, (60**0.5, 30**0.5, 10**0.5))):
        drawn = source_balanced(sources, power)
        counts = [sum(sources[i] == name for i in drawn) for name in ("big", "mid", "small")]
        assert counts[0] == 60  # the largest source is drawn once per item
        for count, share in zip(counts, shares, strict=True):
            assert count == pytest.approx(60 * share / shares[0], abs=1)
        # Each source's items are cycled in turn: every item drawn, none more than once above the rest.
        for name in ("mid", "small"):
            per_item = [drawn.count(i) for i, s in enumerate(sources) if s == name]
            assert min(per_item) >= 1 and max(per_item) - min(per_item) <= 1
    with pytest.raises(ValueError, match="power=-1"):
        source_balanced(sources, -1)


def test_scored_draws_balance_the_sources_only_when_asked():
    pairs = [ScoredPair(f"c{i}", f"d{i}", float(i % 5), "captions") for i in range(40)]
    pairs += [ScoredPair(f"f{i}", f"r{i}", float(i % 5), "forum") for i in range(8)]
    assert scored_draws(pairs, 1.0, ["s.jsonl"]) == list(range(48))
    drawn = scored_draws(pairs, 0.0, ["s.jsonl"])
    assert (
        sum(pairs[i].source == "forum" for i in drawn)
        == sum(pairs[i].source == "captions" for i in drawn)
        == 40
    )
    unsourced = [*pairs, ScoredPair("a", "b", 1.0)]
    assert scored_draws(unsourced, 1.0, ["s.jsonl"]) == list(range(49))  # no source needed unless balancing
    with pytest.raises(DataError, match=r"1 of the 49 pairs in \['s.jsonl'\] have no \"source\""):
        scored_draws(unsourced, 0.5, ["s.jsonl"])


def test_a_balanced_run_trains_its_scored_term(tmp_path, train_config, base_dir, data_file):
    scored = write_scored(tmp_path / "s.jsonl", sources=["captions", "captions", "news", "forum"])
    config = train_config(tmp_path, base_dir, data_file, scored_pairs=[scored], scored_source_power=0.0)
    assert all(r["scored"] is not None for r in read_metrics(train(config).metrics_path))


def test_balancing_pairs_without_a_source_says_what_to_give(tmp_path, train_config, base_dir, data_file):
    config = train_config(
        tmp_path,
        base_dir,
        data_file,
        scored_pairs=[write_scored(tmp_path / "s.jsonl")],
        scored_source_power=0.0,
    )
    with pytest.raises(DataError, match='4 of the 4 pairs .* have no "source"'):
        train(config)


def test_a_scored_pair_file_without_a_score_column_is_refused(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"text1": "a", "text2": "b"}) + "\n")
    with pytest.raises(DataError, match="missing \\['score'\\]"):
        read_scored_pairs([str(path)])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(scored_weight=-1.0), "scored_weight=-1.0 must be >= 0"),
        (dict(cosent_scale=0.0), "cosent_scale=0.0 must be > 0"),
        (dict(scored_batch_size=1), "scored_batch_size=1: CoSENT compares pairs"),
        (dict(scored_source_power=-0.5), "scored_source_power=-0.5 must be >= 0"),
    ],
)
def test_bad_scored_settings_are_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(data=["x.txt"], scored_pairs=[str(tmp_path / "s.jsonl")], **overrides)


def test_pairs_that_all_share_one_score_are_refused(tmp_path, train_config, base_dir, data_file):
    same = [(a, b, 3.0) for a, b, _ in PAIRS]
    config = train_config(
        tmp_path, base_dir, data_file, scored_pairs=[write_scored(tmp_path / "s.jsonl", same)]
    )
    with pytest.raises(DataError, match="the same score"):
        train(config)


def served_and_trained_losses(model_dir, pairs=PAIRS) -> tuple[float, float]:
    """CoSENT of the served encoder's cosines (``Magnet.encode``), and of the training pass's, on ``pairs``."""
    from magnetsdk.train.collate import collate_scored
    from magnetsdk.train.objectives import MagnetObjectives

    from magnetsdk.encoding import pad_id

    magnet = Magnet.from_pretrained(model_dir)
    a = magnet.encode([p[0] for p in pairs], show_progress=False)
    b = magnet.encode([p[1] for p in pairs], show_progress=False)
    scores = torch.tensor([p[2] for p in pairs])
    served = float(cosent(torch.from_numpy((a * b).sum(1)), scores, 20.0))
    batch = collate_scored(
        magnet.tokenizer,
        [ScoredPair(*p) for p in pairs],
        magnet.config.instruction,
        128,
        pad_id(magnet.tokenizer),
    )
    with torch.no_grad():
        trained = float(MagnetObjectives(magnet.model, "hybrid", 0.05)._scored_loss(batch))
    return served, trained


def test_scored_pairs_alone_with_no_room_after_the_instruction_are_refused(
    tmp_path, train_config, base_dir, data_file
):
    config = train_config(
        tmp_path,
        base_dir,
        data_file,
        scored_pairs=[write_scored(tmp_path / "s.jsonl")],
        sscl_max_length=8,  # the tiny tokenizer spends more than that on the instruction
        mntp_weight=0.0,
        sscl_weight=0.0,
        msg_weight=0.0,
    )
    with pytest.raises(ValueError, match="sscl_max_length=8 leaves almost no room"):
        train(config)


def test_training_on_scored_pairs_alone_orders_their_cosines(tmp_path, train_config, base_dir, data_file):
    scored = write_scored(tmp_path / "s.jsonl")
    config = train_config(
        tmp_path,
        base_dir,
        data_file,
        scored_pairs=[scored],
        scored_batch_size=4,
        sscl_max_length=128,  # the tiny tokenizer spends many tokens on the instruction: nothing truncated
        mntp_weight=0.0,
        sscl_weight=0.0,
        msg_weight=0.0,
        max_steps=20,
        save_every=20,
        learning_rate=5e-3,
        lora_dropout=0.0,
    )
    result = train(config)
    records = read_metrics(result.metrics_path)
    losses = [r["scored"] for r in records]
    assert all(r["mntp"] is None and r["msg"] is None and r["sscl"] is None for r in records)
    assert max(losses[-3:]) < 0.5 * losses[0], losses  # one fixed batch of 4 pairs: the loss must fall
    # The exported model encodes as it was trained (bidirectional, last token, the instruction).
    served, trained = served_and_trained_losses(result.output_dir)
    assert served == pytest.approx(trained, rel=1e-4)
    assert served < 0.6 * losses[0]


def test_scored_pairs_train_beside_the_magnet_objectives(tmp_path, train_config, base_dir, data_file):
    config = train_config(
        tmp_path, base_dir, data_file, scored_pairs=[write_scored(tmp_path / "s.jsonl")], scored_batch_size=2
    )
    records = read_metrics(train(config).metrics_path)
    for record in records:
        assert record["scored"] is not None and record["sscl"] is not None and record["msg"] is not None
        parts = record["mntp"] or 0.0, record["sscl"], record["msg"], record["scored"]
        assert record["loss"] == pytest.approx(sum(parts), rel=1e-5)  # every weight 1 (magnet recipe)


def test_without_scored_pairs_the_metrics_have_no_scored_column(tmp_path, train_config, base_dir, data_file):
    records = read_metrics(train(train_config(tmp_path, base_dir, data_file, max_steps=1)).metrics_path)
    assert "scored" not in records[0]
