"""``magnet eval retrieval``: BEIR folders, the metrics against a hand computation and against
sentence-transformers' evaluator, the query/document instructions, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from magnetsdk.cli.main import cli

from magnetsdk.eval.encoder import MagnetEncoder
from magnetsdk.eval.result import EvalResult
from magnetsdk.eval.retrieval import evaluate_retrieval, query_metrics, read_beir, top_k
from magnetsdk.testing import tiny_magnet, tiny_model, tiny_tokenizer

DOCUMENTS = {
    "d1": ("Cats", "The cat sat on the mat and looked at the door."),
    "d2": ("", "A dog runs in the park while children play football."),
    "d3": ("Paris", "Paris is the capital of France and a city of museums."),
    "d4": ("", "Rain fell on the roof all night, and the river rose."),
    "d5": ("", "Stocks rose sharply after the central bank cut rates."),
    "d6": ("", "Water boils at one hundred degrees at sea level."),
}
QUERIES = {"q1": "a cat on a mat", "q2": "the capital of France", "q3": "rain and a river", "q4": "unjudged"}
QRELS = [("q1", "d1", 1), ("q2", "d3", 2), ("q2", "d6", 1), ("q3", "d4", 1), ("q3", "d5", 0)]


def write_beir(root, documents=DOCUMENTS, queries=QUERIES, qrels=QRELS, header="query-id\tcorpus-id\tscore"):
    root.mkdir(parents=True, exist_ok=True)
    (root / "qrels").mkdir(exist_ok=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": t, "text": x}) + "\n" for k, (t, x) in documents.items()),
        encoding="utf-8",
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": x}) + "\n" for k, x in queries.items()), encoding="utf-8"
    )
    lines = [header] + [f"{q}\t{d}\t{s}" for q, d, s in qrels]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def builder(repo_script):
    return repo_script("scripts/build_retrieval_set.py")


def test_metrics_equal_a_hand_computation():
    judged = {"a": 1.0, "b": 2.0, "z": 0.0}
    ranked = ["x", "b", "y", "a", "z"] + [f"n{i}" for i in range(95)]
    figures = query_metrics(ranked, judged)
    # DCG = 2/log2(3) + 1/log2(5) = 1.261860 + 0.430677; ideal DCG = 2/log2(2) + 1/log2(3) = 2.630930
    assert figures["ndcg@10"] == pytest.approx(1.6925361 / 2.6309298, abs=1e-6)
    assert figures["ndcg@10"] == pytest.approx(0.6433224, abs=1e-6)
    assert figures["mrr@10"] == 0.5  # the first relevant document (b) is second
    assert figures["recall@10"] == 1.0 and figures["recall@100"] == 1.0
    late = query_metrics([f"n{i}" for i in range(10)] + ["a"], {"a": 1.0, "b": 1.0})
    assert late == {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.5, "mrr@10": 0.0}


def test_top_k_is_brute_force_ranking_and_keeps_corpus_order_on_ties():
    rng = np.random.default_rng(0)
    queries, docs = rng.normal(size=(7, 5)), rng.normal(size=(40, 5))
    want = np.argsort(-(queries @ docs.T), axis=1, kind="stable")
    np.testing.assert_array_equal(top_k(queries, docs, 10, block=3), want[:, :10])
    np.testing.assert_array_equal(top_k(queries, docs, 100), want)
    tied = np.ones((6, 2))  # every document scores the same
    assert top_k(np.ones((1, 2)), tied, 3).tolist() == [[0, 1, 2]]


def test_reads_a_beir_folder(tmp_path):
    data = read_beir(write_beir(tmp_path / "set"))
    assert data.doc_ids == list(DOCUMENTS)
    assert data.documents[0] == "Cats The cat sat on the mat and looked at the door."  # title + text
    assert data.documents[1] == DOCUMENTS["d2"][1]
    assert data.query_ids == ["q1", "q2", "q3"]  # q4 is not judged
    assert data.qrels["q2"] == {"d3": 2.0, "d6": 1.0}
    assert read_beir(tmp_path / "set", limit=2).query_ids == ["q1", "q2"]


def test_scores_of_a_tiny_magnet_equal_a_brute_force_with_its_instructions(tmp_path):
    magnet = tiny_magnet("qwen2")
    root = write_beir(tmp_path / "set")
    data = read_beir(root)
    result = evaluate_retrieval(
        MagnetEncoder(magnet, pooling="mean"), data, query_instruction="Query:", show_progress=False
    )
    docs = magnet.encode(data.documents, pooling="mean")  # the model's own instruction
    queries = magnet.encode(data.queries, instruction="Query:", pooling="mean")
    order = np.argsort(-(queries @ docs.T), axis=1, kind="stable")
    expected = [
        query_metrics([data.doc_ids[i] for i in row], data.qrels[q])
        for q, row in zip(data.query_ids, order, strict=True)
    ]
    for name in ("ndcg@10", "recall@10", "recall@100", "mrr@10"):
        assert result.figures[name] == pytest.approx(100 * np.mean([e[name] for e in expected]), abs=1e-4)
    assert result.figures["queries"] == 3 and result.figures["documents"] == 6
    assert result.settings["query_instruction"] == "Query:"
    assert result.settings["document_instruction"] == magnet.config.instruction
    assert result.figures["recall@100"] == 100.0  # 6 documents: every relevant one is in the top 100
    assert len(result.data) == 3 and all(len(d["sha256"]) == 64 for d in result.data)


@pytest.fixture(scope="module")
def sentence_transformers_dir(tmp_path_factory):
    """A tiny sentence-transformers model (a random Llama, mean pooling) with query/document prompts."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    root = tmp_path_factory.mktemp("tiny-st")
    tiny_model("llama").save_pretrained(root / "hf")
    tiny_tokenizer().save_pretrained(root / "hf")
    transformer = Transformer(str(root / "hf"))
    pooling = Pooling(transformer.get_embedding_dimension(), "mean")
    model = SentenceTransformer(
        modules=[transformer, pooling], device="cpu", prompts={"query": "query: ", "document": "passage: "}
    )
    model.save(str(root / "st"))
    return root / "st"


