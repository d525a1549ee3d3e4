"""The attention modes, as a name: a leaf module without torch.

:mod:`magnetsdk.attention` builds the masks that implement them; :mod:`magnetsdk.config` stores
the mode a model encodes with, and stays importable without torch by reading the name from here.
"""

from __future__ import annotations

from enum import Enum


class AttentionMode(str, Enum):
    CAUSAL = "causal"
    BIDIRECTIONAL = "bidirectional"
    HYBRID = "hybrid"
