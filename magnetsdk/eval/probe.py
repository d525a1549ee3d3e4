"""Token-level linear probe on frozen features (the paper's CoNLL-2003 chunking / NER / POS table).

Reads CoNLL-format files: one token per line with whitespace-separated columns (the token first,
``column`` picks the tag), blank lines between sentences, ``-DOCSTART-`` lines ignored. Each
sentence is tokenized word by word (a space before every word but the first), run through the
frozen model in one attention mode (bidirectional by default), and a word's feature is the final
hidden state at its first sub-token. A multinomial logistic regression (a linear layer, L-BFGS,
standardized features, L2) is trained on the train file and scored on the test file: token
accuracy and, when the tags are IOB (``B-X`` / ``I-X`` / ``O``), entity-level F1 as conlleval and
seqeval count it (a chunk is right only when its type, start and end all match).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from magnetsdk.attention import AttentionMode
from magnetsdk.encoding import pad_batch
from magnetsdk.eval.result import EvalResult, data_file, utc_now
from magnetsdk.forward import run_decoder

_IOB_TAG = re.compile(r"^[BI]-.+$")


@dataclass
class Sentence:
    words: list[str]
    tags: list[str]


def read_conll(path: str | Path, column: int = -1, limit: int | None = None) -> list[Sentence]:
    """Sentences of a CoNLL file (the first ``limit`` when given); ``column`` indexes the tag."""
    source = Path(path)
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise FileNotFoundError(f"cannot read CoNLL file {source}: {error.strerror or error}") from None
    sentences: list[Sentence] = []
    current = Sentence([], [])

    def close() -> None:
        nonlocal current
        if current.words:
            sentences.append(current)
        current = Sentence([], [])

    for number, line in enumerate(lines, 1):
        cells = line.split()
        if not cells or cells[0] == "-DOCSTART-":
            close()
            if limit is not None and len(sentences) >= limit:
                break
            continue
        if len(cells) < 2:
            raise ValueError(f"{source}:{number}: one column; a CoNLL line needs a token and a tag")
        try:
            tag = cells[column]
        except IndexError:
            raise ValueError(
                f"{source}:{number}: no column {column} in a line of {len(cells)} columns; pick another --column"
            ) from None
        current.words.append(cells[0])
        current.tags.append(tag)
    close()
    if limit is not None:
        sentences = sentences[:limit]
    if not sentences:
        raise ValueError(f"{source} holds no sentences")
    return sentences


def is_iob(tags: list[str]) -> bool:
    return any(t != "O" for t in tags) and all(t == "O" or _IOB_TAG.match(t) for t in tags)


def iob_chunks(tags: list[str]) -> set[tuple[str, int, int]]:
    """Chunks ``(type, start, end)`` (end exclusive) of an IOB1/IOB2 tag sequence, as conlleval reads
    them: a chunk starts at ``B-X``, or at ``I-X`` after ``O`` or after another type."""
    chunks: set[tuple[str, int, int]] = set()
    kind, begin = None, 0
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, label = tag.partition("-")
        continues = prefix == "I" and label == kind
        if kind is not None and not continues:
            chunks.add((kind, begin, i))
            kind = None
        if prefix in ("B", "I") and not continues:
            kind, begin = label, i
    return chunks


def chunk_f1(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """Micro precision, recall and F1 (x100) of chunks over sentences."""
    correct = found = expected = 0
    for g, p in zip(gold, predicted, strict=True):
        gold_chunks, predicted_chunks = iob_chunks(g), iob_chunks(p)
        correct += len(gold_chunks & predicted_chunks)
        found += len(predicted_chunks)
        expected += len(gold_chunks)
    precision = correct / found if found else 0.0
    recall = correct / expected if expected else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": 100 * precision, "recall": 100 * recall, "f1": 100 * f1}


def word_features(
    magnet: Any,
    sentences: list[Sentence],
    attention: AttentionMode | str = AttentionMode.BIDIRECTIONAL,
    batch_size: int = 16,
    show_progress: bool = False,
) -> np.ndarray:
    """Float32 ``(words, d)``: the final hidden state at each word's first sub-token."""
    tokenizer = magnet.tokenizer
    prefix = list(magnet.prefix)
    laid: list[tuple[list[int], list[int]]] = []
    for sentence in sentences:
        ids, firsts = list(prefix), []
        for k, word in enumerate(sentence.words):
            pieces = tokenizer(word if k == 0 else " " + word, add_special_tokens=False)["input_ids"]
            firsts.append(len(ids))
            ids.extend(pieces or [magnet.pad_id])
        laid.append((ids, firsts))
    device = next(magnet.model.parameters()).device
    order = sorted(range(len(laid)), key=lambda i: len(laid[i][0]), reverse=True)
    per_sentence: list[np.ndarray] = [np.zeros(0)] * len(laid)
    starts = range(0, len(order), batch_size)
    if show_progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="probe features", unit="batch")
    with magnet.lock, torch.inference_mode():
        for start in starts:
            index = order[start : start + batch_size]
            ids, valid = pad_batch([laid[i][0] for i in index], magnet.pad_id, device)  # (b, n)
            hidden = run_decoder(magnet.model, ids, valid, attention).hidden  # (b, n, d)
            for row, i in enumerate(index):
                positions = torch.tensor(laid[i][1], device=device)
                per_sentence[i] = hidden[row, positions].float().cpu().numpy()
    return np.concatenate(per_sentence, axis=0)


