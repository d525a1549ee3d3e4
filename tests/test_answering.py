"""Answers from one model: cached hybrid decoding == full hybrid recompute, causal == native generate,
cache hit == miss, clear errors, and ``magnet ask`` through click's CliRunner."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from magnetsdk.cli.main import cli

from magnetsdk import Index
from magnetsdk.answer_layout import lay_out_answer
from magnetsdk.answering import AnswerSettings, decode_answer
from magnetsdk.attention import AttentionMode
from magnetsdk.context_cache import CachedContext, ContextCache
from magnetsdk.eval.answers import reference_nll
from magnetsdk.forward import logits_at, run_decoder
from magnetsdk.index import EmptyIndexError, IndexMismatchError
from magnetsdk.testing import tiny_magnet

PASSAGES = [
    "The cat sat on the mat and looked at the door.",
    "Paris is the capital of France and a city of museums.",
]
DOCS = [
    "The cat sat on the mat and looked at the door.",
    "Paris is the capital of France and a city of museums.",
    "Rain fell on the roof all night, and the river rose.",
    "He plays the piano, the guitar and a little violin.",
]


def laid_out(magnet, question: str = "Where did the cat sit?"):
    return lay_out_answer(magnet.tokenizer, magnet.prefix, PASSAGES, question)


def recompute(model, context: list[int], prompt: list[int], steps: int, mode: AttentionMode):
    """The slow reference: the whole sequence through the decoder at every step, no cache."""
    ids = list(context) + list(prompt)
    tokens, logits = [], []
    for _ in range(steps):
        x = torch.tensor([ids])
        valid = torch.ones_like(x, dtype=torch.bool)
        is_span = valid.clone()
        is_span[:, : len(context)] = False
        hidden = run_decoder(model, x, valid, mode, is_span).hidden
        step = logits_at(model, hidden[:, -1])
        logits.append(step)
        tokens.append(int(step.argmax(-1)))
        ids.append(tokens[-1])
    return tokens, logits


@torch.inference_mode()
def test_cached_hybrid_decoding_equals_full_recompute(magnet):
    context, prompt = laid_out(magnet)
    steps: list[torch.Tensor] = []
    fast = decode_answer(magnet.model, context, prompt, reuse=True, max_new_tokens=6, step_logits=steps)
    tokens, reference = recompute(magnet.model, context, prompt, 6, AttentionMode.HYBRID)
    assert fast.ids == tokens
    for got, want in zip(steps, reference, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@torch.inference_mode()
def test_hybrid_and_causal_read_the_context_differently(llama_magnet):
    context, prompt = laid_out(llama_magnet)
    hybrid, causal = [], []
    decode_answer(llama_magnet.model, context, prompt, reuse=True, max_new_tokens=1, step_logits=hybrid)
    decode_answer(llama_magnet.model, context, prompt, reuse=False, max_new_tokens=1, step_logits=causal)
    _, reference = recompute(llama_magnet.model, context, prompt, 1, AttentionMode.CAUSAL)
    torch.testing.assert_close(causal[0], reference[0], atol=1e-4, rtol=1e-4)
    assert (hybrid[0] - causal[0]).abs().max() > 1e-3  # the mask is what differs, and it matters


@torch.inference_mode()
def test_causal_path_equals_native_generate(magnet):
    context, prompt = laid_out(magnet)
    ours = decode_answer(magnet.model, context, prompt, reuse=False, max_new_tokens=6).ids
    native = magnet.model.generate(
        input_ids=torch.tensor([context + prompt]),
        attention_mask=torch.ones(1, len(context + prompt), dtype=torch.long),
        max_new_tokens=6,
        min_new_tokens=6,
        do_sample=False,
        pad_token_id=magnet.pad_id,
    )
    assert ours == native[0, len(context + prompt) :].tolist()


@torch.inference_mode()
def test_reference_nll_matches_the_decoding_logits(llama_magnet):
    context, prompt = laid_out(llama_magnet)
    for reuse in (True, False):
        steps: list[torch.Tensor] = []
        ids = decode_answer(
            llama_magnet.model, context, prompt, reuse=reuse, max_new_tokens=4, step_logits=steps
        ).ids
        want = torch.stack([-torch.log_softmax(s[0], -1)[t] for s, t in zip(steps, ids, strict=True)]).mean()
        got = reference_nll(llama_magnet.model, context, prompt, ids, reuse=reuse)
        assert got == pytest.approx(float(want), abs=1e-4)


@torch.inference_mode()
def test_cache_hit_gives_the_miss_output_and_keeps_only_the_context(llama_magnet):
    model = llama_magnet.model
    context, prompt = laid_out(llama_magnet)
    _, other_prompt = laid_out(llama_magnet, "What is the capital of France?")
    cache = ContextCache(max_entries=2)
    miss = decode_answer(model, context, prompt, reuse=True, max_new_tokens=5, cache=cache, key="a")
    assert not miss.cache_hit and len(cache) == 1
    assert cache.get("a").cache.get_seq_length() == len(context)  # the answer was cropped off
    hit = decode_answer(model, context, prompt, reuse=True, max_new_tokens=5, cache=cache, key="a")
    assert hit.cache_hit and hit.ids == miss.ids and hit.prefill < miss.prefill
    # Another question over the cached context equals a fresh computation of it.
    cached = decode_answer(model, context, other_prompt, reuse=True, max_new_tokens=5, cache=cache, key="a")
    fresh = decode_answer(model, context, other_prompt, reuse=True, max_new_tokens=5)
    assert cached.cache_hit and cached.ids == fresh.ids
    assert cache.get("a").cache.get_seq_length() == len(context)
    # The causal baseline never stores anything.
    decode_answer(model, context, prompt, reuse=False, max_new_tokens=2, cache=cache, key="b")
    assert "b" not in cache


def test_context_cache_is_least_recently_used():
    cache = ContextCache(max_entries=2)
    for key in "abc":
        cache.put(key, CachedContext(cache=None, length=1))
        if key == "b":
            cache.get("a")  # a is now more recent than b
    assert "a" in cache and "c" in cache and "b" not in cache
    off = ContextCache(max_entries=0)
    off.put("a", CachedContext(cache=None, length=1))
    assert len(off) == 0
    with pytest.raises(ValueError, match="max_entries"):
        ContextCache(max_entries=-1)


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    magnet = tiny_magnet("llama")
    index = Index.create(tmp_path_factory.mktemp("answers") / "idx", magnet, chunk_tokens=32, chunk_overlap=0)
    index.add(DOCS)
    index.save()
    return magnet, index


def test_answer_reuses_the_context_of_the_same_hits(tiny_index):
    magnet, index = tiny_index
    magnet.context_cache.clear()
    first = magnet.answer("Where did the cat sit?", index, k=2, max_new_tokens=4)
    second = magnet.answer("Where did the cat sit?", index, k=2, max_new_tokens=4)
    assert not first.cache_hit and second.cache_hit
    assert (second.text, second.answer_ids) == (first.text, first.answer_ids)
    assert [h.chunk_id for h in first.hits] == [h.chunk_id for h in second.hits] and len(first.hits) == 2
    assert second.timings.prefill < first.timings.prefill
    causal = magnet.answer("Where did the cat sit?", index, k=2, max_new_tokens=4, reuse=False)
    assert not causal.cache_hit and causal.context_tokens == first.context_tokens
    record = first.to_dict()
    assert record["answer_tokens"] == len(first.answer_ids) <= 4
    assert {"retrieve_s", "prefill_s", "decode_s", "total_s"} == set(record["timings"])
    assert record["hits"][0]["text"] in DOCS


def test_answer_rejects_bad_input(tiny_index, tmp_path):
    magnet, index = tiny_index
    with pytest.raises(ValueError, match="question is empty"):
        magnet.answer("   ", index)
    with pytest.raises(TypeError, match="question"):
        magnet.answer(None, index)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k=0"):
        magnet.answer("cat?", index, k=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        magnet.answer("cat?", index, max_new_tokens=0)
    with pytest.raises(ValueError, match="exceeds the model's 1024 positions"):
        magnet.answer("cat?", index, k=2, max_new_tokens=1020)
    with pytest.raises(LookupError, match="no chunks were retrieved"):
        magnet.answer("cat?", index, filter={"lang": "xx"})
    empty = Index.create(tmp_path / "empty", magnet)
    with pytest.raises(EmptyIndexError, match="holds no documents"):
        magnet.answer("cat?", empty)
    other = tiny_magnet("qwen2")
    with pytest.raises(IndexMismatchError, match="different model"):
        other.answer("cat?", index)
    with pytest.raises(ValueError, match="question"):
        AnswerSettings(template="no placeholder")


# ---------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-model")
    magnet = tiny_magnet("llama")
    magnet.model.save_pretrained(path)
    magnet.tokenizer.save_pretrained(path)
    return str(path)


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_ask_cli(tmp_path, model_dir):
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(DOCS)))
    idx = str(tmp_path / "idx")
    assert run("index", str(docs), "--out", idx, "--model", model_dir).exit_code == 0

    table = run(
        "ask", idx, "Where did the cat sit?", "-k", "2", "--max-new-tokens", "3", "--model", model_dir
    )
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0] == "question: Where did the cat sit?" and lines[1].startswith("answer:")
    assert "context cache miss" in lines[2] and lines[3].split() == ["rank", "score", "document", "chunk"]
    assert len(lines) == 7  # question, answer, time, table header, rule, two hits

    same_twice = run(
        "ask", idx, "the cat", "the cat", "-k", "2", "--max-new-tokens", "3", "--json", "--model", model_dir
    )
    records = [json.loads(x) for x in same_twice.stdout.splitlines()]
    assert [r["cache_hit"] for r in records] == [False, True]
    assert records[0]["answer"] == records[1]["answer"] and len(records[0]["hits"]) == 2
    causal = run("ask", idx, "the cat", "--no-reuse", "--max-new-tokens", "2", "--json", "--model", model_dir)
    assert json.loads(causal.stdout)["reuse"] is False

    for args, message in [
        (["   "], "question is empty"),
        (["cat?", "-k", "0"], "k=0"),
    ]:
        bad = CliRunner().invoke(cli, ["ask", idx, *args, "--model", model_dir])
        assert bad.exit_code == 1 and message in bad.output, bad.output
    missing = CliRunner().invoke(cli, ["ask", str(tmp_path / "nope"), "cat?", "--model", model_dir])
    assert missing.exit_code == 1 and "nope" in missing.output


def test_answer_set_builder_blanks_an_entity_copied_from_the_paragraph(repo_script):
    module = repo_script("scripts/build_answer_set.py")
    lines = [
        " = Some Article = ",
        " = = History = = ",
        " The town grew quickly after the railway came . In 1860 the company moved its offices to "
        "Upper Falls near the river . It built a mill , a school and a church for the workers . ",
        " Too short . ",
    ]
    items = module.build(lines, items=5, min_words=10, max_words=200, per_article=2, seed=0)
    assert len(items) == 1
    item = items[0]
    assert item["answer"] == "Upper Falls" and item["article"] == "Some Article"  # names beat years
    assert "____" in item["question"] and item["answer"] not in item["question"]
    assert item["answer"] in item["paragraph"] and " ." not in item["paragraph"]


def test_chat_framing_puts_the_chunks_in_the_user_turn(llama_magnet):
    tokenizer = llama_magnet.tokenizer
    context, prompt = lay_out_answer(tokenizer, [], PASSAGES, "Where?", "Q: {question}", chat=True)
    assert tokenizer.decode(context) == "<|im_start|>user\n" + "\n\n".join(PASSAGES)
    assert tokenizer.decode(prompt) == "\n\nQ: Where?<|im_end|>\n<|im_start|>assistant\n"
    plain, _ = lay_out_answer(tokenizer, [7], PASSAGES, "Where?", "Q: {question}", chat=False)
    assert plain[0] == 7 and tokenizer.decode(plain[1:]) == "\n\n".join(PASSAGES)
    tokenizer_without = tiny_magnet("llama").tokenizer
    tokenizer_without.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        lay_out_answer(tokenizer_without, [], PASSAGES, "Where?", chat=True)


def test_answer_framing_follows_the_chat_option(tiny_index):
    magnet, index = tiny_index
    magnet.context_cache.clear()
    chat = magnet.answer("the cat", index, k=1, max_new_tokens=2)  # the tiny tokenizer has a template
    plain = magnet.answer("the cat", index, k=1, max_new_tokens=2, chat=False)
    assert chat.context_tokens > plain.context_tokens and chat.prompt_tokens > plain.prompt_tokens
    assert not plain.cache_hit and len(magnet.context_cache) == 2  # the same chunks, framed otherwise
