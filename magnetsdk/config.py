"""What magnetsdk stores beside a model: how to encode with it, its token layout, its history.

One writer (:meth:`MagnetConfig.save`) and one reader (:meth:`MagnetConfig.load`) for
``magnet_config.json``; :func:`_upgrade` is the one place where older formats are brought up to
date.

The attention mode and pooling used for *encoding* belong to the model: a model that was never
trained bidirectionally is not encoded bidirectionally by default (SmolLM2-135M-Instruct on the full
STS-B dev set with the instruction, Spearman x100: causal mean 53.4, causal last-token 27.9,
bidirectional last-token 12.9; bidirectional mean 61.3 is the exception, see docs/results.md). So an
unadapted model gets :meth:`MagnetConfig.for_base_model` (causal, mean pooling) and an adapted one
records what it was trained for (bidirectional, last-token pooling).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from magnetsdk.files import atomic_write_text, current_umask
from magnetsdk.layout import DEFAULT_INFILL_LAYOUT, LEGACY_INFILL_LAYOUT, infill_layout
from magnetsdk.modes import AttentionMode

CONFIG_NAME = "magnet_config.json"
FORMAT_VERSION = 3  # 3: ``infill_layout``; 2: ``mixture`` (UBMoE); version 1 files have neither
DEFAULT_INSTRUCTION = "Given the sentence, find its representation:"


class Pooling(str, Enum):
    LAST = "last"  # the last real token (the appended EOS)
    MEAN = "mean"  # mean over the text tokens (instruction and EOS excluded)


@dataclass
class MagnetConfig:
    base_model: str | None = None
    instruction: str = DEFAULT_INSTRUCTION
    encode_attention: AttentionMode = AttentionMode.BIDIRECTIONAL
    pooling: Pooling = Pooling.LAST
    max_length: int = 512
    # Echo embeddings: give each text twice and pool over the second copy (for unadapted models).
    echo: bool = False
    # Role -> token string (see magnetsdk.layout); empty means "choose for this tokenizer".
    layout_tokens: dict[str, str] = field(default_factory=dict)
    # How a text with gaps is laid out for infilling (a name in magnetsdk.layout.INFILL_LAYOUTS).
    infill_layout: str = DEFAULT_INFILL_LAYOUT
    # Whether the model was adapted (trained with bidirectional/hybrid attention).
    adapted: bool = True
    # How the model was trained (recipe, data, steps, scores): free-form, written by training.
    training: dict[str, Any] = field(default_factory=dict)
    # A UBMoE expert mixture (magnetsdk.experts.MixtureConfig as a dict); empty for other models.
    mixture: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        self.encode_attention = choice(AttentionMode, self.encode_attention, "encode_attention")
        self.pooling = choice(Pooling, self.pooling, "pooling")
        infill_layout(self.infill_layout)  # an unknown name fails here, listing the layouts
        if self.max_length < 8:
            raise ValueError(f"max_length={self.max_length} is too small; use at least 8 tokens")

    @classmethod
    def for_base_model(cls, base_model: str | None) -> MagnetConfig:
        """Defaults for a model that was never adapted: causal attention with mean pooling."""
        return cls(
            base_model=base_model,
            encode_attention=AttentionMode.CAUSAL,
            pooling=Pooling.MEAN,
            adapted=False,
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["encode_attention"] = self.encode_attention.value
        data["pooling"] = self.pooling.value
        return data

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``magnet_config.json`` into ``directory`` atomically."""
        path = Path(directory) / CONFIG_NAME
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> MagnetConfig:
        path = Path(directory) / CONFIG_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"{path} not found: not a magnetsdk model directory") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path} is not valid JSON ({error}); restore it or re-save the model") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> MagnetConfig:
        data = _upgrade(dict(data), source)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: unknown keys {unknown}; known keys are {sorted(known)}")
        return cls(**data)


def choice(kind: type[Enum], value: Any, name: str) -> Any:
    """``kind(value)``, with an error that names the option and lists the valid values."""
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not one of {[member.value for member in kind]}") from None


def _upgrade(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Bring an older ``magnet_config.json`` up to :data:`FORMAT_VERSION`."""
    version = data.get("format_version", FORMAT_VERSION)
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{source} has format_version {version}, newer than this magnetsdk reads "
            f"({FORMAT_VERSION}); upgrade magnetsdk"
        )
    if version < 2:
        data.setdefault("mixture", {})
    if version < 3:
        data.setdefault("infill_layout", LEGACY_INFILL_LAYOUT)  # the one layout older models knew
    data["format_version"] = FORMAT_VERSION
    return data


# Re-exported: these helpers lived here before magnetsdk.files; callers may import either.
__all__ = ["CONFIG_NAME", "MagnetConfig", "Pooling", "choice", "atomic_write_text", "current_umask"]