@dataclass
class LinearProbe:
    """A multinomial logistic regression on standardized features."""

    classes: list[str]
    mean: np.ndarray
    scale: np.ndarray
    weight: torch.Tensor  # (C, d)
    bias: torch.Tensor  # (C,)

    @classmethod
    def fit(
        cls, features: np.ndarray, labels: list[str], l2: float = 1e-3, max_iter: int = 200, seed: int = 0
    ) -> LinearProbe:
        classes = sorted(set(labels))
        mean = features.mean(axis=0)
        scale = features.std(axis=0) + 1e-6
        x = torch.tensor((features - mean) / scale, dtype=torch.float32)  # (N, d)
        index = {c: i for i, c in enumerate(classes)}
        y = torch.tensor([index[label] for label in labels])
        torch.manual_seed(seed)
        layer = torch.nn.Linear(x.shape[1], len(classes))
        torch.nn.init.zeros_(layer.weight)
        torch.nn.init.zeros_(layer.bias)
        optimizer = torch.optim.LBFGS(layer.parameters(), max_iter=max_iter, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(layer(x), y) + l2 * layer.weight.pow(2).sum()
            loss.backward()
            return loss

        with torch.enable_grad():
            optimizer.step(closure)
        return cls(classes, mean, scale, layer.weight.detach(), layer.bias.detach())

    def predict(self, features: np.ndarray) -> list[str]:
        x = torch.tensor((features - self.mean) / self.scale, dtype=torch.float32)
        scores = x @ self.weight.T + self.bias  # (N, C)
        return [self.classes[i] for i in scores.argmax(dim=1).tolist()]


def evaluate_probe(
    magnet: Any,
    train_path: str | Path,
    test_path: str | Path,
    column: int = -1,
    attention: str = "bidirectional",
    limit: int | None = None,
    batch_size: int = 16,
    l2: float = 1e-3,
    show_progress: bool = True,
) -> EvalResult:
    """Train the probe on ``train_path`` (``limit`` sentences at most) and score ``test_path``."""
    started, start = utc_now(), time.perf_counter()
    mode = AttentionMode(attention)
    if mode is AttentionMode.HYBRID:
        raise ValueError("the probe reads plain sentences; use attention 'bidirectional' or 'causal'")
    train = read_conll(train_path, column, limit)
    test = read_conll(test_path, column, limit)
    train_tags = [t for s in train for t in s.tags]
    probe = LinearProbe.fit(word_features(magnet, train, mode, batch_size, show_progress), train_tags, l2)
    predicted = probe.predict(word_features(magnet, test, mode, batch_size, show_progress))
    gold = [t for s in test for t in s.tags]
    accuracy = 100 * float(np.mean([p == g for p, g in zip(predicted, gold, strict=True)]))
    figures: dict[str, Any] = {
        "accuracy": accuracy,
        "train_sentences": len(train),
        "test_sentences": len(test),
        "test_words": len(gold),
        "classes": len(probe.classes),
    }
    headers, row = ["attention", "train sents", "test words", "accuracy"], [mode.value, len(train), len(gold)]
    row.append(accuracy)
    if is_iob(train_tags + gold):
        by_sentence, offset = [], 0
        for sentence in test:
            by_sentence.append(predicted[offset : offset + len(sentence.tags)])
            offset += len(sentence.tags)
        scores = chunk_f1([s.tags for s in test], by_sentence)
        figures.update({f"chunk_{k}": v for k, v in scores.items()})
        figures["f1"] = scores["f1"]
        headers.append("entity F1")
        row.append(scores["f1"])
    return EvalResult(
        task="probe",
        figures=figures,
        headers=headers,
        rows=[row],
        settings={
            "column": column,
            "attention": mode.value,
            "limit": limit,
            "l2": l2,
            "batch_size": batch_size,
        },
        model=magnet.identity.to_dict(),
        data=[data_file(train_path), data_file(test_path)],
        started=started,
        seconds=time.perf_counter() - start,
    )
