"""The data scripts: the held-out STS split never trains, documents end where articles end."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # pytest imports test files by path (--import-mode=importlib)
from test_train_gpu_script import tiny_shared  # noqa: E402


def test_prepared_data_keeps_the_heldout_sts_split_out_of_training(tmp_path):
    shared = tiny_shared(tmp_path / "shared")
    out = tmp_path / "data"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "prepare_training_data.py"),
            "--shared",
            str(shared),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    with open(shared / "stsb" / "sts-train.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    held = (out / "sts-heldout.csv").read_text().splitlines()
    assert held == ["\t".join(r) for i, r in enumerate(rows) if i % 6 == 0]  # rows 0, 6, 12, ...
    held_sentences = {s for i, r in enumerate(rows) if i % 6 == 0 for s in (r[5], r[6])}
    texts = set((out / "text.txt").read_text().splitlines())
    pairs = [json.loads(line) for line in (out / "snli_pairs.jsonl").read_text().splitlines()]
    documents = [json.loads(line)["text"] for line in (out / "documents.jsonl").read_text().splitlines()]
    trained = texts | {p[k] for p in pairs for k in ("anchor", "positive", "negative")} | set(documents)
    assert held_sentences and not held_sentences & trained
    assert any(r[5] in texts for i, r in enumerate(rows) if i % 6)  # the other rows' sentences do train
    # text.txt in two parts: WikiText paragraphs (running text) and single sentences, together all of it.
    wikitext = (out / "wikitext.txt").read_text().splitlines()
    sentences = (out / "sentences.txt").read_text().splitlines()
    assert wikitext and sentences and sorted(wikitext + sentences) == sorted(texts)
    assert all(r[5] not in wikitext for r in rows) and set(documents[0].split("\n")) & set(wikitext)
    # Scored pairs (supervised CoSENT): other rows' labels, no sentence of a held-out or dev row.
    dev_sentences = {s for r in rows[:20] for s in (r[5], r[6])}  # tiny_shared's dev: the first 20 rows
    scored = [json.loads(line) for line in (out / "sts_scored.jsonl").read_text().splitlines()]
    labelled = {(r[5], r[6]): (float(r[4]), r[1]) for i, r in enumerate(rows) if i % 6}
    assert scored and all(labelled[(p["text1"], p["text2"])] == (p["score"], p["source"]) for p in scored)
    assert not {p[k] for p in scored for k in ("text1", "text2")} & (held_sentences | dev_sentences)
    # One document per WikiText article after the held-out lines, paragraphs joined by line breaks.
    assert documents and all("\n" in d and not d.startswith("=") for d in documents)
    assert pairs and all(p["negative"] for p in pairs)
    assert len((out / "eval_prefixes.txt").read_text().splitlines()) > 0


def test_wikitext_becomes_plain_text_and_sentences_with_unk_are_dropped(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    from prepare_training_data import plain_wikitext

    tokenised = (
        " The game 's co @-@ leads , Emma ( born 1990 ) said \" it is n't 1 @,@ 000 \" . "
        "<unk> had signed . It cost 2 @.@ 5 % more ; fine : yes !"
    )
    assert (
        plain_wikitext(tokenised)
        == "The game's co-leads, Emma (born 1990) said \"it isn't 1,000\". It cost 2.5% more; fine: yes!"
    )
    assert plain_wikitext("Only <unk> here .") == ""

    shared = tiny_shared(tmp_path / "shared")
    wiki = shared / "wikitext2" / "wiki.valid.tokens"
    wiki.write_text(wiki.read_text() + " = Last = \n\n" + (tokenised + " The end of it , at last .\n") * 3)
    out = tmp_path / "data"
    script = str(ROOT / "scripts" / "prepare_training_data.py")
    subprocess.run([sys.executable, script, "--shared", str(shared), "--out", str(out)], check=True)
    documents = (out / "documents.jsonl").read_text()
    assert "The game's co-leads, Emma" in documents and "The end of it, at last." in documents
    assert "<unk>" not in documents and " @-@ " not in documents and " , " not in documents
    assert "The end of it, at last." in (out / "text.txt").read_text()


def test_sts_files_cut_to_their_common_sources_and_to_dev_s_mix(repo_script):
    script = repo_script("scripts/build_sts_common_sources.py")
    common_rows, sampled_to_mix, source = script.common_rows, script.sampled_to_mix, script.source

    def row(genre: str, i: int) -> str:
        return "\t".join(["main", genre, "2012", f"{i:04d}", "3.0", f"a {genre} {i}", f"b {genre} {i}"])

    dev = [row("news", i) for i in range(30)] + [row("captions", i) for i in range(10)] + [row("forum", 0)]
    heldout = [row("news", i) for i in range(12)] + [row("captions", i) for i in range(12)] + [row("deft", 0)]
    dev_common, held_common = common_rows(dev, heldout)
    assert {source(r) for r in dev_common} == {source(r) for r in held_common} == {"news", "captions"}
    assert len(dev_common) == 40 and len(held_common) == 24
    mixed = sampled_to_mix(held_common, Counter(source(r) for r in dev_common))
    # dev is 3 news to 1 caption; 12 held-out news rows allow 16 rows: 12 news, 4 captions spread out.
    assert [source(r) for r in mixed].count("news") == 12 and [r.split("\t")[3] for r in mixed[12:]] == [
        "0000",
        "0003",
        "0006",
        "0009",
    ]
    with pytest.raises(ValueError, match="share no source"):
        common_rows([row("forum", 0)], [row("deft", 0)])
    with pytest.raises(ValueError, match="7 tab-separated fields"):
        source("too\tshort")