def test_a_sentence_transformers_model_matches_its_own_evaluator(tmp_path, sentence_transformers_dir):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    documents = {f"d{i}": ("", f"{text} Number {i}.") for i, (_, text) in enumerate(DOCUMENTS.values())}
    documents.update({f"e{i}": ("", f"Filler sentence {i} about the weather.") for i in range(14)})
    qrels = [("q1", "d0", 1), ("q2", "d2", 1), ("q2", "e3", 1), ("q3", "d3", 1)]
    root = write_beir(tmp_path / "set", documents=documents, qrels=qrels)
    output = tmp_path / "st.json"
    invoked = CliRunner().invoke(
        cli, ["eval", "retrieval", str(root), "--model", str(sentence_transformers_dir), "-o", str(output)]
    )
    assert invoked.exit_code == 0, invoked.output
    result = EvalResult.load(output)
    assert result.model["kind"] == "sentence-transformers"
    assert result.settings["query_prompt"] == "query: "
    data = read_beir(root)
    evaluator = InformationRetrievalEvaluator(
        queries=dict(zip(data.query_ids, data.queries, strict=True)),
        corpus=dict(zip(data.doc_ids, data.documents, strict=True)),
        relevant_docs={q: set(judged) for q, judged in data.qrels.items()},
        precision_recall_at_k=[10, 100],
        name="tiny",
    )
    reference = evaluator(SentenceTransformer(str(sentence_transformers_dir), device="cpu"))
    for ours, theirs in [("ndcg@10", "ndcg@10"), ("mrr@10", "mrr@10"), ("recall@10", "recall@10")]:
        assert result.figures[ours] == pytest.approx(100 * reference[f"tiny_cosine_{theirs}"], abs=1e-4)
    assert result.figures["recall@100"] == pytest.approx(100 * reference["tiny_cosine_recall@100"], abs=1e-4)


