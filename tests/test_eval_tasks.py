"""The evaluation tasks on a tiny real model, checked against plain Hugging Face forward passes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from magnetsdk.attention import AttentionMode, allowed, backend_mask
from magnetsdk.copies import loops
from magnetsdk.eval import repetition as repetition_module
from magnetsdk.eval.dependence import averaged_attention, eager_attention, evaluate_dependence
from magnetsdk.eval.infill import (
    InfillItem,
    both_sides_sequence,
    copies_context,
    evaluate_infill,
    left_only_sequence,
    read_infill_items,
    stored_fills,
    tokenize_items,
)
from magnetsdk.eval.lm import evaluate_lm, windows
from magnetsdk.eval.probe import LinearProbe, evaluate_probe, read_conll
from magnetsdk.eval.repetition import cut_prefixes, evaluate_repetition, judge_logprobs
from magnetsdk.eval.scoring import ScoredSequence, target_nll
from magnetsdk.forward import attn_implementation
from magnetsdk.layout import infill_layout
from magnetsdk.testing import tiny_magnet
from magnetsdk.unclosed import ends_inside_a_sentence

ITEMS = [
    InfillItem("The cat sat on the mat.", " The dog runs in the park.", " Rain fell on the roof."),
    InfillItem("Paris is the capital", " of France", " and a city of museums."),
    InfillItem("She sells sea shells.", " Water boils at one hundred degrees.", ""),
]


@pytest.fixture(scope="module")
def base():
    """A tiny model with the config of an unadapted model (causal mean encoding)."""
    return tiny_magnet("llama", adapted=False)


def build_sequences(magnet, item, layout="magnet"):
    """The (both sides in ``layout``, left-only causal) sequences that score ``item.span``."""
    (tokens,) = tokenize_items(magnet, [item])
    return both_sides_sequence(magnet, tokens, infill_layout(layout)), left_only_sequence(magnet, tokens)


def hf_nll(model, ids: list[int], positions: list[int], targets: list[int], mask=None) -> np.ndarray:
    """Reference: the model's own forward (logits of every position), one sequence, no padding."""
    with torch.no_grad():
        kwargs = (
            {} if mask is None else {"attention_mask": mask, "position_ids": torch.arange(len(ids))[None]}
        )
        logits = model(input_ids=torch.tensor([ids]), **kwargs).logits[0].float()  # (n, V)
        nll = torch.nn.functional.cross_entropy(logits[positions], torch.tensor(targets), reduction="none")
    return nll.double().numpy()


def test_left_only_nll_is_the_plain_causal_loss_of_the_span(base):
    for item in ITEMS:
        _, causal = build_sequences(base, item)
        left = base.tokenizer(item.left, add_special_tokens=False)["input_ids"]
        span = base.tokenizer(item.span, add_special_tokens=False)["input_ids"]
        assert causal.input_ids == left + span and causal.targets == span
        expected = hf_nll(base.model, causal.input_ids, causal.target_positions, causal.targets)
        (got,) = target_nll(base.model, [causal], AttentionMode.CAUSAL, base._pad_id)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_both_sides_nll_uses_the_hybrid_layout_and_skips_end(base):
    for item in ITEMS:
        hybrid, causal = build_sequences(base, item)
        assert hybrid.targets == causal.targets  # same tokens, END excluded
        assert base.layout.end_id not in hybrid.targets
        assert hybrid.input_ids[hybrid.target_positions[0]] == base.layout.span_id
        pattern = allowed(
            AttentionMode.HYBRID,
            torch.ones(1, len(hybrid.input_ids), dtype=torch.bool),
            torch.tensor([hybrid.is_span]),
        )
        mask = backend_mask(pattern, attn_implementation(base.model), base.model.dtype)
        expected = hf_nll(base.model, hybrid.input_ids, hybrid.target_positions, hybrid.targets, mask)
        (got,) = target_nll(base.model, [hybrid], AttentionMode.HYBRID, base._pad_id)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_both_sides_nll_in_a_causal_layout_is_the_native_causal_loss(base):
    for item in ITEMS:
        spm, causal = build_sequences(base, item, "spm")
        assert spm.targets == causal.targets
        right = base.tokenizer(item.right, add_special_tokens=False)["input_ids"]
        left = base.tokenizer(item.left, add_special_tokens=False)["input_ids"]
        # suffix first: right GAP left, then the span right after the left side
        assert spm.input_ids[: len(right) + 1 + len(left)] == [*right, base.layout.gap_id, *left]
        expected = hf_nll(base.model, spm.input_ids, spm.target_positions, spm.targets)
        (got,) = target_nll(base.model, [spm], AttentionMode.CAUSAL, base._pad_id)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_batched_scoring_equals_one_by_one(base):
    sequences = [build_sequences(base, item)[0] for item in ITEMS]
    batched = target_nll(base.model, sequences, AttentionMode.HYBRID, base._pad_id, batch_size=3)
    for sequence, got in zip(sequences, batched, strict=True):
        (alone,) = target_nll(base.model, [sequence], AttentionMode.HYBRID, base._pad_id)
        np.testing.assert_allclose(got, alone, rtol=1e-4, atol=1e-5)


