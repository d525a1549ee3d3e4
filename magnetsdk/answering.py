"""Answers from one model: the retrieved chunks are the context, the answer is decoded after the question.

The tokens are laid out by :mod:`magnetsdk.answer_layout`; this module decodes after them:

- ``reuse=True`` (the hybrid layout): the context attends bidirectionally within itself, the span
  block attends causally and sees all of the context. No context token ever looks at a span token,
  so the context's keys and values do not depend on the question: they are computed once (the
  prefill), kept in a :class:`magnetsdk.context_cache.ContextCache` keyed by the retrieved chunks,
  and a second question over the same chunks starts decoding straight from them. This is GritLM's
  document caching; a MAGNET-trained model was trained on exactly this pattern (missing-span
  generation), a model that was never adapted was not and answers worse under it.
- ``reuse=False`` (the baseline): the same tokens, read with the model's native causal attention;
  nothing is cached between calls.

Decoding is :mod:`magnetsdk.decoding`'s engine; :mod:`magnetsdk.eval.answers` scores a reference
answer under the same layout. This module knows nothing about indexes or thread safety:
:meth:`magnetsdk.Magnet.answer` retrieves the hits and holds the model's lock; here the hits become
tokens, keys/values and an answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from magnetsdk.answer_layout import framing, lay_out_answer
from magnetsdk.attention import AttentionMode
from magnetsdk.context_cache import CachedContext, ContextCache, context_key
from magnetsdk.decoding import Continuation, Past, Prompt, Sampling, check_decoding, decode, prefill
from magnetsdk.layout import LayoutTokens

if TYPE_CHECKING:  # magnetsdk.index imports faiss; answering only reads the hits' fields
    from magnetsdk.index.documents import Hit


@dataclass(frozen=True)
class AnswerSettings:
    """How an answer is retrieved and decoded (greedy by default)."""

    k: int = 3  # chunks retrieved and placed in the context
    max_new_tokens: int = 32
    reuse: bool = True  # hybrid layout with cached context keys/values; False: plain causal
    temperature: float = 0.0  # 0 is greedy
    top_p: float = 1.0
    seed: int | None = None
    template: str | None = None  # the prompt after the context, with {question}; None: the default
    stop_at_newline: bool = True  # an answer is one line
    # Frame context and question as one user message of the chat template (None: when the
    # tokenizer has one). An instruction-tuned model answers a bare prompt by closing the turn.
    chat: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k={self.k!r} must be an integer of at least 1 (chunks to retrieve)")
        check_decoding(self.max_new_tokens, self.temperature, self.top_p)
        if self.template is not None and "{question}" not in self.template:
            raise ValueError(f"template {self.template!r} must contain '{{question}}'")


@dataclass(frozen=True)
class AnswerTimings:
    """Seconds spent in each stage of one answer."""

    retrieve: float  # encoding the question and searching the index
    prefill: float  # the context's forward pass (0 when its keys/values came from the cache)
    decode: float  # the prompt's forward pass and every answer token

    @property
    def total(self) -> float:
        return self.retrieve + self.prefill + self.decode


@dataclass
class Answer:
    """An answer, the hits it was conditioned on (best first) and where the time went."""

    text: str
    hits: list[Hit]
    timings: AnswerTimings
    cache_hit: bool  # the context's keys/values were reused from an earlier call
    reuse: bool
    context_tokens: int
    prompt_tokens: int
    answer_ids: list[int] = field(repr=False, default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.text,
            "reuse": self.reuse,
            "cache_hit": self.cache_hit,
            "context_tokens": self.context_tokens,
            "prompt_tokens": self.prompt_tokens,
            "answer_tokens": len(self.answer_ids),
            "timings": {
                "retrieve_s": self.timings.retrieve,
                "prefill_s": self.timings.prefill,
                "decode_s": self.timings.decode,
                "total_s": self.timings.total,
            },
            "hits": [
                {"document_id": h.document_id, "chunk_id": h.chunk_id, "score": h.score, "text": h.text}
                for h in self.hits
            ],
        }


def check_question(question: object) -> str:
    if not isinstance(question, str):
        raise TypeError(f"question is {type(question).__name__}, expected str")
    if not question.strip():
        raise ValueError("the question is empty; ask something, e.g. magnet ask INDEX 'Who wrote it?'")
    return question.strip()


# ---------------------------------------------------------------------- decoding


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Decoded:
    ids: list[int]
    prefill: float
    decode: float
    cache_hit: bool


def decode_answer(
    model: torch.nn.Module,
    context_ids: list[int],
    prompt_ids: list[int],
    reuse: bool,
    max_new_tokens: int,
    stop_ids: set[int] | frozenset[int] = frozenset(),
    stop: Callable[[list[int]], bool] | None = None,
    banned_ids: list[int] | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
    cache: ContextCache | None = None,
    key: str | None = None,
    step_logits: list[torch.Tensor] | None = None,
) -> Decoded:
    """Decode up to ``max_new_tokens`` answer tokens after ``context_ids + prompt_ids``.

    ``reuse=True``: hybrid attention; the context's keys/values come from ``cache[key]`` when
    present, else they are computed and stored there. ``reuse=False``: causal attention, no cache.
    Decoding stops before a token in ``stop_ids`` or after one for which ``stop(ids)`` is true.
    ``step_logits``, when given, collects each step's logits (for equivalence tests).
    """
    if not context_ids or not prompt_ids:
        raise ValueError("an answer needs a non-empty context and prompt")
    device = next(model.parameters()).device
    mode = AttentionMode.HYBRID if reuse else AttentionMode.CAUSAL
    sampling = Sampling(temperature, top_p, seed=seed)

    stored = reuse and cache is not None and key is not None
    entry = cache.get(key) if stored else None
    if entry is not None and entry.length != len(context_ids):
        entry = None  # never decode from a context of another length
    _sync(device)
    started = time.perf_counter()
    hit = entry is not None
    if entry is None:
        past, _ = prefill(model, [Prompt(context_ids)], mode, pad_id=0)  # one row: nothing is padded
        entry = CachedContext(past.cache, len(context_ids))
        if stored:
            cache.put(key, entry)
    _sync(device)
    prefill_seconds = time.perf_counter() - started

    context_valid = torch.ones((1, len(context_ids)), dtype=torch.bool, device=device)
    past = Past(entry.cache, context_valid, torch.zeros_like(context_valid))
    program = Continuation(list(prompt_ids), max_new_tokens, frozenset(stop_ids), stop=stop)
    completed = False
    try:
        decode(
            model,
            [Prompt(list(prompt_ids), [True] * len(prompt_ids))],
            [program],
            mode,
            sampling,
            pad_id=0,
            banned_ids=banned_ids or (),
            past=past,
            step_logits=step_logits,
        )
        _sync(device)
        completed = True
    finally:
        if stored and not completed:
            cache.discard(key)  # a forward pass may have stopped between layers: drop the entry
        elif stored:
            # The stored entry must hold the context only: cut what this call appended (layers
            # extend by concatenation, so the entry never shares storage with what is cut).
            kv = entry.cache
            kv.crop(-(kv.get_seq_length() - entry.length))
    return Decoded(program.tokens, prefill_seconds, time.perf_counter() - started - prefill_seconds, hit)


# ---------------------------------------------------------------------- one answer


def answer_from_hits(
    model: torch.nn.Module,
    tokenizer,
    prefix: list[int],
    layout: LayoutTokens,
    question: str,
    hits: list[Hit],
    settings: AnswerSettings,
    cache: ContextCache | None = None,
    retrieve_seconds: float = 0.0,
) -> Answer:
    """Answer ``question`` from ``hits`` (best first); the caller holds the model's lock."""
    question = check_question(question)
    if not hits:
        raise LookupError(
            "no chunks were retrieved for the question (the filter left none?); "
            "there is nothing to answer from"
        )
    chat, template = framing(tokenizer, settings.chat, settings.template)
    context_ids, prompt_ids = lay_out_answer(
        tokenizer, prefix, [h.text for h in hits], question, template, chat
    )
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    needed = len(context_ids) + len(prompt_ids) + settings.max_new_tokens
    if limit is not None and needed > limit:
        raise ValueError(
            f"context ({len(context_ids)} tokens) + prompt ({len(prompt_ids)}) + answer "
            f"({settings.max_new_tokens}) exceeds the model's {limit} positions; retrieve fewer chunks (k) "
            "or index with smaller chunks"
        )
    eos = tokenizer.eos_token_id
    # END closes a span in the hybrid layout; an adapted model may close its answer with it.
    stop_ids = {layout.end_id} | ({eos} if eos is not None else set())

    def one_line(ids: list[int]) -> bool:
        return settings.stop_at_newline and "\n" in tokenizer.decode(ids, skip_special_tokens=True).lstrip()

    decoded = decode_answer(
        model,
        context_ids,
        prompt_ids,
        reuse=settings.reuse,
        max_new_tokens=settings.max_new_tokens,
        stop_ids=stop_ids,
        stop=one_line,
        banned_ids=[layout.gap_id, layout.span_id, layout.mask_id],
        temperature=settings.temperature,
        top_p=settings.top_p,
        seed=settings.seed,
        cache=cache,
        key=context_key(hits, context_ids),
    )
    text = tokenizer.decode(decoded.ids, skip_special_tokens=True).strip()
    if settings.stop_at_newline:
        text = text.split("\n", 1)[0].strip()
    return Answer(
        text=text,
        hits=list(hits),
        timings=AnswerTimings(retrieve_seconds, decoded.prefill, decoded.decode),
        cache_hit=decoded.cache_hit,
        reuse=settings.reuse,
        context_tokens=len(context_ids),
        prompt_tokens=len(prompt_ids),
        answer_ids=decoded.ids,
    )
