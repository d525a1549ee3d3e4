"""Runtime benchmark: encoding throughput and cached infill, each against its baseline in the same run.

1. ``Magnet.encode`` tokens/s against sentence-transformers wrapping the same backbone with
   last-token pooling, at equal batch size and on the same instruction-prefixed texts.
2. Cached infill (context encoded once, spans decoded from its keys/values) against a full
   recompute with the hybrid mask at every step, for a 256-token context and 16 span tokens.

Runs are interleaved (A B A B ...) and the median is reported, so load from other processes on
this shared machine hits both sides alike. Prints a table and writes JSON.

    python benchmarks/bench_runtime.py                 # the embedded default model
    python benchmarks/bench_runtime.py --model DIR --repeats 5 --out benchmarks/results/runtime.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from magnetsdk import Magnet
from magnetsdk.infilling import decode_spans

ROOT = Path(__file__).resolve().parents[1]
WORDS = (
    "the river rose after a long night of rain while the town slept and the old bridge held against the water "
    "as engineers watched from the bank and counted the hours until morning light"
).split()


def sentences(count: int) -> list[str]:
    """Deterministic sentences of 8 to 40 words (no data files needed)."""
    generator = torch.Generator().manual_seed(0)
    out = []
    for _ in range(count):
        length = int(torch.randint(8, 41, (1,), generator=generator))
        picks = torch.randint(0, len(WORDS), (length,), generator=generator).tolist()
        out.append(" ".join(WORDS[i] for i in picks).capitalize() + ".")
    return out


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_encode(magnet: Magnet, model_dir: str, texts: list[str], batch_size: int, repeats: int) -> dict:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    instruction = magnet.config.instruction
    # Same backbone and tokenizer, ST's own pipeline, last-token pooling; the instruction as a prompt.
    transformer = Transformer(model_dir, model_kwargs={"dtype": torch.float32})
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="lasttoken")
    st = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    prompt = instruction + " "
    st_tokens = sum(len(ids) for ids in st.tokenizer([prompt + t for t in texts])["input_ids"])
    magnet_tokens = sum(len(ids) for ids in magnet.tokenizer([prompt + t for t in texts])["input_ids"]) + len(
        texts
    )

    def run_st():
        st.encode(texts, prompt=prompt, batch_size=batch_size, normalize_embeddings=True)

    variants = {
        "sentence-transformers (causal, last token)": (run_st, st_tokens),
        "Magnet.encode (causal, last token)": (
            lambda: magnet.encode(texts, batch_size=batch_size, attention="causal", pooling="last"),
            magnet_tokens,
        ),
        "Magnet.encode (bidirectional, last token)": (
            lambda: magnet.encode(texts, batch_size=batch_size, attention="bidirectional", pooling="last"),
            magnet_tokens,
        ),
    }
    for fn, _ in variants.values():
        fn()  # warm-up
    times = {name: [] for name in variants}
    for _ in range(repeats):
        for name, (fn, _) in variants.items():
            times[name].append(timed(fn))
    rows = {}
    for name, (_, tokens) in variants.items():
        median = statistics.median(times[name])
        rows[name] = {"tokens": tokens, "seconds_median": median, "tokens_per_s": tokens / median}
    baseline = rows["sentence-transformers (causal, last token)"]["tokens_per_s"]
    for row in rows.values():
        row["ratio_vs_sentence_transformers"] = row["tokens_per_s"] / baseline
    return {"texts": len(texts), "batch_size": batch_size, "variants": rows}


def bench_infill(magnet: Magnet, context_tokens: int, span_tokens: int, repeats: int) -> dict:
    # A 256-token context with one gap in the middle.
    words = sentences(200)
    ids = magnet.tokenizer(" ".join(words), add_special_tokens=False)["input_ids"][: context_tokens - 2]
    half = len(ids) // 2
    contexts = [[ids[:half], ids[half:]]]
    settings = dict(max_new_tokens=span_tokens, eos_id=None)

    def run(use_cache: bool):
        with torch.inference_mode():
            return decode_spans(
                magnet.model,
                contexts,
                magnet.layout,
                magnet.prefix,
                magnet.pad_id,
                use_cache=use_cache,
                **settings,
            )

    spans_cached, spans_full = run(True), run(False)  # warm-up, and the equivalence check
    times = {"cached": [], "recompute": []}
    for _ in range(repeats):
        times["cached"].append(timed(lambda: run(True)))
        times["recompute"].append(timed(lambda: run(False)))
    cached, full = statistics.median(times["cached"]), statistics.median(times["recompute"])
    generated = len(spans_cached[0][0])
    return {
        "context_tokens": len(magnet.prefix) + len(ids) + 1 + 1,  # prefix, text, GAP, SPAN
        "span_tokens_generated": generated,
        "greedy_outputs_equal": spans_cached == spans_full,
        "cached_seconds_median": cached,
        "recompute_seconds_median": full,
        "speedup": full / cached,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model name or directory [default: the embedded model]")
    parser.add_argument("--texts", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--span", type=int, default=16)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "runtime.json"))
    args = parser.parse_args()

    torch.manual_seed(0)
    magnet = Magnet.from_pretrained(args.model, device="cpu")
    from magnetsdk.loading import resolve

    model_dir = resolve(args.model).base
    encode = bench_encode(magnet, model_dir, sentences(args.texts), args.batch_size, args.repeats)
    infill = bench_infill(magnet, args.context, args.span, args.repeats)

    print(f"\nEncode: {encode['texts']} texts, batch size {encode['batch_size']}, median of {args.repeats}")
    print(f"{'variant':48} {'tokens/s':>10} {'ratio':>7}")
    for name, row in encode["variants"].items():
        print(f"{name:48} {row['tokens_per_s']:10.1f} {row['ratio_vs_sentence_transformers']:7.2f}")
    print(
        f"\nInfill: {infill['context_tokens']} context tokens, {infill['span_tokens_generated']} span tokens"
    )
    print(f"{'path':48} {'seconds':>10} {'ratio':>7}")
    print(
        f"{'full recompute (hybrid mask every step)':48} {infill['recompute_seconds_median']:10.3f} {1.0:7.2f}"
    )
    print(
        f"{'cached context keys/values':48} {infill['cached_seconds_median']:10.3f} {infill['speedup']:7.2f}"
    )
    print(f"greedy outputs equal: {infill['greedy_outputs_equal']}")

    result = {
        "benchmark": "runtime",
        "model": magnet.identity.to_dict(),
        "machine": {
            "cpu_count": torch.get_num_threads(),
            "platform": platform.platform(),
            "torch": torch.__version__,
        },
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "encode": encode,
        "infill": infill,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(out)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