def test_the_command_runs_a_magnet_directory(tmp_path):
    directory = tmp_path / "model"
    tiny_model("qwen2").save_pretrained(directory)
    tiny_tokenizer().save_pretrained(directory)
    root = write_beir(tmp_path / "set")
    output = tmp_path / "r.json"
    invoked = CliRunner().invoke(
        cli,
        [
            "eval",
            "retrieval",
            str(root),
            "--model",
            str(directory),
            "--document-instruction",
            "",
            "-o",
            str(output),
        ],
    )
    assert invoked.exit_code == 0, invoked.output
    assert "ndcg@10 x100" in invoked.stdout and "set" in invoked.stdout
    result = EvalResult.load(output)
    assert result.task == "retrieval" and result.settings["document_instruction"] == ""
    assert set(result.details["first_relevant_rank"]) == {"q1", "q2", "q3"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda root: (root / "corpus.jsonl").unlink(), "corpus.jsonl not found"),
        (lambda root: (root / "qrels" / "test.tsv").unlink(), "test.tsv not found"),
        (lambda root: write_beir(root, qrels=QRELS + [("q9", "d1", 1)]), "query id.*missing.*'q9'"),
        (lambda root: write_beir(root, qrels=QRELS + [("q1", "d99", 1)]), "document id.*missing.*'d99'"),
        (lambda root: write_beir(root, queries={}), "queries.jsonl holds no queries"),
        (lambda root: write_beir(root, queries={**QUERIES, "q1": "  "}), "'q1' has empty text"),
        (lambda root: write_beir(root, header="qid\tdocid\trel"), "header query-id"),
        (lambda root: write_beir(root, qrels=[("q1", "d1", 0)]), "no document relevant"),
    ],
)
def test_bad_folders_are_clear_errors(tmp_path, change, message):
    root = write_beir(tmp_path / "set")
    change(root)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        read_beir(root)


def test_duplicate_ids_and_broken_lines_name_the_line(tmp_path):
    root = write_beir(tmp_path / "set")
    with open(root / "corpus.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"_id": "d1", "text": "again"}) + "\n")
    with pytest.raises(ValueError, match=r"corpus.jsonl:7: the id 'd1' was already used on line 1"):
        read_beir(root)
    root = write_beir(tmp_path / "other")
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "ok"}\nnot json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"queries.jsonl:2: not valid JSON"):
        read_beir(root)
    (root / "queries.jsonl").write_text('{"_id": "q1"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"queries.jsonl:1: a query needs an '_id' and a 'text'"):
        read_beir(root)


def test_the_command_turns_bad_input_into_an_error_message(tmp_path):
    root = write_beir(tmp_path / "set", qrels=QRELS + [("q1", "d99", 1)])
    invoked = CliRunner().invoke(cli, ["eval", "retrieval", str(root), "-o", str(tmp_path / "x.json")])
    assert invoked.exit_code == 1 and "d99" in invoked.output and "Traceback" not in invoked.output
    assert not (tmp_path / "x.json").exists()


def test_the_held_out_set_builder_removes_each_query_from_its_passage(tmp_path, builder):
    sentences = [f"Sentence number {i} says something about lobsters here ." for i in range(7)]
    lines = [" = Lobster = ", "", " " + " ".join(sentences) + " ", " = = Habitat = = ", " Too short . "]
    source = tmp_path / "wiki.valid.tokens"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    found = builder.passages(source, lines=5, per_passage=3)
    assert [len(p.sentences) for p in found] == [3, 4]  # 7 sentences: 3 + 4 (no 1-sentence remainder)
    assert {p.title for p in found} == {"Lobster"} and found[0].doc_id == "w3-0"
    corpus, queries, qrels = builder.build(found, queries=10, seed=0)
    assert len(corpus) == 2 and len(queries) == 2 and qrels == [("q3-0", "w3-0", 1), ("q3-1", "w3-1", 1)]
    for query, (_, doc_id, _) in zip(queries, qrels, strict=True):
        document = next(d for d in corpus if d["_id"] == doc_id)
        assert query["text"] in sentences[1:] and query["text"] not in document["text"]
        assert (
            len(document["text"].split(" . "))
            == len(next(p for p in found if p.doc_id == doc_id).sentences) - 1
        )
    assert builder.build(found, queries=10, seed=0) == (corpus, queries, qrels)  # deterministic
    out = tmp_path / "set"
    builder.write_folder(out, corpus, queries, qrels, {"seed": 0})
    builder.write_folder(out, corpus, queries, qrels, {"seed": 0})  # replaces the folder
    data = read_beir(out)
    assert data.query_ids == ["q3-0", "q3-1"] and data.documents[0].startswith("Lobster Sentence number 0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set", "wiki.valid.tokens"]  # no leftovers