def test_the_right_side_matters_only_with_both_sides(base):
    item = ITEMS[0]
    other = InfillItem(item.left, item.span, " Stocks rose sharply after the bank cut rates.")
    (h1, c1), (h2, c2) = build_sequences(base, item), build_sequences(base, other)
    both = target_nll(base.model, [h1, h2], AttentionMode.HYBRID, base._pad_id)
    left = target_nll(base.model, [c1, c2], AttentionMode.CAUSAL, base._pad_id)
    np.testing.assert_allclose(left[0], left[1], rtol=1e-5)
    assert not np.allclose(both[0], both[1])


def test_evaluate_infill_reports_both_perplexities(base, tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps(i.__dict__) for i in ITEMS) + "\n", encoding="utf-8")
    result = evaluate_infill(
        base, path, generate=2, max_new_tokens=4, show_progress=False, layouts=["magnet"]
    )
    sequences = [build_sequences(base, i) for i in ITEMS]
    nll = np.concatenate(target_nll(base.model, [h for h, _ in sequences], "hybrid", base._pad_id))
    assert result.figures["ppl_both_sides"] == pytest.approx(float(np.exp(nll.mean())), rel=1e-6)
    assert result.figures["span_tokens"] == nll.size and result.figures["items"] == 3
    infills = result.details["infills"]["magnet"]
    assert len(infills) == 2 and infills[0]["gold"] == ITEMS[0].span
    assert 0.0 <= result.figures["closed_rate"] <= 1.0 and 0.0 <= result.figures["empty_rate"] <= 1.0
    assert result.figures["loop_rate"] == np.mean([loops(i["generated"]) for i in infills])
    assert [i["loops"] for i in infills] == [loops(i["generated"]) for i in infills]
    assert result.figures["fragment_rate"] == np.mean(
        [ends_inside_a_sentence(i["generated"]) for i in infills]
    )
    assert result.figures["cut_rate"] == np.mean([i["cut"] for i in infills])
    saved = result.save(tmp_path / "result.json")
    assert stored_fills(saved) == {"magnet": infills}  # what the fill-reading scripts read back
    result.details.pop("infills")
    with pytest.raises(ValueError, match="no stored fills: write it with .* --generate N"):
        stored_fills(result.save(tmp_path / "no-fills.json"))
    (tmp_path / "broken.json").write_text('{"details": ', encoding="utf-8")
    with pytest.raises(ValueError, match="broken.json is not a magnet eval infill JSON result"):
        stored_fills(tmp_path / "broken.json")
    assert result.figures["gold_loop_rate"] == np.mean([loops(i.span) for i in ITEMS[:2]])
    assert result.data[0]["sha256"] and result.model["model"] == "tiny-llama"
    assert read_infill_items(path, limit=1) == ITEMS[:1]


def test_the_shuffled_right_control_reads_the_next_items_right_side(base, tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps(i.__dict__) for i in ITEMS) + "\n", encoding="utf-8")
    result = evaluate_infill(base, path, show_progress=False, layouts=["spm", "magnet"])
    for name in ("spm", "magnet"):
        shuffled = [
            build_sequences(base, InfillItem(i.left, i.span, ITEMS[(k + 1) % 3].right), name)[0]
            for k, i in enumerate(ITEMS)
        ]
        mode = infill_layout(name).mode
        nll = np.concatenate(target_nll(base.model, shuffled, mode, base._pad_id))
        figures = result.details["layouts"][name]
        assert figures["ppl_shuffled_right"] == pytest.approx(float(np.exp(nll.mean())), rel=1e-6)
        assert figures["ppl_shuffled_right"] != figures["ppl_both_sides"]
        assert set(figures["both_sides_by_position"]) <= {"1", "2", "3-4", "5-8", "9-16", "17+"}
    left = result.details["left_only_by_position"]
    assert left["1"] > 0 and "ppl_both_sides" not in result.figures  # two layouts: only per-layout names


def test_copies_context_finds_a_five_word_run():
    assert copies_context(" the capital of France is big", "x", "Paris , the capital of France is old")
    assert not copies_context(" the capital of Spain is big", "the capital of", "France is big")
    assert not copies_context(" four words only here", "four words only here", "")


