"""Answer benchmark: latency with and without context reuse, and answer quality on WikiText cloze questions.

1. Latency, at each context size (256, 1024, 4096 tokens of WikiText by default) and a fixed number
   of answer tokens (16; end-of-answer tokens are ignored so every run decodes the same count):
   - ``causal``: the baseline, plain causal attention over context + question, nothing cached;
   - ``hybrid miss``: the hybrid layout, the context prefilled bidirectionally and stored;
   - ``hybrid hit``: the same context again, decoded from the stored keys/values.
   Runs are interleaved (causal, miss, hit, causal, ...) and the median of ``--repeats`` is
   reported, so load from other processes on a shared machine hits every case alike.
2. Quality, on the set built by ``scripts/build_answer_set.py``: each question answered from its
   own paragraph (``gold``; with ``--retrieved`` also end to end, from the top-1 chunk of an index of
   all paragraphs) under both layouts: exact match of the copied entity, the answer containing it,
   and the mean negative log-likelihood (nats/token) of the reference answer after the prompt.
   Retrieval recall@1 of the question's own paragraph is always reported. The JSON is rewritten
   after every question, so a run stopped early keeps the figures of the questions it finished.

Prints tables and writes JSON.

    python benchmarks/bench_answer.py                          # the embedded default model
    python benchmarks/bench_answer.py --model DIR --adapter A --out benchmarks/results/answer-adapted.json
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import string
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from magnetsdk import Index, Magnet
from magnetsdk.answer_layout import framing, lay_out_answer
from magnetsdk.answering import AnswerSettings, answer_from_hits, decode_answer
from magnetsdk.config import atomic_write_text
from magnetsdk.context_cache import ContextCache
from magnetsdk.eval.answers import reference_nll
from magnetsdk.index import Hit

ROOT = Path(__file__).resolve().parents[1]
WIKITEXT = Path("/work/shared/data/wikitext2/wiki.valid.tokens")
ANSWER_SET = ROOT / "benchmarks" / "data" / "wikitext-answers.jsonl"
LATENCY_QUESTION = "What is the first article about?"


def long_text(path: Path, characters: int) -> str:
    """Paragraphs of WikiText (headings skipped), lightly detokenised, until ``characters`` long."""
    parts, total = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("="):
            line = re.sub(r" @(.)@ ", r"\1", line)
            line = re.sub(r" ([.,;:!?%)])", r"\1", line)
            parts.append(line)
            total += len(line)
            if total >= characters:
                break
    return "\n\n".join(parts)


def latency(magnet: Magnet, sizes: list[int], answer_tokens: int, repeats: int, source: Path) -> list[dict]:
    tokens = magnet.tokenizer(long_text(source, 8 * max(sizes)), add_special_tokens=False)["input_ids"]
    _, prompt = lay_out_answer(magnet.tokenizer, magnet.prefix, ["x"], LATENCY_QUESTION)
    rows = []
    for size in sizes:
        if len(tokens) < size:
            raise SystemExit(f"{source} gives only {len(tokens)} tokens; cannot build a {size}-token context")
        context = magnet.prefix + tokens[: size - len(magnet.prefix)]
        runs: dict[str, list] = {"causal": [], "hybrid miss": [], "hybrid hit": []}
        for _ in range(repeats):
            cache = ContextCache(max_entries=1)
            with magnet.lock, torch.inference_mode():
                for case, reuse in (("causal", False), ("hybrid miss", True), ("hybrid hit", True)):
                    out = decode_answer(
                        magnet.model, context, prompt, reuse=reuse, max_new_tokens=answer_tokens,
                        cache=cache if reuse else None, key="context",
                    )  # fmt: skip
                    assert len(out.ids) == answer_tokens and out.cache_hit == (case == "hybrid hit")
                    runs[case].append(out)
        assert all(m.ids == h.ids for m, h in zip(runs["hybrid miss"], runs["hybrid hit"], strict=True))
        for case, outs in runs.items():
            rows.append(
                {
                    "context_tokens": size,
                    "case": case,
                    "prefill_s": statistics.median(o.prefill for o in outs),
                    "decode_s": statistics.median(o.decode for o in outs),
                    "total_s": statistics.median(o.prefill + o.decode for o in outs),
                    "repeats": repeats,
                }
            )
        print(f"  {size} context tokens done", flush=True)
    return rows


def normalize(text: str) -> str:
    text = text.lower().translate(str.maketrans("", "", string.punctuation + "“”‘’"))
    return " ".join(text.split())


def quality(
    magnet: Magnet, items: list[dict], max_new_tokens: int, retrieved: bool, on_item: Callable[[dict], None]
) -> dict:
    """Answers from the gold paragraph (and, with ``retrieved``, from the top-1 retrieved chunk)
    under both layouts; ``on_item`` gets the result so far after every question."""
    sources = ("gold", "retrieved") if retrieved else ("gold",)
    chat, template = framing(magnet.tokenizer)
    per_item: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        index = Index.create(Path(tmp) / "idx", magnet, chunk_tokens=512, chunk_overlap=0)
        index.add([{"id": item["id"], "text": item["paragraph"]} for item in items])
        index.save()
        for number, item in enumerate(items):
            hits = {
                "gold": [Hit(1.0, item["id"], -1 - number, item["paragraph"], {}, 0, len(item["paragraph"]))]
            }
            hits["retrieved"] = index.search(item["question"], k=1)
            record = {
                "id": item["id"],
                "answer": item["answer"],
                "retrieved_id": hits["retrieved"][0].document_id,
            }
            # After "Answer:" an answer starts with a space; at the start of an assistant turn, without.
            written = item["answer"] if chat else " " + item["answer"]
            reference = magnet.tokenizer(written, add_special_tokens=False)["input_ids"]
            context, prompt = lay_out_answer(
                magnet.tokenizer, magnet.prefix, [item["paragraph"]], item["question"], template, chat
            )
            for reuse in (False, True):
                layout = "hybrid" if reuse else "causal"
                settings = AnswerSettings(k=1, max_new_tokens=max_new_tokens, reuse=reuse)
                with magnet.lock, torch.inference_mode():
                    for source in sources:
                        got = answer_from_hits(
                            magnet.model, magnet.tokenizer, magnet.prefix, magnet.layout, item["question"],
                            hits[source], settings,
                        )  # fmt: skip
                        record[f"{source}_{layout}"] = got.text
                    record[f"nll_{layout}"] = reference_nll(magnet.model, context, prompt, reference, reuse)
            per_item.append(record)
            print(f"  {number + 1}/{len(items)} {item['answer']!r}: causal {record['gold_causal']!r}, "
                  f"hybrid {record['gold_hybrid']!r}", flush=True)  # fmt: skip
            summary = {"items": len(per_item), "of": len(items), "chat": chat, "template": template}
            summary["max_new_tokens"] = max_new_tokens
            summary["retrieval_recall_at_1"] = statistics.mean(r["retrieved_id"] == r["id"] for r in per_item)
            for layout in ("causal", "hybrid"):
                for source in sources:
                    pairs = [(normalize(r[f"{source}_{layout}"]), normalize(r["answer"])) for r in per_item]
                    summary[f"{source}_{layout}_exact_match"] = statistics.mean(a == b for a, b in pairs)
                    summary[f"{source}_{layout}_contains"] = statistics.mean(b in a for a, b in pairs)
                summary[f"reference_nll_{layout}"] = statistics.mean(r[f"nll_{layout}"] for r in per_item)
            on_item({"summary": summary, "items": per_item})
    return {"summary": summary, "items": per_item}


def print_table(headers: list[str], rows: list[list]) -> None:
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for i, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default=None, help="Model name or directory [default: the embedded model]."
    )
    parser.add_argument("--adapter", default=None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--answer-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wikitext", type=Path, default=WIKITEXT)
    parser.add_argument("--answer-set", type=Path, default=ANSWER_SET)
    parser.add_argument("--quality-tokens", type=int, default=12, help="Longest answer in the quality check.")
    parser.add_argument("--limit", type=int, default=None, help="Use the first N questions only.")
    parser.add_argument(
        "--retrieved", action="store_true", help="Also answer from the top-1 retrieved chunk (end to end)."
    )
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "answer.json")
    args = parser.parse_args()

    magnet = Magnet.from_pretrained(args.model, adapter=args.adapter)
    result: dict = {
        "model": magnet.identity.to_dict(),
        "adapted": magnet.config.adapted,
        "device": str(magnet.device),
        "dtype": str(magnet.model.dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "command": " ".join(["python", "benchmarks/bench_answer.py", *sys.argv[1:]]),
    }  # fmt: skip
    if not args.skip_latency:
        print(f"latency: {args.answer_tokens} answer tokens, median of {args.repeats}", flush=True)
        rows = latency(magnet, args.sizes, args.answer_tokens, args.repeats, args.wikitext)
        result["latency"] = {"answer_tokens": args.answer_tokens, "question": LATENCY_QUESTION, "rows": rows}
        causal = {r["context_tokens"]: r["total_s"] for r in rows if r["case"] == "causal"}
        print_table(
            ["context", "case", "prefill s", "decode s", "total s", "vs causal"],
            [
                [r["context_tokens"], r["case"], f"{r['prefill_s']:.3f}", f"{r['decode_s']:.3f}",
                 f"{r['total_s']:.3f}", f"{causal[r['context_tokens']] / r['total_s']:.2f}x"]
                for r in rows
            ],
        )  # fmt: skip
    if not args.skip_quality:
        lines = args.answer_set.read_text(encoding="utf-8").splitlines()
        items = [json.loads(line) for line in lines if line][: args.limit]
        print(f"quality: {len(items)} questions from {args.answer_set}", flush=True)

        def save_partial(partial: dict) -> None:  # a run stopped early still leaves its figures
            result["quality"] = {**partial, "answer_set": str(args.answer_set.relative_to(ROOT))}
            atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")

        quality(magnet, items, args.quality_tokens, args.retrieved, save_partial)
        s = result["quality"]["summary"]
        sources = ("gold", "retrieved") if args.retrieved else ("gold",)
        print(f"retrieval recall@1: {s['retrieval_recall_at_1']:.3f}")
        print_table(
            ["layout"] + [f"{x} {m}" for x in sources for m in ("EM", "contains")] + ["reference NLL"],
            [
                [layout]
                + [f"{s[f'{x}_{layout}_{m}']:.3f}" for x in sources for m in ("exact_match", "contains")]
                + [f"{s[f'reference_nll_{layout}']:.3f}"]
                for layout in ("causal", "hybrid")
            ],
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
