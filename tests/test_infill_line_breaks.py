"""Magnet.infill(line_breaks=...): a gap inside a line is filled within that line unless allowed."""

from __future__ import annotations

import json

import pytest

from magnetsdk.eval.infill import evaluate_infill
from magnetsdk.infilling import line_break_ids, may_break_lines
from magnetsdk.testing import tiny_magnet


@pytest.fixture
def breaking_magnet():
    """A tiny model whose LM head strongly prefers tokens holding a line break."""
    magnet = tiny_magnet("llama")
    breaks = sorted(line_break_ids(magnet.tokenizer))

    def prefer_breaks(module, inputs, output):
        output[..., breaks] += 50.0
        return output

    magnet.model.get_output_embeddings().register_forward_hook(prefer_breaks)
    return magnet


def has_break(text: str) -> bool:
    return "\n" in text or "\r" in text


def test_line_break_ids_are_exactly_the_tokens_that_decode_to_a_break(llama_magnet):
    tokenizer = llama_magnet.tokenizer
    found = line_break_ids(tokenizer)
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
    assert set(newline) <= found
    for i in range(len(tokenizer)):
        if i in tokenizer.all_special_ids:
            assert i not in found
        else:
            assert (i in found) == has_break(tokenizer.decode([i]))


def test_auto_keeps_a_one_line_fill_on_its_line(breaking_magnet):
    text = "The cat [GAP] on the mat."
    allowed = breaking_magnet.infill(text, max_new_tokens=4, line_breaks="allow")
    assert has_break(allowed.spans[0])  # the hook works: left alone, the model breaks the line
    for rule in ("auto", "forbid"):
        kept = breaking_magnet.infill(text, max_new_tokens=4, line_breaks=rule)
        assert kept.spans[0].strip() and not has_break(kept.spans[0])
    ranked = breaking_magnet.infill(text, max_new_tokens=4, candidates=3, seed=0)
    assert all(not has_break(c.spans[0]) for c in ranked.candidates)


def test_auto_allows_breaks_in_a_text_that_has_them_and_rows_follow_their_own_text(breaking_magnet):
    texts = ["The cat sat.\nThe dog [GAP] on the mat.", "The cat [GAP] on the mat.", "A [GAP] and [GAP] too."]
    filled = breaking_magnet.infill(texts, max_new_tokens=4, batch_size=3)
    assert has_break(filled[0].spans[0])
    assert not any(has_break(span) for result in filled[1:] for span in result.spans)
    forbidden = breaking_magnet.infill(texts[0], max_new_tokens=4, line_breaks="forbid")
    assert not has_break(forbidden.spans[0])


def test_eval_reports_the_share_of_fills_that_break_a_line(breaking_magnet, tmp_path):
    path = tmp_path / "items.jsonl"
    items = [
        {"left": "The cat", "span": " sat", "right": " on the mat."},
        {"left": "A dog", "span": " ran", "right": "."},
    ]
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    kept = evaluate_infill(breaking_magnet, path, generate=2, max_new_tokens=3, show_progress=False)
    free = evaluate_infill(
        breaking_magnet, path, generate=2, max_new_tokens=3, show_progress=False, line_breaks="allow"
    )
    assert kept.figures["line_break_rate"] == 0.0 and kept.settings["line_breaks"] == "auto"
    assert free.figures["line_break_rate"] == 1.0
    # The rule changes what is decoded, never what is scored.
    assert kept.figures["ppl_both_sides"] == free.figures["ppl_both_sides"]


def test_an_unknown_rule_is_refused_with_the_choices(llama_magnet):
    with pytest.raises(ValueError, match=r"line_breaks='never'.*'auto', 'allow', 'forbid'"):
        llama_magnet.infill("The cat [GAP].", line_breaks="never")
    assert may_break_lines("a\nb", "auto") and not may_break_lines("a b", "auto")
