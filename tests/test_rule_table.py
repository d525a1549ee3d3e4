"""benchmarks/rule_table.py: the rule tables of the recorded training phases, from their result files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def verdicts(rows: list[str]) -> dict[str, str]:
    return {row[:32].strip(): row.rsplit(" ", 1)[-1] for row in rows}


def phase_folder(tmp_path: Path, phase: str, results: dict[str, dict]) -> Path:
    """A results folder ``pNN-2027-01-01`` holding ``pNN-TASK.json`` with each task's figures."""
    folder = tmp_path / f"{phase}-2027-01-01"
    folder.mkdir()
    for task, figures in results.items():
        (folder / f"{phase}-{task}.json").write_text(json.dumps({"figures": figures}))
    return folder


def sts_figures(dev: float, even_rows: float) -> dict[str, dict]:
    """The STS-B dev and held-out even-row results of a phase, for ``phase_folder``."""
    pairs = (("sts-dev", dev), ("sts-heldout-select", even_rows))
    return {task: {f"{task}.spearman": value} for task, value in pairs}


def dev_fills(copies: int, closed: int, gold_f1: float, both_over_left: float) -> dict[str, float]:
    """The infill-dev-all figures the rules of phases 34 on read: counts of 149 fills, the share,
    and another item's right side 1.07x worse."""
    return {
        "copy_rate": copies / 149,
        "closed_rate": closed / 149,
        "gold_f1": gold_f1,
        "both_over_left": both_over_left,
        "shuffled_over_both[spm]": 1.07,
    }


@pytest.fixture
def rule_table(repo_script):
    return repo_script("benchmarks/rule_table.py")


def test_the_recorded_phases_read_as_their_outcomes_say(rule_table):
    phase14 = verdicts(rule_table.table(ROOT / "benchmarks/results/p14-2026-12-04"))
    assert len(phase14) == 12 and set(phase14.values()) == {"holds"}  # every item held, not shipped
    phase18 = verdicts(rule_table.table(ROOT / "benchmarks/results/p18-2026-12-05"))
    assert phase18["infill dev-all closed"] == "FAILS" and phase18["infill dev-all word F1"] == "FAILS"
    assert list(phase18.values()).count("FAILS") == 2
    phase11 = rule_table.table(ROOT / "benchmarks/results/p11-2026-12-03")
    assert len(phase11) == 9 and all(" p10 " in row for row in phase11)


def test_a_phase_without_its_files_prints_not_yet_and_a_bad_folder_is_refused(tmp_path, rule_table):
    folder = phase_folder(tmp_path, "p31", {"lm": {"ppl": 30.0}})
    rows = rule_table.table(folder)
    assert rows[0].endswith("(not yet)") and sum(row.endswith("(not yet)") for row in rows) == len(rows) - 1
    assert [row for row in rows if row.startswith("perplexity")][0].endswith("<= 22.26: FAILS")
    with pytest.raises(SystemExit, match="pNN-DATE"):
        rule_table.table(tmp_path)
    with pytest.raises(SystemExit, match="no rule table"):
        rule_table.table(tmp_path / "p12-2026-12-04")


def test_phase_27_holds_every_item_and_later_phases_must_narrow_the_sts_gap(tmp_path, rule_table):
    phase27 = verdicts(rule_table.table(ROOT / "benchmarks/results/p27-2026-12-06"))
    assert len(phase27) == 14 and set(phase27.values()) == {"holds"}  # shipped 2026-12-06
    folder = phase_folder(tmp_path, "p28", sts_figures(85.0, 80.0))
    rows = verdicts(rule_table.table(folder))
    assert rows["STS-B dev - held-out even rows"] == "holds"  # 5.0 <= 5.19
    (folder / "p28-sts-heldout-select.json").write_text(
        json.dumps({"figures": {"sts-heldout-select.spearman": 79.5}})
    )
    assert verdicts(rule_table.table(folder))["STS-B dev - held-out even rows"] == "FAILS"  # 5.5
    phase29 = verdicts(rule_table.table(ROOT / "benchmarks/results/p29-2026-12-07"))
    assert [item for item, verdict in phase29.items() if verdict == "FAILS"] == [
        "STS-B dev - held-out even rows"
    ]


def test_phase_30_s_held_out_rows_must_rise_and_phase_31_s_right_side_must_help_more(tmp_path, rule_table):
    folder = phase_folder(tmp_path, "p30", sts_figures(84.9, 79.5))
    rows = verdicts(rule_table.table(folder))
    assert rows["held-out even rows"] == "FAILS"  # 79.5 < 79.52
    assert rows["STS-B dev - held-out even rows"] == "holds"  # 5.4 <= 5.44
    phase30 = verdicts(rule_table.table(ROOT / "benchmarks/results/p30-2026-12-07"))
    assert sorted(item for item, verdict in phase30.items() if verdict == "FAILS") == [
        "STS-B dev - held-out even rows",
        "infill dev-all both/left",
    ]
    fills = {"both_over_left": 0.93, "closed_rate": 0.4, "gold_f1": 0.2, "copy_rate": 0.1}
    folder = phase_folder(tmp_path, "p31", {"infill-dev-all": fills})
    rows = verdicts(rule_table.table(folder))
    assert rows["infill dev-all both/left"] == "FAILS" and "STS-B dev - held-out even rows" not in rows


