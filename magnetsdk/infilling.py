"""Fill gaps in a text using both sides, with the layout of :mod:`magnetsdk.layout`.

The context (the text with each gap replaced by one GAP token) is encoded once with
bidirectional attention; its keys and values are cached. The span block (SPAN s1 s2 ... END,
once per gap) is then decoded one token at a time from that cache. Because context tokens never
attend to span tokens under the hybrid mask, the cached context is exactly what a full
recompute with the hybrid mask would produce at every step; ``use_cache=False`` runs that
recompute and is the reference the tests and benchmarks compare against.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from magnetsdk.attention import AttentionMode
from magnetsdk.forward import logits_at, run_decoder
from magnetsdk.layout import LayoutTokens, lay_out

DEFAULT_GAP_MARKER = "[GAP]"


@dataclass
class InfillResult:
    text: str  # the input with every gap filled
    spans: list[str]  # the generated text of each gap, in order
    span_ids: list[list[int]] = field(repr=False, default_factory=list)


def split_gaps(text: str, marker: str) -> list[str]:
    if not marker:
        raise ValueError("gap marker must be a non-empty string")
    pieces = text.split(marker)
    if len(pieces) < 2:
        raise ValueError(
            f"no gap marker {marker!r} in the text; mark each gap with {marker!r} "
            "(or pass left=... and right=..., or choose another marker with gap_marker=...)"
        )
    return pieces


def pick_tokens(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> torch.Tensor:
    """Greedy when ``temperature == 0``, else nucleus sampling. ``logits`` (b, V) -> (b,)."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < top_p  # always keeps the top token
        sorted_probs = sorted_probs * keep
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@dataclass
class _Row:
    gaps: int
    spans: list[list[int]] = field(default_factory=list)
    current: list[int] = field(default_factory=list)
    force: int | None = None
    done: bool = False


def decode_spans(
    model: torch.nn.Module,
    contexts: list[list[list[int]]],
    tokens: LayoutTokens,
    prefix: list[int],
    pad_id: int,
    max_new_tokens: int = 32,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
    use_cache: bool = True,
    eos_id: int | None = None,
    step_logits: list[torch.Tensor] | None = None,
) -> list[list[list[int]]]:
    """Decode the spans of a batch of texts; ``contexts[i]`` is text ``i``'s token segments.

    Returns, per text, the token ids of each span (END excluded). A span is closed after
    ``max_new_tokens`` tokens if the model has not closed it. ``step_logits``, when given,
    collects the logits of every step (for equivalence tests).
    """
    device = next(model.parameters()).device
    laid = [lay_out(segments, tokens, spans=None, prefix=prefix) for segments in contexts]
    n = max(len(x.input_ids) for x in laid)
    b = len(laid)
    # Left-pad, so every row's next token lands in the same column.
    ids = torch.full((b, n), pad_id, dtype=torch.long, device=device)
    valid = torch.zeros((b, n), dtype=torch.bool, device=device)
    is_span = torch.zeros((b, n), dtype=torch.bool, device=device)
    for row, x in enumerate(laid):
        width = len(x.input_ids)
        ids[row, n - width :] = torch.tensor(x.input_ids, device=device)
        valid[row, n - width :] = True
        is_span[row, n - width :] = torch.tensor(x.is_span, device=device)
    rows = [_Row(gaps=len(segments) - 1) for segments in contexts]
    stop_ids = {tokens.end_id} | ({eos_id} if eos_id is not None else set())
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)

    # Layout tokens other than END never belong inside a span; an EOS closes the span like END.
    banned = torch.tensor([tokens.gap_id, tokens.span_id, tokens.mask_id], device=device)

    def next_logits(hidden: torch.Tensor) -> torch.Tensor:
        logits = logits_at(model, hidden)  # (b, V)
        logits[:, banned] = float("-inf")
        return logits

    out = run_decoder(model, ids, valid, AttentionMode.HYBRID, is_span, use_cache=use_cache)
    cache = out.cache
    logits = next_logits(out.hidden[:, -1])
    while True:
        if step_logits is not None:
            step_logits.append(logits.detach().cpu())
        chosen = pick_tokens(logits, temperature, top_p, generator).tolist()
        feed = []
        for row, state in zip(rows, chosen, strict=True):
            feed.append(_advance(row, state, tokens, max_new_tokens, stop_ids))
        if all(r.done for r in rows) and all(f is None for f in feed):
            break
        new_ids = torch.tensor([[f if f is not None else pad_id] for f in feed], device=device)  # (b, 1)
        new_valid = torch.tensor([[f is not None] for f in feed], device=device)
        new_span = torch.ones((b, 1), dtype=torch.bool, device=device)
        if use_cache:
            out = run_decoder(
                model,
                new_ids,
                new_valid,
                AttentionMode.HYBRID,
                new_span,
                past_key_values=cache,
                past_valid=valid,
                past_is_span=is_span,
                use_cache=True,
            )
            cache = out.cache
            ids = torch.cat([ids, new_ids], dim=1)
            valid = torch.cat([valid, new_valid], dim=1)
            is_span = torch.cat([is_span, new_span], dim=1)
        else:
            ids = torch.cat([ids, new_ids], dim=1)
            valid = torch.cat([valid, new_valid], dim=1)
            is_span = torch.cat([is_span, new_span], dim=1)
            out = run_decoder(model, ids, valid, AttentionMode.HYBRID, is_span)
        logits = next_logits(out.hidden[:, -1])
    return [r.spans for r in rows]


def _advance(
    row: _Row, choice: int, tokens: LayoutTokens, max_new_tokens: int, stop_ids: set[int]
) -> int | None:
    """Update one row with the model's choice; return the token to feed next (None: nothing)."""
    if row.done:
        return None
    if row.force is not None:  # the SPAN that opens the next gap, decided last step
        token, row.force = row.force, None
        return token
    if choice not in stop_ids and len(row.current) < max_new_tokens:
        row.current.append(choice)
        return choice
    row.spans.append(row.current)
    row.current = []
    if len(row.spans) == row.gaps:
        row.done = True
        return None
    row.force = tokens.span_id
    return tokens.end_id
