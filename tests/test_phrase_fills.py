"""scripts/phrase_fills.py: how stored fills of gaps inside a sentence read."""

from __future__ import annotations

import json

import pytest

from magnetsdk.eval.infill import word_f1


@pytest.fixture
def phrase_fills(repo_script):
    return repo_script("scripts/phrase_fills.py")


def fill(generated: str, gold: str = " the capital city") -> dict[str, str]:
    return {"left": "Paris is", "gold": gold, "generated": generated, "right": " of France . It is old ."}


def test_phrase_fills_count_sentence_ends_short_and_exact_fills(phrase_fills, tmp_path, capsys):
    fills = [
        fill(" the capital city"),
        fill(" a city . It is large and it is old and it is big"),
        fill(" the main city!"),
        fill(' a "capital" of the country'),
        fill(" the city Mr. Smith built"),
    ]
    found = phrase_fills.counts(fills, short=4)
    assert found["exact"] == 1 and found["fills"] == 5
    # " . It" and "!" at the end; the quotes end nothing, nor does the title "Mr." (sentence_ends)
    assert found["sentence_end"] == 2
    assert found["gold_sentence_end"] == 0
    assert found["short"] == 2 and found["copies"] == 0
    # word_f1 (tested with magnet eval infill) averaged over the fills; the exact fill scores 1.
    assert word_f1(" the capital city", " the capital city") == 1.0
    assert found["gold_f1"] == pytest.approx(sum(word_f1(f["generated"], f["gold"]) for f in fills) / 5)
    stored = tmp_path / "result.json"
    stored.write_text(json.dumps({"details": {"infills": {"spm": fills}}}))
    out = tmp_path / "figures.json"
    phrase_fills.main([str(stored), "--short", "4", "-o", str(out)])
    assert json.loads(out.read_text())["figures"]["exact"] == 1
    assert "a sentence end in 2 of 5" in capsys.readouterr().out
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(SystemExit):
        phrase_fills.main([str(tmp_path / "empty.json")])
