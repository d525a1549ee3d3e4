"""scripts/two_readings_study.py: span words from one reading, span ends from the other."""

from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture
def study(repo_script):
    return repo_script("scripts/two_readings_study.py")


def test_the_stops_come_from_one_reading_and_the_words_share_the_rest_in_the_others_proportions(study):
    ends = torch.tensor([2.0, 0.0, 1.0, -1.0, 0.5])  # tokens 0 and 1 are the stops
    words = torch.tensor([-3.0, 1.0, 0.0, 2.0, 0.5])
    out = study.two_readings(ends, words, [0, 1])
    assert out.exp().sum().item() == pytest.approx(1.0)
    assert out[:2].exp().tolist() == pytest.approx(ends.double().softmax(-1)[:2].tolist())
    rest = words.double()[2:].softmax(-1) * (1 - ends.double().softmax(-1)[:2].sum())
    assert out[2:].exp().tolist() == pytest.approx(rest.tolist())


def test_the_study_scores_the_same_span_tokens_and_fills_every_item(study, llama_magnet, tmp_path):
    items = tmp_path / "items.jsonl"
    rows = [
        {"left": "The cat sat", "span": " on the mat", "right": " and slept."},
        {"left": "A dog ran", "span": " in the park", "right": " all day."},
    ]
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = study.study(llama_magnet, items, max_new_tokens=4)
    spans = sum(len(llama_magnet.tokenizer(r["span"], add_special_tokens=False)["input_ids"]) for r in rows)
    assert result["items"] == 2 and result["span_tokens"] == spans
    assert result["ppl_two_readings"] > 1.0
    assert [len(f["generated"]) > 0 for f in result["fills"]] == [True, True]
