"""Causal text generation through the model's native ``generate``.

Generation uses the causal mode only, so every attention backend (flash-attention included)
serves it. Prompts are left-padded for batching; ``generate`` derives position ids from the
attention mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def check_decoding(max_new_tokens: int, temperature: float, top_p: float) -> None:
    """The checks every decoding loop's settings share (generate, infill, answer)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be at least 1")
    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0 (0 is greedy)")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p} must be in (0, 1]")


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
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty={self.repetition_penalty} must be > 0 (1.0 disables it)")


def render_prompt(tokenizer, prompt: str, chat: bool) -> str:
    if not chat:
        return prompt
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat=True, but this tokenizer has no chat template; pass chat=False")
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )


def generate_texts(
    model: torch.nn.Module, tokenizer, prompts: list[str], settings: GenerationSettings
) -> list[str]:
    """Continue each prompt; return only the new text of each."""
    device = next(model.parameters()).device
    rendered = [render_prompt(tokenizer, p, settings.chat) for p in prompts]
    add_special = not settings.chat  # a chat template already carries its special tokens
    encoded = [tokenizer(text, add_special_tokens=add_special)["input_ids"] for text in rendered]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(e) for e in encoded)
    if width == 0:
        raise ValueError("every prompt is empty after tokenization; give at least one prompt with text")
    ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, seq in enumerate(encoded):
        if seq:
            ids[row, width - len(seq) :] = torch.tensor(seq)
            mask[row, width - len(seq) :] = 1
    if (mask.sum(-1) == 0).any():
        raise ValueError("an empty prompt gives the model nothing to continue; pass some text")
    sample = settings.temperature > 0
    if settings.seed is not None:
        torch.manual_seed(settings.seed)
    kwargs = dict(
        max_new_tokens=settings.max_new_tokens,
        do_sample=sample,
        repetition_penalty=settings.repetition_penalty,
        pad_token_id=pad_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if settings.min_new_tokens:
        kwargs["min_new_tokens"] = settings.min_new_tokens
    if sample:
        kwargs.update(temperature=settings.temperature, top_p=settings.top_p, top_k=0)
    else:
        kwargs.update(temperature=None, top_p=None, top_k=None)
    output = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
    new = output[:, width:]
    return [tokenizer.decode(row, skip_special_tokens=True) for row in new]
