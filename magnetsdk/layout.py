"""The token layout of infilling, shared by ``Magnet.infill`` and missing-span training.

A text with ``g`` gaps is laid out as one sequence: the *context* (the text with each gap
replaced by one GAP token) followed by the *span block* (each span opened by SPAN and closed by
END, in the order of the gaps)::

    context (bidirectional)                       span block (causal, sees all context)
    left ... GAP middle ... GAP right ...    |    SPAN s1 s2 ... END  SPAN t1 t2 ... END
    0    ...                          C-1    |    C    C+1 ...

- The context never depends on the span lengths (a caller does not know them), so its keys and
  values are computed once and reused while the spans are decoded.
- Position ids count real tokens: context 0..C-1, the span block continues at C.
- Span ``k`` fills the ``k``-th GAP; the model tells spans apart by counting END tokens.
- The MASK token replaces context tokens in masked next-token prediction (training only).

The four roles are played by tokens the tokenizer already has where it can (so the tied
embedding matrix needs no resize), chosen from :data:`RESERVED_CANDIDATES`; a tokenizer with none
of the candidates gets new tokens, and then the resized embeddings must be saved with the adapter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# Per role, tokens tried in order. SmolLM2's vocabulary has no mask or fill-in-the-middle tokens,
# but its code/notebook markup tokens (ids 3-16) never occur in prose.
RESERVED_CANDIDATES: dict[str, tuple[str, ...]] = {
    "mask": ("<mask>", "[MASK]", "<|mask|>", "<empty_output>"),
    "gap": ("<|fim_suffix|>", "<fim_suffix>", "<issue_comment>"),
    "span": ("<|fim_middle|>", "<fim_middle>", "<issue_start>"),
    "end": ("<|fim_pad|>", "<fim_pad>", "<issue_closed>"),
}
NEW_TOKENS = {
    "mask": "<|magnet_mask|>",
    "gap": "<|magnet_gap|>",
    "span": "<|magnet_span|>",
    "end": "<|magnet_end|>",
}


@dataclass(frozen=True)
class LayoutTokens:
    """The token strings that play each role (stored with the model) and their ids."""

    mask: str
    gap: str
    span: str
    end: str
    mask_id: int
    gap_id: int
    span_id: int
    end_id: int

    def strings(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if not k.endswith("_id")}


def resolve_layout_tokens(
    tokenizer, configured: dict[str, str] | None = None
) -> tuple[LayoutTokens, list[str]]:
    """Pick the layout tokens for ``tokenizer``.

    ``configured`` (from a saved model config) wins. Returns the tokens and the list of token
    strings that must be *added* to the tokenizer (empty when existing tokens were reused).
    """
    vocab = tokenizer.get_vocab()
    chosen: dict[str, str] = {}
    to_add: list[str] = []
    for role, candidates in RESERVED_CANDIDATES.items():
        if configured and role in configured:
            token = configured[role]
        else:
            token = next((c for c in candidates if c in vocab), NEW_TOKENS[role])
        if token not in vocab:
            to_add.append(token)
        chosen[role] = token
    if to_add:
        tokenizer.add_special_tokens(
            {"additional_special_tokens": to_add}, replace_extra_special_tokens=False
        )
        vocab = tokenizer.get_vocab()
    ids = {f"{role}_id": vocab[token] for role, token in chosen.items()}
    return LayoutTokens(**chosen, **ids), to_add


@dataclass
class LaidOut:
    """One laid-out sequence; lists of equal length."""

    input_ids: list[int]
    is_span: list[bool]
    # For each span token that is a prediction target, the index of the position whose output
    # predicts it (the token before it). Used for the missing-span loss.
    target_positions: list[int]
    targets: list[int]
    context_length: int


def lay_out(
    segments: list[list[int]],
    tokens: LayoutTokens,
    spans: list[list[int]] | None = None,
    prefix: list[int] | None = None,
) -> LaidOut:
    """Lay out ``segments`` (the text between gaps, ``g + 1`` pieces for ``g`` gaps) and ``spans``.

    With ``spans=None`` (inference) the sequence ends at the context and one SPAN token, ready to
    decode the first span. With spans (training), each span is written out and closed with END,
    and the targets are every span token and each END.
    ``prefix`` (e.g. a BOS token) is placed before the context.
    """
    gaps = len(segments) - 1
    if spans is not None and len(spans) != gaps:
        raise ValueError(f"{gaps} gaps need {gaps} spans, got {len(spans)}")
    context: list[int] = list(prefix or [])
    for i, segment in enumerate(segments):
        if i:
            context.append(tokens.gap_id)
        context.extend(segment)
    ids = list(context)
    target_positions: list[int] = []
    targets: list[int] = []
    if spans is None:
        ids.append(tokens.span_id)
    else:
        for span in spans:
            ids.append(tokens.span_id)
            for token in [*span, tokens.end_id]:
                target_positions.append(len(ids) - 1)
                targets.append(token)
                ids.append(token)
    is_span = [False] * len(context) + [True] * (len(ids) - len(context))
    return LaidOut(ids, is_span, target_positions, targets, len(context))