def test_phase_32_asks_for_fills_that_close_at_a_bounded_cost_to_the_right_side(tmp_path, rule_table):
    figures = {
        "both_over_left": 0.94,  # within the 0.944 allowed
        "shuffled_over_both[spm]": 1.04,  # under the 1.05 the issue asks
        "closed_rate": 74 / 149,  # one short of 75
        "gold_f1": 0.21,
        "copy_rate": 25 / 149,  # phase 27's count: allowed
    }
    folder = phase_folder(tmp_path, "p32", {"infill-dev-all": figures, **sts_figures(84.9, 79.4)})
    rows = verdicts(rule_table.table(folder))
    assert rows["infill dev-all both/left"] == "holds"
    assert rows["infill dev-all shuffled/both"] == "FAILS"
    assert rows["infill dev-all closed"] == "FAILS"
    assert rows["infill dev-all copies"] == "holds"
    assert rows["STS-B dev - held-out even rows"] == "FAILS"  # 5.5 > 5.44


def test_phase_33_is_judged_against_phase_32_and_needs_both_sides_no_worse(tmp_path, rule_table):
    # A better ratio reached by a worse left-only reading: both sides rose, so it fails.
    figures = {
        "both_over_left": 0.925,
        "ppl_both_sides": 16.2,
        "shuffled_over_both[spm]": 1.07,
        "closed_rate": 0.55,
        "gold_f1": 0.21,
        "copy_rate": 0.15,
    }
    folder = phase_folder(tmp_path, "p33", {"infill-dev-all": figures})
    rows = rule_table.table(folder)
    found = verdicts(rows)
    assert found["infill dev-all both/left"] == "holds"
    assert found["infill dev-all both sides"] == "FAILS"
    assert any(row.startswith("infill dev-all both sides") and " p32 " in row for row in rows)


def test_phase_32_holds_every_item_and_phase_33_fails_its_two(rule_table):
    phase32 = verdicts(rule_table.table(ROOT / "benchmarks/results/p32-2026-12-07"))
    assert len(phase32) == 16 and set(phase32.values()) == {"holds"}
    phase33 = verdicts(rule_table.table(ROOT / "benchmarks/results/p33-2026-12-07"))
    assert sorted(item for item, verdict in phase33.items() if verdict == "FAILS") == [
        "infill dev-all both sides",
        "infill dev-all both/left",
    ]


def test_phase_34_asks_for_the_issues_copy_rate_with_respellings_and_word_f1_kept(tmp_path, rule_table):
    # Copies at 14 of 149 (the issue's 10 %), but two more fills respell a name and F1 fell 0.006.
    figures = dev_fills(copies=14, closed=78, gold_f1=0.2034, both_over_left=0.94)
    folder = phase_folder(tmp_path, "p34", {"infill-dev-all": figures, "respelt-dev-all": {"respelt": 4}})
    rows = rule_table.table(folder)
    found = verdicts(rows)
    assert found["infill dev-all copies"] == "holds"
    assert found["infill dev-all closed"] == "holds"
    assert found["infill dev-all both/left"] == "holds"  # within phase 32's 0.9372 + 0.005
    assert found["infill dev-all word F1"] == "FAILS"
    assert found["infill dev-all respelt fills"] == "FAILS"
    assert any(row.startswith("infill dev-all respelt fills") and " p32 " in row for row in rows)


def test_phase_34_fails_only_its_copies_and_phase_35_holds_every_item(rule_table):
    phase34 = verdicts(rule_table.table(ROOT / "benchmarks/results/p34-2026-12-07"))
    assert [item for item, verdict in phase34.items() if verdict == "FAILS"] == ["infill dev-all copies"]
    phase35 = verdicts(rule_table.table(ROOT / "benchmarks/results/p35-2026-12-07"))
    assert len(phase35) == 17 and set(phase35.values()) == {"holds"}


def test_phase_36_asks_for_the_share_against_phase_35_with_its_fills_kept(tmp_path, rule_table):
    # The share 0.011 past phase 35's, but the copies back at phase 32's 24 of 149.
    figures = dev_fills(copies=24, closed=80, gold_f1=0.2125, both_over_left=0.9307)
    folder = phase_folder(tmp_path, "p36", {"infill-dev-all": figures, "respelt-dev-all": {"respelt": 2}})
    rows = rule_table.table(folder)
    found = verdicts(rows)
    assert found["infill dev-all both/left"] == "holds"
    assert found["infill dev-all respelt fills"] == "holds"
    assert found["infill dev-all copies"] == "FAILS"
    assert any(row.startswith("infill dev-all both/left") and " p35 " in row for row in rows)


