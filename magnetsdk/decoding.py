"""The one decode loop: prefill, the mask of each step, sampling and stopping.

``generate``, ``infill`` and ``answer`` are layouts over :func:`decode`. Each gives, per row, the
tokens to prefill and a :class:`Program` that turns the model's choice into the next token to feed
(or ``None`` when the row is finished); this module runs the forward passes and picks the tokens.

- Rows are left-padded so every row's next token lands in the same column; position ids count
  real tokens (:func:`magnetsdk.attention.position_ids`), so padding changes nothing.
- The attention mode is the layout's: ``causal`` runs the model's native path, ``hybrid`` marks
  the decoded tokens as span tokens (they attend to all context and causally to earlier span
  tokens). Context tokens never attend to decoded tokens in either mode, so their keys and values
  are computed once (``use_cache=True``); ``use_cache=False`` recomputes the whole sequence at every
  step, the reference the equivalence tests compare against.
- Seeding has one rule: row ``i`` of a call samples from its own ``torch.Generator`` seeded with
  ``seed + i``. The global torch generator is never touched, and a row's tokens do not depend on
  which other rows share its batch.

It knows nothing about text: token ids in, token ids out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from magnetsdk.attention import AttentionMode
from magnetsdk.forward import logits_at, run_decoder


def check_decoding(max_new_tokens: int, temperature: float, top_p: float) -> None:
    """The checks every decoding call's settings share (generate, infill, answer)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens!r} must be an integer of at least 1")
    if not isinstance(temperature, (int, float)) or math.isnan(temperature) or temperature < 0:
        raise ValueError(f"temperature={temperature!r} must be a number >= 0 (0 is greedy)")
    if not isinstance(top_p, (int, float)) or math.isnan(top_p) or not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p!r} must be in (0, 1]")


def check_run_length(size: int, name: str) -> None:
    """The check of a guard's run length: 0 (off) or at least 2 tokens."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0 or size == 1:
        raise ValueError(
            f"{name}={size!r} must be 0 (off) or an integer of at least 2: the length in tokens "
            "of a run that may not occur twice (1 would forbid every token already used)"
        )


@dataclass(frozen=True)
class Sampling:
    """How the next token is picked: greedy when ``temperature == 0``, else nucleus sampling."""

    temperature: float = 0.0
    top_p: float = 1.0
    # HF's rule: a logit of a token already in the row's history is divided by the penalty when
    # positive, multiplied when negative. 1.0 disables it.
    repetition_penalty: float = 1.0
    seed: int | None = None
    # A token that would make the row's history end with an n-gram of this many tokens it already
    # holds is never chosen (a loop guard); 0 disables it.
    no_repeat_ngram: int = 0

    def __post_init__(self) -> None:
        check_decoding(1, self.temperature, self.top_p)
        penalty = self.repetition_penalty
        if not isinstance(penalty, (int, float)) or math.isnan(penalty) or penalty <= 0:
            raise ValueError(f"repetition_penalty={penalty!r} must be > 0 (1.0 disables it)")
        check_run_length(self.no_repeat_ngram, "no_repeat_ngram")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def generators(self, rows: int, device: torch.device, first_row: int = 0) -> list[torch.Generator | None]:
        """One generator per row, seeded ``seed + i`` for the call's row ``i``; none when greedy or unseeded."""
        if self.greedy or self.seed is None:
            return [None] * rows
        return [torch.Generator(device=device).manual_seed(self.seed + first_row + i) for i in range(rows)]


def pick_tokens(
    logits: torch.Tensor, sampling: Sampling, generators: Sequence[torch.Generator | None]
) -> torch.Tensor:
    """The next token of each row: ``logits`` (b, V) -> (b,). Rows sample with their own generator."""
    if sampling.greedy:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / sampling.temperature, dim=-1)  # (b, V)
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < sampling.top_p  # always keeps the top token
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs * keep)
    picked = [torch.multinomial(probs[row], 1, generator=generators[row]) for row in range(len(probs))]
    return torch.cat(picked)


def pool_tokens(logits: torch.Tensor, pooled: torch.Tensor) -> None:
    """Merge, in place, the tokens ``pooled`` (k,) into its first: that token's probability becomes
    their sum (its logit the log-sum-exp of theirs) and the others can no longer be picked.

    For tokens that end a row the same way (END and EOS close a span), so that the model's wish to
    stop is one event: greedy decoding then weighs the whole of it against the best other token."""
    if len(pooled) < 2:
        return
    logits[:, pooled[0]] = torch.logsumexp(logits[:, pooled], dim=-1)
    logits[:, pooled[1:]] = float("-inf")


