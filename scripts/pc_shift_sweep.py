"""STS-B dev with the first principal component shifted or removed, for several weights at once.

The sentences are embedded once (un-normalised, without any stored shift); the component is
fitted on ``--fit-texts`` (other texts than the evaluated ones); then each setting is applied to
the same vectors and scored with the evaluation's own ``score_pairs``. The weights are given in
units of the standard deviation of the fit texts' projections on ``v1`` (a raw ``lambda`` means
nothing across models whose embedding norms differ by orders of magnitude); the table also prints
the raw ``lambda`` that ``magnet shift --weight`` and ``magnet eval sts --shift-weight`` take.

    python scripts/pc_shift_sweep.py --model default --fit-texts runs/data2/stsb_train_sentences.txt \
        --sts ../shared/data/stsb/sts-dev.csv --output benchmarks/results/pc_shift_base.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from magnetsdk import Magnet
from magnetsdk.alignment import PrincipalShift, ShiftMode
from magnetsdk.config import atomic_write_text
from magnetsdk.eval.sts import read_sts, score_pairs
from magnetsdk.records import read_texts


class ShiftedVectors:
    """An STS encoder over vectors computed once; ``shift`` (or None) is applied on the way out."""

    def __init__(self, magnet: Magnet, texts: list[str], batch_size: int) -> None:
        vectors = magnet.encode(texts, normalize=False, principal_shift=False, batch_size=batch_size)
        self.rows = {t: v for t, v in zip(texts, np.asarray(vectors, dtype=np.float32), strict=True)}
        self.shift: PrincipalShift | None = None

    def encode_texts(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        vectors = np.stack([self.rows[t] for t in texts])
        if self.shift is not None:
            vectors = self.shift.apply(vectors)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--fit-texts", type=Path, required=True)
    parser.add_argument("--sts", type=Path, required=True)
    parser.add_argument("--weights", default="-2,-1,-0.5,0.5,1,2", help="in standard deviations")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()

    magnet = Magnet.from_pretrained(args.model)
    pairs = read_sts(args.sts)
    fit_texts = read_texts(args.fit_texts, "text")
    fit_vectors = magnet.encode(fit_texts, normalize=False, principal_shift=False, batch_size=args.batch_size)
    fitted = PrincipalShift.fit(fit_vectors, ShiftMode.REMOVE)
    projections = np.asarray(fit_vectors, dtype=np.float64) @ fitted.component
    sigma = float(projections.std())
    encoder = ShiftedVectors(
        magnet, list(dict.fromkeys(pairs.sentences1 + pairs.sentences2)), args.batch_size
    )

    settings: list[tuple[str, PrincipalShift | None, float | None]] = [("none", None, None)]
    settings.append(("remove", fitted, None))
    for units in (float(w) for w in args.weights.split(",")):
        shift = PrincipalShift(fitted.component, ShiftMode.SHIFT, units * sigma, samples=len(fit_texts))
        settings.append((f"shift {units:+g} sd", shift, units * sigma))
    rows = []
    for label, shift, weight in settings:
        encoder.shift = shift
        scores = score_pairs(encoder, pairs)
        rows.append({"setting": label, "lambda": weight, **scores})

    print(f"{magnet!r}; v1 fitted on {len(fit_texts)} texts; projection mean "
          f"{projections.mean():.3g}, sd {sigma:.3g}")  # fmt: skip
    print("| setting | lambda | STS-B dev Spearman x100 |\n|---|---|---|")
    for row in rows:
        weight = "" if row["lambda"] is None else f"{row['lambda']:.3g}"
        print(f"| {row['setting']} | {weight} | {row['spearman']:.2f} |")
    record = {
        "model": magnet.identity.to_dict(),
        "fit_texts": str(args.fit_texts),
        "fit_count": len(fit_texts),
        "projection_mean": float(projections.mean()),
        "projection_sd": sigma,
        "sts": str(args.sts),
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.output, json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