def test_infill_file_errors_name_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"left": "a", "span": "b", "right": "c"}\n{"left": "a"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: expected an object"):
        read_infill_items(path)
    path.write_text('{"left": "a", "span": " ", "right": "c"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl:1: the span must be non-empty"):
        read_infill_items(path)


def test_a_gap_at_the_start_of_a_text_is_read_after_an_end_of_text_token(base, tmp_path):
    path = tmp_path / "start.jsonl"
    items = [
        InfillItem("", "The dog runs in the park.", " Rain fell on the roof."),
        InfillItem("", "She sells sea shells.", " Water boils."),
    ]
    path.write_text("".join(json.dumps(i.__dict__) + "\n" for i in items), encoding="utf-8")
    tokenized = tokenize_items(base, read_infill_items(path))[0]
    assert base.prefix == []  # the tiny tokenizer adds no BOS, as SmolLM2's does not
    left = left_only_sequence(base, tokenized)
    assert left.input_ids == [base.tokenizer.eos_token_id, *tokenized.span]
    assert left.target_positions == list(range(len(tokenized.span))) and left.targets == tokenized.span
    result = evaluate_infill(base, path, generate=2, max_new_tokens=4, show_progress=False, layouts=["spm"])
    spans = [len(t.span) for t in tokenize_items(base, items)]
    assert result.figures["span_tokens"] == sum(spans) and result.figures["ppl_left_only"] > 1
    assert [f["left"] for f in result.details["infills"]["spm"]] == ["", ""]


def test_lm_windows_and_perplexity(base, tmp_path):
    ids = list(range(10))
    plain = windows(ids, 4, prefix=[])
    assert [w.input_ids for w in plain] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert plain[0].target_positions == [0, 1, 2] and plain[0].targets == [1, 2, 3]
    with_bos = windows(ids, 4, prefix=[99])
    assert with_bos[0].input_ids == [99, 0, 1, 2, 3] and with_bos[0].targets == [0, 1, 2, 3]

    text = " ".join(["The cat sat on the mat and looked at the door."] * 6)
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    result = evaluate_lm(base, path, context=16, batch_size=2, show_progress=False)
    tokens = base.tokenizer(text, add_special_tokens=False)["input_ids"]
    nll = np.concatenate(
        [hf_nll(base.model, w.input_ids, w.target_positions, w.targets) for w in windows(tokens, 16, [])]
    )
    assert result.figures["ppl"] == pytest.approx(float(np.exp(nll.mean())), rel=1e-4)
    assert result.figures["scored_tokens"] == nll.size
    limited = evaluate_lm(base, path, context=16, limit=1, show_progress=False)
    assert limited.figures["windows"] == 1 and limited.figures["scored_tokens"] == 15


def test_attention_dependence_on_a_real_model(base, tmp_path):
    model = base.model
    ids = torch.tensor([base.tokenizer("The cat sat on the mat and looked.")["input_ids"]])
    valid = torch.ones_like(ids, dtype=torch.bool)
    with torch.no_grad(), eager_attention(model):
        assert attn_implementation(model) == "eager"
        causal = averaged_attention(model, ids, valid, "causal")[0]
        both = averaged_attention(model, ids, valid, "bidirectional")[0]
    assert attn_implementation(model) == "sdpa"  # restored
    torch.testing.assert_close(causal.sum(-1), torch.ones(ids.shape[1]))
    torch.testing.assert_close(both.sum(-1), torch.ones(ids.shape[1]))
    assert torch.triu(causal, diagonal=1).abs().max() < 1e-6
    assert torch.triu(both, diagonal=1).sum() > 0.1

    path = tmp_path / "texts.txt"
    path.write_text(
        "The cat sat on the mat and looked at the door.\nHi\nA dog runs in the park while children play.\n",
        encoding="utf-8",
    )
    png = tmp_path / "heat.png"
    result = evaluate_dependence(base, path, min_tokens=4, heatmap=png, batch_size=2, show_progress=False)
    assert result.settings["modes"] == ["bidirectional", "causal"]
    assert result.figures["texts"] == 2 and result.figures["skipped_short"] == 1
    assert result.figures["causal.after"] == pytest.approx(0.0, abs=1e-6)
    assert result.figures["bidirectional.after"] > 0.05
    for mode in ("causal", "bidirectional"):
        total = sum(result.figures[f"{mode}.{k}"] for k in ("before", "main", "after"))
        assert total == pytest.approx(1.0, abs=1e-5)
    assert png.stat().st_size > 1000
    assert attn_implementation(model) == "sdpa"


def test_repetition_cuts_prefixes_and_measures_continuations(base, tmp_path):
    tokenizer = base.tokenizer
    lines = [
        "The cat sat on the mat and looked at the door.",
        "Hi",
        "A dog runs in the park while children play.",
    ]
    prefixes, skipped = cut_prefixes(tokenizer, lines, 5)
    assert skipped == 1 and len(prefixes) == 2
    assert (
        tokenizer(prefixes[0], add_special_tokens=False)["input_ids"] == tokenizer(lines[0])["input_ids"][:5]
    )

    path = tmp_path / "prefixes.jsonl"
    path.write_text("\n".join(json.dumps({"prefix": line}) for line in lines) + "\n", encoding="utf-8")
    result = evaluate_repetition(
        base, path, prefix_tokens=5, new_tokens=12, batch_size=2, show_progress=False
    )
    again = evaluate_repetition(base, path, prefix_tokens=5, new_tokens=12, batch_size=1, show_progress=False)
    assert result.details["greedy"] == again.details["greedy"]  # greedy does not depend on batching
    assert result.figures["prefixes"] == 2 and len(result.details["nucleus"]) == 2
    for decoding in ("greedy", "nucleus"):
        assert 0.0 <= result.figures[f"{decoding}.rep4"] <= 1.0
    expected = np.mean(
        [
            1 - len(set(zip(*(t[i:] for i in range(4)), strict=False))) / (len(t) - 3)
            for t in (tokenizer(c, add_special_tokens=False)["input_ids"] for c in result.details["greedy"])
            if len(t) >= 4
        ]
    )
    assert result.figures["greedy.rep4"] == pytest.approx(expected)
    with pytest.raises(ValueError, match="no prefix"):
        evaluate_repetition(base, path, prefix_tokens=500, show_progress=False)


def test_a_judge_reads_each_continuation_after_its_prefix(base, tmp_path, monkeypatch):
    prefixes = ["The cat sat on", "A dog runs in the park while", "Hi"]
    continuations = [" the mat.", " children play and", ""]
    batched = judge_logprobs(base, prefixes, continuations, batch_size=3)  # padded rows
    for prefix, continuation, got in zip(prefixes, continuations, batched, strict=True):
        head = [*base.prefix, *base.tokenizer(prefix, add_special_tokens=False)["input_ids"]]
        cont = base.tokenizer(continuation, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logp = base.model(input_ids=torch.tensor([head + cont])).logits[0].float().log_softmax(-1)
        expected = [float(logp[len(head) + i - 1, t]) for i, t in enumerate(cont)]
        assert got == pytest.approx(expected, abs=1e-4)

    path = tmp_path / "prefixes.txt"
    path.write_text(
        "The cat sat on the mat and looked at the door.\nA dog runs in the park while children play.\n"
    )
    judged = evaluate_repetition(base, path, prefix_tokens=5, new_tokens=12, show_progress=False, judge=base)
    # Nucleus samples of the judge's own distribution: never below p = 1e-6 under it.
    assert judged.figures["nucleus.implausible"] == 0.0
    assert judged.figures["greedy.judge_ppl"] > 1.0
    assert judged.headers[-2:] == ["judge ppl", "implausible %"]
    assert judged.settings["judge"]["model"] == base.identity.model
    monkeypatch.setattr(repetition_module, "IMPLAUSIBLE_P", 1.0)  # every token is below p = 1
    everything = evaluate_repetition(
        base, path, prefix_tokens=5, new_tokens=12, show_progress=False, judge=base
    )
    assert everything.figures["greedy.implausible"] == 1.0


CONLL = """-DOCSTART- -X- O O

the DT B-NP O
cat NN I-NP O
sat VBD B-VP O
in IN B-PP O
Paris NNP B-NP B-LOC

the DT B-NP O
dog NN I-NP O
runs VBZ B-VP O
to TO B-PP O
France NNP B-NP B-LOC
"""


def test_conll_reader_and_probe(base, tmp_path):
    path = tmp_path / "train.conll"
    path.write_text(CONLL, encoding="utf-8")
    sentences = read_conll(path, column=1)
    assert [s.words for s in sentences][0] == ["the", "cat", "sat", "in", "Paris"]
    assert sentences[1].tags == ["DT", "NN", "VBZ", "TO", "NNP"]
    assert len(read_conll(path, limit=1)) == 1
    with pytest.raises(ValueError, match="no column 9"):
        read_conll(path, column=9)

    result = evaluate_probe(base, path, path, column=1, show_progress=False)
    assert result.figures["test_words"] == 10 and result.figures["classes"] == 7
    assert result.figures["accuracy"] == pytest.approx(100.0)  # a linear probe memorises 10 words
    assert "f1" not in result.figures  # POS tags are not IOB
    ner = evaluate_probe(base, path, path, column=-1, show_progress=False)
    assert ner.figures["f1"] == pytest.approx(100.0)


def test_linear_probe_separates_separable_data():
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 8)) * 4
    labels = [str(i % 3) for i in range(90)]
    features = centers[[i % 3 for i in range(90)]] + rng.normal(size=(90, 8))
    probe = LinearProbe.fit(features, labels)
    assert probe.predict(features) == labels


def test_scored_sequence_validates():
    with pytest.raises(ValueError, match="outside"):
        ScoredSequence([1, 2], [2], [3])