def penalise_repeats(logits: torch.Tensor, histories: Sequence[Sequence[int]], penalty: float) -> None:
    """Apply the repetition penalty in place, each row over its own history (padding excluded)."""
    if penalty == 1.0:
        return
    for row, history in enumerate(histories):
        if not history:
            continue
        seen = torch.tensor(sorted(set(history)), device=logits.device)
        values = logits[row, seen]
        logits[row, seen] = torch.where(values > 0, values / penalty, values * penalty)


def ban_repeated_ngrams(logits: torch.Tensor, histories: Sequence[Sequence[int]], size: int) -> None:
    """Forbid in place, per row, every token that would complete a ``size``-token run its history
    already holds: the tokens that followed each earlier occurrence of the history's last ``size - 1``."""
    if size == 0:
        return
    for row, history in enumerate(histories):
        if len(history) < size:
            continue
        tokens = list(history)
        tail = tokens[len(tokens) - size + 1 :]
        repeats = {
            tokens[start + size - 1]
            for start in range(len(tokens) - size + 1)
            if tokens[start : start + size - 1] == tail
        }
        if repeats:
            logits[row, torch.tensor(sorted(repeats), device=logits.device)] = float("-inf")


class Program(Protocol):
    """What one row does with the model's choices."""

    done: bool

    def history(self) -> Sequence[int]:
        """The tokens the repetition penalty and the n-gram guard count as already used."""
        ...

    def suppressed(self) -> Sequence[int]:
        """Tokens that may not be chosen at this step (e.g. EOS before ``min_new_tokens``)."""
        ...

    def advance(self, choice: int) -> int | None:
        """Take the model's choice; return the token to feed next, or ``None`` (nothing to feed)."""
        ...


@dataclass
class Continuation:
    """A row that continues its prompt until a stop token, a ``stop`` rule or ``max_new_tokens``.

    A stop token is not kept; ``min_new_tokens`` holds the stop tokens back until that many tokens exist.
    """

    prompt: list[int]
    max_new_tokens: int
    stop_ids: frozenset[int] = frozenset()
    min_new_tokens: int = 0
    stop: Any = None  # a callable (tokens so far) -> bool, checked after each kept token
    tokens: list[int] = field(default_factory=list)
    done: bool = False

    def history(self) -> Sequence[int]:
        return [*self.prompt, *self.tokens]

    def suppressed(self) -> Sequence[int]:
        return sorted(self.stop_ids) if len(self.tokens) < self.min_new_tokens else ()

    def advance(self, choice: int) -> int | None:
        if self.done:
            return None
        if choice in self.stop_ids:
            self.done = True
            return None
        self.tokens.append(choice)
        if len(self.tokens) >= self.max_new_tokens or (self.stop is not None and self.stop(self.tokens)):
            self.done = True
            return None
        return choice


@dataclass
class Prompt:
    """The tokens a row starts from. In hybrid mode ``is_span`` says which are span tokens."""

    ids: list[int]
    is_span: list[bool] | None = None

    def __post_init__(self) -> None:
        if not self.ids:
            raise ValueError("a row to decode needs at least one token")
        if self.is_span is not None and len(self.is_span) != len(self.ids):
            raise ValueError(f"is_span has {len(self.is_span)} entries for {len(self.ids)} tokens")


@dataclass
class Past:
    """Tokens already run through the model: their key/value cache and what they were."""

    cache: Any  # the model's key/value cache
    valid: torch.Tensor  # (b, p) bool
    is_span: torch.Tensor  # (b, p) bool


def left_pad(
    prompts: Sequence[Prompt], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ids, valid, is_span)``, each (b, n), rows padded on the left."""
    n = max(len(p.ids) for p in prompts)
    b = len(prompts)
    ids = torch.full((b, n), pad_id, dtype=torch.long, device=device)
    valid = torch.zeros((b, n), dtype=torch.bool, device=device)
    is_span = torch.zeros((b, n), dtype=torch.bool, device=device)
    for row, prompt in enumerate(prompts):
        width = len(prompt.ids)
        ids[row, n - width :] = torch.tensor(prompt.ids, device=device)
        valid[row, n - width :] = True
        if prompt.is_span is not None:
            is_span[row, n - width :] = torch.tensor(prompt.is_span, dtype=torch.bool, device=device)
    return ids, valid, is_span


def prefill(
    model: torch.nn.Module, prompts: Sequence[Prompt], mode: AttentionMode | str, pad_id: int
) -> tuple[Past, torch.Tensor]:
    """Run ``prompts`` through the model once; return their cache and the last position's hidden (b, d)."""
    device = next(model.parameters()).device
    ids, valid, is_span = left_pad(prompts, pad_id, device)
    out = run_decoder(model, ids, valid, mode, is_span, use_cache=True)
    return Past(out.cache, valid, is_span), out.hidden[:, -1]


