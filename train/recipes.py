"""Training recipes: named presets of :class:`magnetsdk.train.config.TrainConfig` fields.

A recipe is data, not code: every recipe runs the same loop, collation and losses; it only
sets the objective weights, the attention mode of the language-modelling pass and a few
rates. A field the user sets explicitly always wins over the recipe.

- ``magnet`` (default): MNTP + SSCL + MSG in one hybrid-mask pass plus the contrastive pass,
  with a fraction of plain next-token examples (MAGNET, Khosla et al. 2025).
- ``llm2vec``: full bidirectional attention, MNTP for the first half of the steps, then
  unsupervised SimCSE (dropout positives) for the second half (LLM2Vec, BehnamGhader et al. 2024).
- ``meap``: plain causal next-token prediction with 15% of the input tokens replaced by the
  mask token (MEAP, Zhuang et al. 2025).
- ``mntp-only``, ``sscl-only``, ``msg-only``: single-objective ablations of ``magnet``.
- ``ubmoe-ffn``: stage 1 of UBMoE-LLM (Li et al., ICML 2025): bidirectional contrastive learning
  (SSCL alone) with LoRA only on the FFN (MLP) projections, so the tuned MLPs can later serve as
  the "bidirectional expert" beside the original ones (stage 2: :mod:`magnetsdk.train.ubmoe`).
"""

from __future__ import annotations

from typing import Any

from magnetsdk.layout import DEFAULT_INFILL_LAYOUT

_MAGNET: dict[str, Any] = {
    "mntp_weight": 1.0,
    "sscl_weight": 1.0,
    "msg_weight": 1.0,
    "lm_attention": "hybrid",
    "no_context_fraction": 0.2,
    "input_mask_probability": 0.0,
    "mntp_first_fraction": 0.0,
    "positives": "auto",
    "lora_target_modules": "all-linear",  # peft: every linear projection of the decoder
    # Missing-span examples (docs/results.md, "Infill layouts"): spans read a clean context in the
    # layout chosen by measurement, MNTP trains in its own examples, spans are cut at word boundaries.
    "infill_layout": DEFAULT_INFILL_LAYOUT,
    "mntp_fraction": 0.3,
    "msg_mask_fraction": 0.0,
    "span_unit": "word",
    "context_loss": False,
}

# The FFN projections of the gated-MLP decoders magnetsdk supports (Llama, Qwen2, Mistral, ...).
FFN_MODULES = ["gate_proj", "up_proj", "down_proj"]

RECIPES: dict[str, dict[str, Any]] = {
    "magnet": _MAGNET,
    "llm2vec": {
        **_MAGNET,
        "msg_weight": 0.0,
        "lm_attention": "bidirectional",
        "no_context_fraction": 0.0,
        "mntp_first_fraction": 0.5,
        "positives": "dropout",
        "infill_layout": "magnet",
    },
    "meap": {
        **_MAGNET,
        "mntp_weight": 0.0,
        "sscl_weight": 0.0,
        "lm_attention": "causal",
        "no_context_fraction": 1.0,
        "input_mask_probability": 0.15,
    },
    "mntp-only": {**_MAGNET, "sscl_weight": 0.0, "msg_weight": 0.0},
    "sscl-only": {**_MAGNET, "mntp_weight": 0.0, "msg_weight": 0.0},
    "msg-only": {**_MAGNET, "mntp_weight": 0.0, "sscl_weight": 0.0},
    "ubmoe-ffn": {
        **_MAGNET,
        "mntp_weight": 0.0,
        "msg_weight": 0.0,
        "lm_attention": "bidirectional",
        "no_context_fraction": 0.0,
        "lora_target_modules": FFN_MODULES,
    },
}


def recipe_defaults(name: str) -> dict[str, Any]:
    """The field values recipe ``name`` sets; raises a ValueError listing the recipes."""
    if name not in RECIPES:
        raise ValueError(f"recipe={name!r} is not one of {sorted(RECIPES)}")
    return {k: (list(v) if isinstance(v, list) else v) for k, v in RECIPES[name].items()}
