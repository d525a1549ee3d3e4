"""Causal text generation: prompts continued by :func:`magnetsdk.decoding.decode` in the causal mode.

Generation reads with the model's native causal attention only, so every attention backend
(flash-attention included) serves it. Prompts are left-padded for batching; position ids count
real tokens, so a prompt's continuation does not depend on the other prompts of its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from magnetsdk.attention import AttentionMode
from magnetsdk.decoding import Continuation, Prompt, Sampling, check_decoding, decode
from magnetsdk.encoding import pad_id


@dataclass
class GenerationSettings:
    max_new_tokens: int = 64
    temperature: float = 0.7  # 0 means greedy
    top_p: float = 0.9
    repetition_penalty: float = 1.1
    seed: int | None = None
    chat: bool = False  # wrap the prompt in the tokenizer's chat template
    min_new_tokens: int = 0  # EOS is suppressed until this many tokens (fixed-length measurements)

    def __post_init__(self) -> None:
        check_decoding(self.max_new_tokens, self.temperature, self.top_p)
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise ValueError(
                f"min_new_tokens={self.min_new_tokens} must be between 0 and max_new_tokens={self.max_new_tokens}"
            )
        self.sampling  # noqa: B018 - validates the repetition penalty

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.repetition_penalty, self.seed)


def render_prompt(tokenizer, prompt: str, chat: bool) -> str:
    if not chat:
        return prompt
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat=True, but this tokenizer has no chat template; pass chat=False")
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )


def generate_texts(
    model: torch.nn.Module,
    tokenizer,
    prompts: list[str],
    settings: GenerationSettings,
    first_row: int = 0,
    banned_ids: Sequence[int] = (),
) -> list[str]:
    """Continue each prompt; return only the new text of each. ``banned_ids`` are never generated
    (a model's layout tokens: they belong to infill sequences, never to a continuation).

    ``first_row`` is the index of ``prompts[0]`` in the caller's whole request (the seeding rule of
    :mod:`magnetsdk.decoding`: row ``i`` samples with seed ``seed + i``).
    """
    rendered = [render_prompt(tokenizer, p, settings.chat) for p in prompts]
    add_special = not settings.chat  # a chat template already carries its special tokens
    encoded = [tokenizer(text, add_special_tokens=add_special)["input_ids"] for text in rendered]
    if all(not e for e in encoded):
        raise ValueError("every prompt is empty after tokenization; give at least one prompt with text")
    if any(not e for e in encoded):
        raise ValueError("an empty prompt gives the model nothing to continue; pass some text")
    pad = pad_id(tokenizer)
    eos = tokenizer.eos_token_id
    stop_ids = frozenset() if eos is None else frozenset({eos})
    programs = [
        Continuation(ids, settings.max_new_tokens, stop_ids, settings.min_new_tokens) for ids in encoded
    ]
    decode(
        model,
        [Prompt(ids) for ids in encoded],
        programs,
        AttentionMode.CAUSAL,
        settings.sampling,
        pad,
        banned_ids=banned_ids,
        first_row=first_row,
    )
    return [tokenizer.decode(p.tokens, skip_special_tokens=True) for p in programs]