def decode(
    model: torch.nn.Module,
    prompts: Sequence[Prompt],
    programs: Sequence[Program],
    mode: AttentionMode | str,
    sampling: Sampling,
    pad_id: int,
    *,
    banned_ids: Sequence[int] = (),
    pooled_ids: Sequence[int] = (),
    past: Past | None = None,
    use_cache: bool = True,
    first_row: int = 0,
    step_logits: list[torch.Tensor] | None = None,
) -> Past | None:
    """Decode every row until its program is done; the programs hold the results.

    ``past`` continues from tokens already in a cache (an answer's context): the prompts are then
    fed on top of it. ``banned_ids`` are never chosen; ``pooled_ids`` are picked as one token, the
    first, with their summed probability (:func:`pool_tokens`), after every ban. ``first_row`` is
    the index of row 0 within the caller's whole request (for the seeding rule). ``step_logits``,
    when given, collects each step's logits after banning and pooling (for equivalence tests).
    Returns the final cache (``None`` when ``use_cache=False``), holding everything fed, so a caller
    that shares it can crop it.
    """
    if len(prompts) != len(programs):
        raise ValueError(f"{len(prompts)} prompts for {len(programs)} programs")
    if past is not None and not use_cache:
        raise ValueError("decoding on top of a cache needs use_cache=True")
    mode = AttentionMode(mode)
    device = next(model.parameters()).device
    generators = sampling.generators(len(prompts), device, first_row)
    banned = torch.tensor(sorted(set(banned_ids)), dtype=torch.long, device=device)
    if set(pooled_ids) & set(banned_ids):
        raise ValueError(f"pooled_ids {list(pooled_ids)} overlap banned_ids {list(banned_ids)}")
    pooled = torch.tensor(list(dict.fromkeys(pooled_ids)), dtype=torch.long, device=device)

    ids, valid, is_span = left_pad(prompts, pad_id, device)
    if past is not None:
        out = run_decoder(
            model, ids, valid, mode, is_span, past.cache, past.valid, past.is_span, use_cache=True
        )
        valid = torch.cat([past.valid, valid], dim=1)
        is_span = torch.cat([past.is_span, is_span], dim=1)
    else:
        out = run_decoder(model, ids, valid, mode, is_span, use_cache=use_cache)
    while True:
        logits = logits_at(model, out.hidden[:, -1])  # (b, V)
        if len(banned):
            logits[:, banned] = float("-inf")
        for row, program in enumerate(programs):
            if not program.done and (held := program.suppressed()):
                logits[row, torch.tensor(list(held), device=device)] = float("-inf")
        histories = [p.history() for p in programs]
        penalise_repeats(logits, histories, sampling.repetition_penalty)
        ban_repeated_ngrams(logits, histories, sampling.no_repeat_ngram)
        pool_tokens(logits, pooled)
        if step_logits is not None:
            step_logits.append(logits.detach().cpu())
        chosen = pick_tokens(logits, sampling, generators).tolist()
        feed = [program.advance(token) for program, token in zip(programs, chosen, strict=True)]
        if all(f is None for f in feed):
            return Past(out.cache, valid, is_span) if use_cache else None
        new_ids = torch.tensor([[pad_id if f is None else f] for f in feed], device=device)  # (b, 1)
        new_valid = torch.tensor([[f is not None] for f in feed], device=device)
        new_span = torch.ones_like(new_valid)
        if use_cache:
            out = run_decoder(
                model, new_ids, new_valid, mode, new_span, out.cache, valid, is_span, use_cache=True
            )
        valid = torch.cat([valid, new_valid], dim=1)
        is_span = torch.cat([is_span, new_span], dim=1)
        if not use_cache:
            ids = torch.cat([ids, new_ids], dim=1)
            out = run_decoder(model, ids, valid, mode, is_span)
