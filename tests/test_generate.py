"""Magnet.generate: the model's native causal generation, batched with left padding."""

from __future__ import annotations

import pytest
import torch

PROMPTS = ["The cat sat on", "A dog runs in the park while children"]


def test_greedy_matches_a_manual_causal_loop(llama_magnet):
    m = llama_magnet
    out = m.generate(PROMPTS[0], max_new_tokens=6, temperature=0, repetition_penalty=1.0)
    ids = m.tokenizer(PROMPTS[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        for _ in range(6):
            next_id = m.model(input_ids=ids).logits[0, -1].argmax()
            ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
    expected = m.tokenizer.decode(ids[0, -6:], skip_special_tokens=True)
    assert out == expected


def test_batch_equals_one_by_one(magnet):
    together = magnet.generate(PROMPTS, max_new_tokens=6, temperature=0)
    alone = [magnet.generate(p, max_new_tokens=6, temperature=0) for p in PROMPTS]
    assert together == alone


def test_seeded_sampling_is_reproducible(llama_magnet):
    a = llama_magnet.generate(PROMPTS[0], max_new_tokens=8, temperature=1.0, seed=3)
    b = llama_magnet.generate(PROMPTS[0], max_new_tokens=8, temperature=1.0, seed=3)
    assert a == b


def test_greedy_with_a_repetition_penalty_equals_native_generate(magnet):
    ids = magnet.tokenizer(PROMPTS[1], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        native = magnet.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=8,
            min_new_tokens=8,
            do_sample=False,
            repetition_penalty=1.3,
            pad_token_id=magnet.pad_id,
        )
    ours = magnet.generate(
        PROMPTS[1], max_new_tokens=8, min_new_tokens=8, temperature=0, repetition_penalty=1.3
    )
    assert ours == magnet.tokenizer.decode(native[0, ids.shape[1] :], skip_special_tokens=True)


def test_sampling_never_touches_the_global_generator(llama_magnet):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    llama_magnet.generate(PROMPTS, max_new_tokens=4, temperature=1.0, seed=5)
    llama_magnet.infill("The cat [GAP] on the mat.", max_new_tokens=4, temperature=1.0, seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_a_seeded_row_does_not_depend_on_its_batch(llama_magnet):
    # The seeding rule: row i of a call samples with seed + i, whatever else is in the batch.
    together = llama_magnet.generate(PROMPTS, max_new_tokens=8, temperature=1.0, seed=11, batch_size=2)
    first = llama_magnet.generate(PROMPTS[0], max_new_tokens=8, temperature=1.0, seed=11)
    second = llama_magnet.generate(PROMPTS[1], max_new_tokens=8, temperature=1.0, seed=12)
    assert together == [first, second]
    split = llama_magnet.generate(PROMPTS, max_new_tokens=8, temperature=1.0, seed=11, batch_size=1)
    assert split == together


def test_chat_template(llama_magnet):
    """chat=True equals generating from the chat-rendered prompt by hand (no extra special tokens)."""
    m = llama_magnet
    out = m.generate("hello", max_new_tokens=5, temperature=0, repetition_penalty=1.0, chat=True)
    rendered = m.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hello"}], add_generation_prompt=True, tokenize=False
    )
    assert rendered.startswith("<|im_start|>user\nhello") and rendered.endswith("assistant\n")
    ids = m.tokenizer(rendered, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        for _ in range(5):
            next_id = m.model(input_ids=ids).logits[0, -1].argmax()
            ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
    assert out == m.tokenizer.decode(ids[0, -5:], skip_special_tokens=True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"min_new_tokens": 9, "max_new_tokens": 8}, "min_new_tokens"),
    ],
)
def test_bad_settings(llama_magnet, kwargs, message):
    with pytest.raises(ValueError, match=message):
        llama_magnet.generate("hi", **kwargs)


def test_empty_prompt_is_refused(llama_magnet):
    with pytest.raises(ValueError, match="empty"):
        llama_magnet.generate("")


def test_min_new_tokens_holds_back_the_end_of_sequence(llama_magnet):
    # Make the first greedy token the end-of-sequence token: generation then stops after it,
    # unless min_new_tokens holds EOS back.
    import copy

    from magnetsdk.generation import GenerationSettings, generate_texts

    m = llama_magnet
    ids = m.tokenizer(PROMPTS[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        first = int(m.model(input_ids=ids).logits[0, -1].argmax())
    tokenizer = copy.deepcopy(m.tokenizer)
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(first)
    settings = dict(max_new_tokens=6, temperature=0, repetition_penalty=1.0)
    stopped = generate_texts(m.model, tokenizer, [PROMPTS[0]], GenerationSettings(**settings))
    held = generate_texts(m.model, tokenizer, [PROMPTS[0]], GenerationSettings(**settings, min_new_tokens=6))
    assert stopped == [""]  # the EOS came first: nothing is kept
    held_ids = tokenizer(held[0], add_special_tokens=False)["input_ids"]
    assert len(held_ids) > 1 and held_ids[0] != first


def test_a_continuation_never_holds_a_layout_token(llama_magnet):
    m = llama_magnet
    layout_ids = list(m.layout.ids().values())
    rows = m.model.get_output_embeddings().weight
    end = m.layout.end_id
    saved = rows[end].detach().clone()
    ids = m.tokenizer(PROMPTS[0], return_tensors="pt")["input_ids"]
    try:
        with torch.no_grad():
            last = m.model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]
            rows[end] = 50 * last / last.norm()  # END now wins after the prompt unless it is banned
            picked = []
            for _ in range(6):
                logits = m.model(input_ids=ids).logits[0, -1]
                picked.append(int(logits.argmax()))
                logits[layout_ids] = float("-inf")
                ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
            out = m.generate(PROMPTS[0], max_new_tokens=6, temperature=0, repetition_penalty=1.0)
    finally:
        with torch.no_grad():
            rows[end] = saved
    assert end in picked  # without the ban the model would have written END
    assert out == m.tokenizer.decode(ids[0, -6:], skip_special_tokens=True)
