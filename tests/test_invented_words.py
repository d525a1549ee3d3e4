"""scripts/invented_words.py: the unseen and respelt word proxies read from stored fills."""

from __future__ import annotations

import pytest


def fill(generated: str, left: str = "The Downtown Historic District of Meridian", right: str = "") -> dict:
    return {"left": left, "right": right, "generated": generated}


@pytest.fixture
def words(repo_script):
    return repo_script("scripts/invented_words.py")


def test_a_name_spelt_another_way_is_respelt_but_a_rare_real_word_is_only_unseen(words):
    vocabulary = {"the", "historic", "district", "hike"}
    respelt = fill(" the Meridian Downthedown Historic District and Downdown")
    assert words.respelt_words(respelt, vocabulary) == {"downthedown", "downdown"}
    rare = fill(" a long solstice hike")
    assert words.unseen_words(rare, vocabulary) == {"long", "solstice"}
    assert words.respelt_words(rare, vocabulary) == set()


def test_inflections_and_look_alikes_with_another_start_are_not_respellings(words):
    item = "the branches of the beach were late to locate"
    assert words.respelt_words(fill(" beaches and branch", left=item), set()) == set()  # inflections
    assert words.respelt_words(fill(" located", left=item), set()) == set()
    assert words.inflected("locate", "location") and not words.inflected("female", "femaleous")
    assert words.respelt_words(fill(" femaleous", left="three females"), set()) == {"femaleous"}


def test_counts_reads_every_fill(words):
    fills = [fill(" Downdown"), fill(" the district"), fill(" solstice")]
    found = words.counts(fills, {"the", "district"})
    assert (found["fills"], found["unseen"], found["respelt"]) == (3, 2, 1)
    assert found["respelt_examples"] == [["downdown"]]


def test_the_counts_of_one_result_are_written_for_the_rule_table(words, tmp_path):
    import json

    reference = tmp_path / "reference.txt"
    reference.write_text("the district\n")
    result = tmp_path / "p34-infill-dev-all.json"
    fills = [fill(" Downdown"), fill(" the district"), fill(" solstice")]
    result.write_text(json.dumps({"details": {"infills": {"spm": fills}}}))
    out = tmp_path / "p34-respelt-dev-all.json"
    words.main([str(result), "--reference", str(reference), "-o", str(out)])
    assert json.loads(out.read_text())["figures"] == {"respelt": 1, "unseen": 2, "fills": 3}
    with pytest.raises(SystemExit):  # one result only: the file holds one set of counts
        words.main([str(result), str(result), "--reference", str(reference), "-o", str(out)])
