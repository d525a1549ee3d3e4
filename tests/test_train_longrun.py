"""What a long run needs: the same start whatever was cached, resumes that survive lost or damaged
checkpoints, document chunks that end in EOS only at a document's end, and a generation check in
the metrics log."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from magnetsdk.train.checkpoint import checkpoint_dir, list_checkpoints
from magnetsdk.train.data import BucketedOrder, Order, chunk_documents
from magnetsdk.train.metrics import read_metrics
from magnetsdk.train.trainer import _Run, train

from magnetsdk.testing import _CORPUS, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def lora_weights(run: _Run) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in run.trained.named_parameters() if "lora_" in n}


def test_lora_starts_from_the_same_weights_with_a_cold_or_a_warm_paraphrase_cache(
    tmp_path, data_file, train_config
):
    cache = tmp_path / "para.jsonl"
    settings = dict(positives="paraphrase", paraphrase_cache=str(cache))
    cold = _Run(train_config(tmp_path, "tiny", data_file, **settings), tiny_model(), tiny_tokenizer(), False)
    assert cache.is_file()  # the cold run generated (drawing from torch's generator) and cached
    stamp = cache.stat().st_mtime_ns
    warm = _Run(
        train_config(tmp_path, "tiny", data_file, output_dir=str(tmp_path / "warm"), **settings),
        tiny_model(),
        tiny_tokenizer(),
        False,
    )
    assert cache.stat().st_mtime_ns == stamp  # the warm run generated nothing
    first, second = lora_weights(cold), lora_weights(warm)
    assert first and first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name


def test_resume_when_the_run_directory_is_gone_starts_fresh(
    tmp_path, base_dir, data_file, capsys, train_config
):
    result = train(
        train_config(tmp_path, base_dir, data_file, max_steps=2, output_dir=str(tmp_path / "gone" / "run"))
    )
    shutil.rmtree(tmp_path / "gone")
    capsys.readouterr()
    again = train(
        train_config(tmp_path, base_dir, data_file, max_steps=2, output_dir=str(result.output_dir)),
        resume=True,
    )
    assert "does not exist; starting a new run from step 0" in capsys.readouterr().out
    assert [r["step"] for r in read_metrics(again.metrics_path)] == [1, 2]


def test_resume_skips_a_damaged_checkpoint_and_removes_unfinished_ones(
    tmp_path, base_dir, data_file, train_config
):
    settings = dict(max_steps=4, save_every=1, keep_checkpoints=4)
    whole = train(train_config(tmp_path, base_dir, data_file, output_dir=str(tmp_path / "whole"), **settings))
    run = tmp_path / "run"
    shutil.copytree(whole.output_dir, run)  # the same run, stopped after step 3 ...
    shutil.rmtree(list_checkpoints(run)[-1].path)
    newest = list_checkpoints(run)[-1]
    assert newest.step == 3
    weights = newest.path / "trainable.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # cut short, as a copy that stopped halfway
    unfinished = checkpoint_dir(run) / ".step-00000004.abc.tmp"
    unfinished.mkdir()
    with pytest.warns(UserWarning, match=r"skipping .*step-00000003.*cannot be read"):
        resumed = train(train_config(tmp_path, base_dir, data_file, **settings), resume=True)
    assert not unfinished.exists()
    records = read_metrics(resumed.metrics_path)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    expected = read_metrics(whole.metrics_path)
    # Resumed from step 2 (the newest readable checkpoint): steps 3 and 4 are those of an uninterrupted run.
    for got, want in zip(records[2:], expected[2:], strict=True):
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4)


def test_document_chunks_end_in_eos_only_where_a_document_ends(tmp_path):
    tokenizer = tiny_tokenizer()
    long_document = " ".join(sorted(set(_CORPUS)))
    chunks = chunk_documents(tokenizer, [long_document, "the cat sat on the mat"], budget=12)
    assert len(chunks) >= 3
    assert [c.ends_document for c in chunks].count(True) == 2
    first_doc = [c for c in chunks[:-1]]
    assert [c.ends_document for c in first_doc] == [False] * (len(first_doc) - 1) + [True]
    assert all(4 <= len(c.ids) <= 12 for c in chunks)


def _eos_rows(batches, steps: int) -> tuple[int, int]:
    """(next-token rows, of them ending in EOS) over ``steps`` micro-batches."""
    eos = batches.eos
    rows = ending = 0
    for step in range(steps):
        examples, _ = batches.lm_examples(batches.positions(step, 0))
        for example in examples:
            if all(example.is_span):  # a next-token example: every token is a span token
                rows += 1
                ending += example.input_ids[-1] == eos
    return rows, ending


def test_next_token_examples_of_one_line_texts_carry_no_eos(tmp_path, data_file, train_config):
    documents = tmp_path / "docs.jsonl"
    long_document = " ".join(sorted(set(_CORPUS)))
    documents.write_text(json.dumps({"text": long_document}) + "\n")
    without = _Run(
        train_config(tmp_path, "tiny", data_file, no_context_fraction=0.5),
        tiny_model(),
        tiny_tokenizer(),
        False,
    )
    rows, ending = _eos_rows(without.batches, 16)
    assert rows > 0 and ending == 0  # texts are not known to end a document: no EOS
    with_documents = _Run(
        train_config(
            tmp_path,
            "tiny",
            data_file,
            output_dir=str(tmp_path / "docs"),
            no_context_fraction=0.5,
            documents=[str(documents)],
        ),
        tiny_model(),
        tiny_tokenizer(),
        False,
    )
    chunks = with_documents.batches.chunks
    assert len(chunks) > 1 and sum(c.ends_document for c in chunks) == 1
    rows, ending = _eos_rows(with_documents.batches, 16)
    assert rows > ending > 0  # EOS only after the document's last chunk


def test_bucketed_batches_hold_the_same_examples_with_less_padding():
    lengths = Order(200, 0)
    length = lambda p: (lengths.item(p) * 37) % 50  # noqa: E731 - a length per example
    bucketed = BucketedOrder(batch=8, window=5, seed=0, length=length)
    arranged = [bucketed.arranged(p) for p in range(40)]
    assert sorted(arranged) == list(range(40))  # a permutation of the window's positions
    assert arranged == [BucketedOrder(8, 5, 0, length).arranged(p) for p in range(40)]  # step alone decides
    padded = lambda order: sum(8 * max(length(order[i + j]) for j in range(8)) for i in range(0, 40, 8))  # noqa: E731
    assert padded(arranged) < padded(list(range(40)))
    assert BucketedOrder(8, 1, 0, length).arranged(17) == 17  # window 1: off


def test_the_generation_check_is_logged(tmp_path, base_dir, data_file, train_config):
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("\n".join(" ".join(sorted(set(_CORPUS))[i:] * 2) for i in range(3)) + "\n")
    result = train(
        train_config(
            tmp_path,
            base_dir,
            data_file,
            eval_every=2,
            eval_prefixes=str(prefixes),
            eval_new_tokens=12,
        )
    )
    records = read_metrics(result.metrics_path)
    checked = [r for r in records if "eval_natural_tokens" in r]
    assert [r["step"] for r in checked] == [2, 4]
    for record in checked:
        assert record["eval_natural_tokens"] > 0 and record["eval_full_tokens"] > 0
        assert 0.0 <= record["eval_rep4"] <= 1.0
    # The check leaves training alone: eval mode, and the global generators restored.
    plain = train(train_config(tmp_path, base_dir, data_file, output_dir=str(tmp_path / "plain")))
    for got, want in zip(records, read_metrics(plain.metrics_path), strict=True):
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)


def test_a_resumed_run_takes_its_own_learning_rate_and_schedule(
    tmp_path, base_dir, data_file, train_config, capsys
):
    # Loading a checkpoint restores the optimiser's saved learning rate; the resumed run's own must win.
    first = train(train_config(tmp_path, base_dir, data_file, max_steps=2, save_every=2, learning_rate=1e-3))
    capsys.readouterr()
    again = train(
        train_config(
            tmp_path,
            base_dir,
            data_file,
            max_steps=4,
            learning_rate=2e-4,
            schedule="constant",
            warmup_steps=0,
        ),
        resume=True,
    )
    assert "learning_rate, schedule, warmup_steps, max_steps differ" in capsys.readouterr().out
    records = read_metrics(again.metrics_path)
    assert [r["step"] for r in records] == [1, 2, 3, 4] and first.output_dir == again.output_dir
    assert [r["lr"] for r in records[2:]] == pytest.approx([2e-4, 2e-4])
