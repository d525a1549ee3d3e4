"""How the layout tokens look to the model, and whether the model ends a lone sentence: one table, JSON.

Two measurements, for each model given:

- the layout tokens (mask, gap, span, end) against each other and against EOS in the (tied)
  embedding matrix: cosine and distance. Reused reserved tokens keep the base model's rows; when
  those rows are equal, the model cannot tell the roles apart as inputs, and with tied embeddings
  every logit of one role is the logit of the others.
- P(EOS) right after a finished sentence: after each of 8 one-sentence texts (a text that opens a
  document, as the demo's prompt does) and after every inner " ." of 20 WikiText paragraphs
  (running text, where EOS is wrong). A model that learned to close lone texts puts more on EOS in
  the first case without moving the second.

    python scripts/layout_token_probe.py default-base default -o runs/eval/layout-tokens.json
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch

from magnetsdk import Magnet
from magnetsdk.forward import logits_at, run_decoder
from magnetsdk.modes import AttentionMode

ONE_SENTENCE = [
    "The best way to learn a new language is by doing it.",
    "The best way to learn a new language is by immersion.",
    "The capital of France is Paris.",
    "My favourite season is autumn.",
    "The weather today is sunny and warm.",
    "Water boils at 100 degrees Celsius.",
    "She opened the door and walked into the room.",
    "The meeting was moved to Thursday afternoon.",
]


def paragraphs(path: Path, count: int = 20, lines: int = 400) -> list[str]:
    """The first ``count`` long paragraphs (not headings) among the first ``lines`` lines."""
    rows = path.read_text(encoding="utf-8").split("\n")[:lines]
    return [r.strip() for r in rows if len(r.strip()) > 200 and not r.strip().startswith("=")][:count]


def eos_probabilities(magnet: Magnet, text: str) -> tuple[list[int], torch.Tensor]:
    """The token ids of ``text`` and P(EOS) after each of them, causal attention."""
    ids = magnet.tokenizer(text)["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        hidden = run_decoder(
            magnet.model, x, torch.ones_like(x, dtype=torch.bool), AttentionMode.CAUSAL
        ).hidden
        probs = torch.softmax(logits_at(magnet.model, hidden[0]), dim=-1)
    return ids, probs[:, magnet.tokenizer.eos_token_id]


def token_geometry(magnet: Magnet) -> dict[str, object]:
    roles = {**magnet.layout.strings(), "eos": magnet.tokenizer.eos_token}
    ids = {**magnet.layout.ids(), "eos": magnet.tokenizer.eos_token_id}
    rows = magnet.model.get_input_embeddings().weight.detach().float()
    cosine, distance = {}, {}
    for a, b in itertools.combinations(ids, 2):
        x, y = rows[ids[a]], rows[ids[b]]
        cosine[f"{a}/{b}"] = round(torch.nn.functional.cosine_similarity(x, y, dim=0).item(), 4)
        distance[f"{a}/{b}"] = round((x - y).norm().item(), 4)
    return {"tokens": roles, "ids": ids, "cosine": cosine, "distance": distance}


def probe(name: str, wikitext: Path) -> dict[str, object]:
    magnet = Magnet.from_pretrained(name)
    lone = [float(eos_probabilities(magnet, text)[1][-1]) for text in ONE_SENTENCE]
    inner = []
    for paragraph in paragraphs(wikitext):
        ids, probs = eos_probabilities(magnet, paragraph)
        inner += [
            float(probs[i]) for i, t in enumerate(ids[:-1]) if magnet.tokenizer.decode([t]).strip() == "."
        ]
    return {
        "model": name,
        **token_geometry(magnet),
        "p_eos_after_one_sentence": lone,
        "p_eos_after_one_sentence_mean": sum(lone) / len(lone),
        "p_eos_after_inner_period_mean": sum(inner) / len(inner),
        "inner_periods": len(inner),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="model names or directories, as --model takes them")
    parser.add_argument("--wikitext", type=Path, default=Path("../shared/data/wikitext2/wiki.valid.tokens"))
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    if not args.wikitext.exists():
        raise SystemExit(f"{args.wikitext} not found: pass --wikitext PATH to WikiText-2's wiki.valid.tokens")

    results = [probe(name, args.wikitext) for name in args.models]
    print(
        f"{'model':24} {'cos end/eos':>11} {'dist end/span':>13} {'P(EOS) lone':>11} {'P(EOS) inner .':>14}"
    )
    for r in results:
        print(
            f"{r['model']:24} {r['cosine']['end/eos']:11.4f} {r['distance']['span/end']:13.4f} "
            f"{r['p_eos_after_one_sentence_mean']:11.4f} {r['p_eos_after_inner_period_mean']:14.4f}"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
