"""Checks of what a caller passes to :class:`magnetsdk.Magnet`'s encode, infill and generate.

Each check raises a ``TypeError`` or ``ValueError`` that names the argument, the position and
what to pass instead, before any tokenizer or model sees the input. This module imports nothing
of magnetsdk and knows nothing about models beyond a tokenizer's ``__call__`` and ``decode``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any


def check_texts(values: str | Iterable[str], name: str = "texts") -> list[str]:
    """``values`` as a list of strings (a single string is a list of one); ``None``, bytes or any
    other type, at the top or inside the list, is a ``TypeError`` saying which item and what to do."""
    if isinstance(values, str):
        return [values]
    if values is None:
        raise TypeError(f"{name} is None; pass a string or a list of strings")
    if isinstance(values, (bytes, bytearray)):
        raise TypeError(f"{name} is bytes; decode it to a string first ({name}.decode('utf-8'))")
    if isinstance(values, dict) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a string or a list of strings, not {type(values).__name__}")
    items = list(values)
    for i, value in enumerate(items):
        if isinstance(value, (bytes, bytearray)):
            raise TypeError(
                f"{name}[{i}] is bytes; decode it to a string first ({name}[{i}].decode('utf-8'))"
            )
        if not isinstance(value, str):
            raise TypeError(f"{name}[{i}] is {type(value).__name__} {value!r}, expected a string")
    return items


LINE_BREAKS = ("auto", "allow", "forbid")  # Magnet.infill(line_breaks=...)


def check_line_breaks(value: Any) -> str:
    """One of :data:`LINE_BREAKS`: whether infill fills may break a line (``"auto"``: only in a
    text that holds a line break itself)."""
    if value not in LINE_BREAKS:
        raise ValueError(f"line_breaks={value!r}: use one of {list(LINE_BREAKS)}")
    return value


def check_temperature(value: Any) -> float:
    """A finite number >= 0 (0 is greedy); NaN, infinity, negatives and non-numbers are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"temperature={value!r} must be a number >= 0 (0 is greedy)")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"temperature={value!r} must be a finite number >= 0 (0 is greedy)")
    return float(value)


def check_max_length(value: Any, name: str = "max_length", minimum: int = 8) -> int | None:
    """``None`` (the model's default) or an integer of at least ``minimum`` tokens."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r} must be an integer number of tokens (or None for the model's)")
    if value < minimum:
        raise ValueError(f"{name}={value} must be at least {minimum} tokens (or None for the model's)")
    return value


def truncate_prompts(prompts: list[str], tokenizer: Any, max_tokens: int) -> list[str]:
    """Prompts longer than ``max_tokens`` tokens keep their last ``max_tokens`` tokens (a
    continuation follows the end of a prompt), with one warning saying how many were cut."""
    out, cut = [], 0
    for prompt in prompts:
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if len(ids) > max_tokens:
            prompt = tokenizer.decode(ids[-max_tokens:])
            cut += 1
        out.append(prompt)
    if cut:
        warnings.warn(
            f"{cut} of {len(prompts)} prompts are longer than {max_tokens} tokens (what the model's "
            "positions hold beside the new tokens) and keep only their last tokens",
            stacklevel=3,
        )
    return out
