"""STS files in three formats, and the STS score of a tiny model computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from magnetsdk.eval.encoder import MagnetEncoder
from magnetsdk.eval.sts import StsFormat, detect_format, evaluate_sts, read_sts, spearman

STSB = (
    "main-captions\tMSRvid\t2012test\t0000\t5.000\tA man is dancing.\tA man dances.\n"
    'main-news\theadlines\t2013\t0001\t1.500\tShe said "no" twice.\tStocks rose.\tsrc-a\tsrc-b\n'
    "main-forums\tanswers\t2015\t0002\t0.000\tThe cat sat on the mat.\tRain fell all night.\n"
)
SICK = (
    "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    "1\tA dog runs.\tA dog is running.\t4.5\tENTAILMENT\n"
    "2\tA cat sleeps.\tThe market fell.\t1.2\tNEUTRAL\n"
)
TSV = "A dog runs.\tA dog is running.\t4.5\nA cat sleeps.\tThe market fell.\t1.2\n"


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_stsb_sick_and_tsv(tmp_path):
    stsb = read_sts(write(tmp_path, "sts-dev.csv", STSB))
    assert stsb.name == "sts-dev" and stsb.scores == [5.0, 1.5, 0.0]
    assert stsb.sentences1[1] == 'She said "no" twice.' and stsb.sentences2[1] == "Stocks rose."
    sick = read_sts(write(tmp_path, "sick.txt", SICK))
    assert sick.sentences1 == ["A dog runs.", "A cat sleeps."] and sick.scores == [4.5, 1.2]
    tsv = read_sts(write(tmp_path, "pairs.tsv", TSV))
    assert tsv.sentences2 == ["A dog is running.", "The market fell."]
    with_header = read_sts(write(tmp_path, "h.tsv", "s1\ts2\tscore\n" + TSV))
    assert with_header.scores == [4.5, 1.2]
    assert len(read_sts(write(tmp_path, "x.csv", STSB), StsFormat.STSB, limit=2)) == 2


def test_format_errors_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="pass --data-format"):
        detect_format("just one column")
    with pytest.raises(ValueError, match=r"bad.tsv:2: the score 'high' is not a number"):
        read_sts(write(tmp_path, "bad.tsv", "a\tb\t1\nc\td\thigh\n"))
    with pytest.raises(ValueError, match="needs at least 7"):
        read_sts(write(tmp_path, "short.csv", TSV), fmt="stsb")
    with pytest.raises(ValueError, match="at least 2"):
        read_sts(write(tmp_path, "one.tsv", "a\tb\t1\n"))


def test_sts_score_of_a_tiny_model_equals_the_hand_computation(tmp_path):
    from magnetsdk.testing import tiny_magnet

    magnet = tiny_magnet("qwen2")
    files = [write(tmp_path, "sts-dev.csv", STSB), write(tmp_path, "sick.txt", SICK)]
    result = evaluate_sts(MagnetEncoder(magnet, pooling="mean"), files, show_progress=False)
    pairs = read_sts(files[0])
    a = magnet.encode(pairs.sentences1, pooling="mean")
    b = magnet.encode(pairs.sentences2, pooling="mean")
    expected = 100 * spearman(pairs.scores, (a * b).sum(axis=1))
    assert result.figures["sts-dev.spearman"] == pytest.approx(expected, abs=1e-6)
    assert [r[0] for r in result.rows] == ["sts-dev", "sick", "avg"]
    assert result.figures["avg.spearman"] == pytest.approx(
        np.mean([result.figures["sts-dev.spearman"], result.figures["sick.spearman"]])
    )
    assert result.settings["pooling"] == "mean" and result.settings["attention"] == "bidirectional"
    assert len(result.data) == 2 and len(result.data[0]["sha256"]) == 64
