"""Training-step benchmark: the shared three-objective step against a naive one, at equal batch.

- ``shared`` (what ``magnet train`` runs): one decoder pass over the laid-out sequences serves
  MNTP and MSG with LM-head logits only at the loss positions, plus one bidirectional pass over
  the contrastive views (anchors and positives in one batch) without the LM head.
- ``naive``: three separate full model calls with full-vocabulary logits at every position:
  MNTP on the masked text (bidirectional), MSG on the span layout (hybrid), and SSCL through the
  model's own forward (hidden states taken from ``output_hidden_states``).

Both do forward + backward through a LoRA model on the same batch; tokens/s counts the real
tokens of the shared step's sequences for both, so the ratio is the ratio of step times.
Runs are interleaved (shared, naive, shared, ...) and the median is reported, so load from other
processes on this shared machine hits both sides alike. Prints a table and writes JSON.

    python benchmarks/bench_train.py                       # the embedded default model
    python benchmarks/bench_train.py --model tiny          # a tiny random model (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from magnetsdk.train.adaptation import make_trainable
from magnetsdk.train.collate import LMSettings, build_lm_example, collate_lm, collate_views
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.masking import example_rng
from magnetsdk.train.objectives import MagnetObjectives, info_nce

from magnetsdk.attention import AttentionMode, allowed, backend_mask, position_ids
from magnetsdk.encoding import special_prefix
from magnetsdk.layout import resolve_layout_tokens

ROOT = Path(__file__).resolve().parents[1]
WORDS = (
    "the river rose after a long night of rain while the town slept and the old bridge held against the water "
    "as engineers watched from the bank and counted the hours until morning light"
).split()


def texts(count: int, words: int) -> list[str]:
    generator = torch.Generator().manual_seed(0)
    out = []
    for _ in range(count):
        picks = torch.randint(0, len(WORDS), (words,), generator=generator).tolist()
        out.append(" ".join(WORDS[i] for i in picks).capitalize() + ".")
    return out


def load(name: str):
    if name == "tiny":
        from magnetsdk.testing import tiny_model, tiny_tokenizer

        return tiny_model(), tiny_tokenizer(), "tiny-llama"
    from magnetsdk import Magnet

    magnet = Magnet.from_pretrained(name, device="cpu")
    return magnet.model, magnet.tokenizer, magnet.name


def build_batches(tokenizer, batch: int, words: int, max_length: int, view_words: int | None):
    layout, _ = resolve_layout_tokens(tokenizer)
    prefix = special_prefix(tokenizer)
    eos = tokenizer.eos_token_id
    sample = texts(batch, words)
    ids = [
        tokenizer(t, add_special_tokens=False)["input_ids"][: max_length - len(prefix) - 9] for t in sample
    ]

    def lm(mntp: bool, msg: bool):
        settings = LMSettings(mntp, msg, 0.2, 0.15, 3, 0.0, 0.0)
        examples = [
            build_lm_example(x, layout, prefix, eos, len(tokenizer), settings, example_rng(0, i))
            for i, x in enumerate(ids)
        ]
        return collate_lm(examples, eos)

    view_texts = sample if view_words is None else texts(batch, view_words)
    views = collate_views(
        tokenizer,
        view_texts,
        view_texts,
        [None] * batch,
        "Given the sentence, find its representation:",
        max_length,
        eos,
    )
    return lm(True, True), lm(True, False), lm(False, True), views


def shared_step(objectives: MagnetObjectives, lm, views) -> None:
    out = objectives(lm, views, (1.0, 1.0, 1.0))
    out.total.backward()


def naive_step(model, mntp_batch, msg_batch, views) -> None:
    impl = "sdpa"

    def full_logits(batch, mode):
        mask = backend_mask(allowed(mode, batch.valid, batch.is_span), impl, model.dtype)
        return model(
            input_ids=batch.input_ids, attention_mask=mask, position_ids=position_ids(batch.valid)
        ).logits

    logits = full_logits(mntp_batch, AttentionMode.BIDIRECTIONAL)  # (b, n, V) at every position
    mntp = F.cross_entropy(
        logits[mntp_batch.mntp_rows, mntp_batch.mntp_positions].float(), mntp_batch.mntp_targets
    )
    logits = full_logits(msg_batch, AttentionMode.HYBRID)
    msg = F.cross_entropy(logits[msg_batch.msg_rows, msg_batch.msg_positions].float(), msg_batch.msg_targets)
    mask = backend_mask(allowed(AttentionMode.BIDIRECTIONAL, views.valid), impl, model.dtype)
    out = model(
        input_ids=views.input_ids,
        attention_mask=mask,
        position_ids=position_ids(views.valid),
        output_hidden_states=True,
    )
    hidden = out.hidden_states[-1]  # the final-norm hidden states; out.logits were computed and unused
    last = torch.stack([hidden[i, len(item.ids) - 1] for i, item in enumerate(views.inputs)])
    b = views.anchors
    sscl = info_nce(last[:b], last[b : 2 * b], 0.05)
    (mntp + msg + sscl).backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default=None, help="model name or directory, or 'tiny' [default: the embedded model]"
    )
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--words", type=int, default=40, help="words per text")
    parser.add_argument("--max-length", type=int, default=96)
    parser.add_argument(
        "--view-words",
        type=int,
        default=None,
        help="words per contrastive view, e.g. 12 for sentence pairs [default: the LM texts themselves]",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: torch's]")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "train.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tokenizer, name = load(args.model)
    config = TrainConfig(data=["unused"], lora_dropout=0.0)
    trained = make_trainable(model, config, [])
    objectives = MagnetObjectives(trained, "hybrid", 0.05)
    lm, mntp_batch, msg_batch, views = build_batches(
        tokenizer, args.batch, args.words, args.max_length, args.view_words
    )
    tokens = lm.tokens + views.tokens

    runs = {
        "shared": lambda: shared_step(objectives, lm, views),
        "naive": lambda: naive_step(trained, mntp_batch, msg_batch, views),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for run in runs.values():  # warm-up
        run()
        trained.zero_grad(set_to_none=True)
    for _ in range(args.repeats):
        for key, run in runs.items():
            start = time.perf_counter()
            run()
            times[key].append(time.perf_counter() - start)
            trained.zero_grad(set_to_none=True)
    median = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "model": name,
        "batch": args.batch,
        "words": args.words,
        "view_words": args.view_words,
        "lm_tokens": lm.tokens,
        "view_tokens": views.tokens,
        "loss_positions": int(lm.mntp_targets.numel() + lm.msg_targets.numel()),
        "vocab": int(trained.get_output_embeddings().weight.shape[0]),
        "seconds": {k: [round(t, 4) for t in v] for k, v in times.items()},
        "tokens_per_s": {k: round(tokens / t, 1) for k, t in median.items()},
        "speedup": round(median["naive"] / median["shared"], 3),
        "goal": 1.5,
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
    }
    print(
        f"model {name}, batch {args.batch}, {tokens} tokens per step ({lm.tokens} LM + {views.tokens} views)"
    )
    print(f"{'step':<8} {'median s':>9} {'tokens/s':>9}")
    for key in runs:
        print(f"{key:<8} {median[key]:>9.3f} {result['tokens_per_s'][key]:>9.1f}")
    print(f"speedup (naive time / shared time): {result['speedup']:.2f}x (goal >= 1.5x)")

    out = Path(args.out)
    existing = json.loads(out.read_text()) if out.is_file() else {}
    key = name if args.view_words is None else f"{name} (views of {args.view_words} words)"
    existing[key] = result
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(existing, indent=2) + "\n")
    tmp.replace(out)


if __name__ == "__main__":
    main()