def test_phase_36_fails_only_the_share_it_asked_for(rule_table):
    phase36 = verdicts(rule_table.table(ROOT / "benchmarks/results/p36-2026-12-07"))
    assert [item for item, verdict in phase36.items() if verdict == "FAILS"] == ["infill dev-all both/left"]


def test_phase_37_asks_for_fewer_looping_fills_with_phase_35s_fills_and_share_kept(tmp_path, rule_table):
    figures = dev_fills(copies=13, closed=90, gold_f1=0.2125, both_over_left=0.9470)
    results = {"infill-dev-all": figures, "respelt-dev-all": {"respelt": 0}, "loops-dev-all": {"loops": 61}}
    found = verdicts(rule_table.table(phase_folder(tmp_path, "p37", results)))
    assert found["infill dev-all looping fills"] == "holds"
    assert found["infill dev-all both/left"] == "FAILS"  # 0.0053 worse than phase 35's 0.9417
    assert found["infill dev-all copies"] == "holds" and found["infill dev-all closed"] == "holds"
    results["loops-dev-all"] = {"loops": 62}
    (tmp_path / "again").mkdir()
    found = verdicts(rule_table.table(phase_folder(tmp_path / "again", "p37", results)))
    assert found["infill dev-all looping fills"] == "FAILS"


def test_phase_37_fails_its_loop_item_and_the_share(rule_table):
    phase37 = verdicts(rule_table.table(ROOT / "benchmarks/results/p37-2026-12-07"))
    failed = [item for item, verdict in phase37.items() if verdict == "FAILS"]
    assert failed == ["infill dev-all looping fills", "infill dev-all both/left"]


def test_phase_38_reads_the_shuffled_control_in_its_own_layout_and_allows_phase_35s_loops(
    tmp_path, rule_table
):
    figures = dev_fills(copies=13, closed=80, gold_f1=0.2125, both_over_left=0.9300)
    figures["shuffled_over_both[spm-joined]"] = figures.pop("shuffled_over_both[spm]")
    results = {"infill-dev-all": figures, "respelt-dev-all": {"respelt": 0}, "loops-dev-all": {"loops": 82}}
    rows = rule_table.table(phase_folder(tmp_path, "p38", results))
    found = verdicts(rows)
    assert found["infill dev-all looping fills"] == "holds" and found["infill dev-all both/left"] == "holds"
    assert found["infill dev-all shuffled/both"] == "holds"
    # Phase 35 was never read in spm-joined: its figure prints as "-".
    assert any(row.startswith("infill dev-all shuffled/both") and " p35        -  p38" in row for row in rows)
    figures["both_over_left"], results["loops-dev-all"] = 0.9318, {"loops": 83}
    (tmp_path / "again").mkdir()
    found = verdicts(rule_table.table(phase_folder(tmp_path / "again", "p38", results)))
    assert found["infill dev-all both/left"] == "FAILS" and found["infill dev-all looping fills"] == "FAILS"


def test_phase_39_is_read_by_phase_38s_items_with_the_control_in_spm_end(tmp_path, rule_table):
    figures = dev_fills(copies=13, closed=80, gold_f1=0.2125, both_over_left=0.9300)
    figures["shuffled_over_both[spm-end]"] = figures.pop("shuffled_over_both[spm]")
    results = {"infill-dev-all": figures, "respelt-dev-all": {"respelt": 0}, "loops-dev-all": {"loops": 82}}
    found = verdicts(rule_table.table(phase_folder(tmp_path, "p39", results)))
    assert found["infill dev-all shuffled/both"] == "holds" and found["infill dev-all both/left"] == "holds"
    assert rule_table.rule_for(39).items[:5] == rule_table.rule_for(38).items[:5]


def test_phase_40_reads_the_fills_the_share_and_a_perplexity_only_gap_s_logit_can_move(tmp_path, rule_table):
    figures = dev_fills(copies=13, closed=80, gold_f1=0.2125, both_over_left=0.9300)
    results = {
        "infill-dev-all": figures,
        "respelt-dev-all": {"respelt": 0},
        "loops-dev-all": {"loops": 82},
        "lm": {"ppl": 16.40},
    }
    found = verdicts(rule_table.table(phase_folder(tmp_path, "p40", results)))
    assert "STS-B dev" not in found and "STS-B dev - held-out even rows" not in found
    assert found["perplexity"] == "holds" and found["infill dev-all both/left"] == "holds"
    results["lm"] = {"ppl": 16.42}
    (tmp_path / "again").mkdir()
    found = verdicts(rule_table.table(phase_folder(tmp_path / "again", "p40", results)))
    assert found["perplexity"] == "FAILS"
