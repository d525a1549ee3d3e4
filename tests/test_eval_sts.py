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


STSB_SOURCES = "".join(
    f"main-news\t{source}\t2012\t{i:04d}\t{score}\t{a}\t{b}\n"
    for i, (source, score, a, b) in enumerate(
        [
            ("MSRpar", 4.0, "Stocks rose sharply today.", "Shares rose a lot today."),
            ("MSRpar", 1.0, "The bank cut rates.", "Rain fell all night."),
            ("MSRpar", 2.5, "The market fell.", "The markets dropped a little."),
            ("headlines", 5.0, "A man is dancing.", "A man dances."),
            ("headlines", 0.5, "The cat sat on the mat.", "Stocks rose."),
            ("headlines", 3.0, "A dog runs in the park.", "A dog is in the park."),
            ("headlines", 2.0, "Paris is big.", "France is big."),
            ("tiny", 1.0, "One pair.", "Only two pairs."),
            ("tiny", 2.0, "Too few.", "To score."),
        ]
    )
)


def test_an_stsb_file_is_also_scored_per_source(tmp_path):
    from magnetsdk.testing import tiny_magnet

    magnet = tiny_magnet("llama")
    path = write(tmp_path, "held.csv", STSB_SOURCES)
    result = evaluate_sts(MagnetEncoder(magnet, pooling="mean"), [path], show_progress=False)
    pairs = read_sts(path)
    assert pairs.sources[:3] == ["MSRpar"] * 3
    cosines = (
        magnet.encode(pairs.sentences1, pooling="mean") * magnet.encode(pairs.sentences2, pooling="mean")
    ).sum(1)
    for source, rows in (("MSRpar", slice(0, 3)), ("headlines", slice(3, 7))):
        expected = 100 * spearman(pairs.scores[rows], cosines[rows])
        assert result.figures[f"held[{source}].spearman"] == pytest.approx(expected, abs=1e-6)
    assert "held[tiny].spearman" not in result.figures  # 2 pairs: too few to score
    assert [r[0] for r in result.rows] == ["held", "held[MSRpar]", "held[headlines]"]
    assert read_sts(write(tmp_path, "p.tsv", TSV)).sources == []  # only the STS-B format names sources
