"""Reading text and pair files, tokenizing long and short texts, and the data order."""

from __future__ import annotations

import json

import pytest
from magnetsdk.train.data import DataError, Order, Pair, read_pairs, read_texts, tokenize_texts

from magnetsdk.testing import tiny_tokenizer


def test_text_files_of_every_kind(tmp_path):
    (tmp_path / "a.txt").write_text("first line\n\n  second line  \n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "from jsonl", "id": 1}) + "\n\n")
    (tmp_path / "c.csv").write_text('id,text\n1,"from csv, with a comma"\n')
    (tmp_path / "d.tsv").write_text("text\tlabel\nfrom tsv\tx\n")
    names = [str(tmp_path / n) for n in ("a.txt", "b.jsonl", "c.csv", "d.tsv")]
    assert read_texts(names) == [
        "first line",
        "second line",
        "from jsonl",
        "from csv, with a comma",
        "from tsv",
    ]


def test_text_field_and_bad_files(tmp_path):
    (tmp_path / "b.jsonl").write_text(json.dumps({"body": "x"}) + "\n")
    assert read_texts([str(tmp_path / "b.jsonl")], text_field="body") == ["x"]
    with pytest.raises(DataError, match=r"b.jsonl:1: missing \['text'\]"):
        read_texts([str(tmp_path / "b.jsonl")])
    with pytest.raises(DataError, match="not found"):
        read_texts([str(tmp_path / "nope.txt")])
    (tmp_path / "x.parquet").write_text("")
    with pytest.raises(DataError, match="unsupported type '.parquet'"):
        read_texts([str(tmp_path / "x.parquet")])
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(DataError, match="broken.jsonl:1: not valid JSON"):
        read_texts([str(tmp_path / "broken.jsonl")])


def test_pairs_jsonl_and_tsv(tmp_path):
    (tmp_path / "p.jsonl").write_text(
        json.dumps({"anchor": "a", "positive": "b", "negative": "c"})
        + "\n"
        + json.dumps({"anchor": "d", "positive": "e"})
    )
    (tmp_path / "p.tsv").write_text("anchor\tpositive\nf\tg\n")
    pairs = read_pairs([str(tmp_path / "p.jsonl"), str(tmp_path / "p.tsv")])
    assert pairs == [Pair("a", "b", "c"), Pair("d", "e", None), Pair("f", "g", None)]


def test_pairs_with_missing_columns_say_which(tmp_path):
    (tmp_path / "p.jsonl").write_text(
        json.dumps({"anchor": "a", "positive": "b"}) + "\n" + json.dumps({"anchor": "x"})
    )
    with pytest.raises(DataError, match=r"p.jsonl:2: missing \['positive'\]"):
        read_pairs([str(tmp_path / "p.jsonl")])
    (tmp_path / "p.tsv").write_text("sentence1\tsentence2\na\tb\n")
    with pytest.raises(DataError, match=r"no 'anchor' or 'positive' column"):
        read_pairs([str(tmp_path / "p.tsv")])
    (tmp_path / "short.tsv").write_text("anchor\tpositive\nonly-one-column\n")
    with pytest.raises(DataError, match="short.tsv:2: fewer columns"):
        read_pairs([str(tmp_path / "short.tsv")])


def test_long_texts_are_split_and_short_ones_dropped():
    tokenizer = tiny_tokenizer()
    long_text = " ".join(["the cat sat on the mat"] * 20)
    result = tokenize_texts(tokenizer, [long_text, "a", "the dog runs in the park"], budget=16)
    assert result.split == 1
    assert all(4 <= len(ids) <= 16 for ids in result.ids)
    joined = [t for ids, src in zip(result.ids, result.texts, strict=True) if src == long_text for t in ids]
    full = tokenizer(long_text, add_special_tokens=False)["input_ids"]
    assert full[: len(joined)] == joined  # consecutive pieces, in order (a short tail may be dropped)
    assert result.dropped >= 1  # "a" is too short


def test_order_is_a_permutation_per_epoch_and_reproducible():
    order = Order(10, seed=3)
    first = order.items(range(0, 10))
    assert sorted(first) == list(range(10))
    assert sorted(order.items(range(10, 20))) == list(range(10))
    assert Order(10, seed=3).items(range(5, 15)) == order.items(range(5, 15))
    assert Order(10, seed=4).items(range(10)) != first
