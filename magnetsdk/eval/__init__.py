"""magnetsdk.eval: the measurements of the MAGNET paper, one module per measurement.

- :mod:`~magnetsdk.eval.sts`: Spearman x100 of embedding cosine vs gold similarity (STS-B, SICK, tsv).
- :mod:`~magnetsdk.eval.repetition`: rep-4 and rep-sen of greedy and nucleus continuations.
- :mod:`~magnetsdk.eval.infill`: span perplexity with both sides (hybrid) vs the left side only (causal).
- :mod:`~magnetsdk.eval.probe`: a linear probe on frozen token features (CoNLL files).
- :mod:`~magnetsdk.eval.dependence`: attention dependence before / on / after each token (UBMoE-LLM).
- :mod:`~magnetsdk.eval.lm`: causal perplexity of plain text.
- :mod:`~magnetsdk.eval.compare`: several result files side by side, as a Markdown table and plots.

Every task returns an :class:`~magnetsdk.eval.result.EvalResult`, which is written as JSON by its one
writer. Evaluation data is never downloaded: callers pass files. Importing this package is light;
each task module imports what it needs.
"""

from __future__ import annotations
