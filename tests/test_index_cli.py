"""``magnet index`` / ``magnet search`` through click's CliRunner, with a tiny model saved to disk."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from magnetsdk.cli.index import INDEX_TYPES
from magnetsdk.cli.main import cli

from magnetsdk.index import IndexType
from magnetsdk.testing import tiny_magnet


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A plain Hugging Face directory (no magnet_config.json): it loads as an unadapted model."""
    path = tmp_path_factory.mktemp("tiny-model")
    magnet = tiny_magnet("llama")
    magnet.model.save_pretrained(path)
    magnet.tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # document ids are paths relative to the working directory
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "cat.txt").write_text("The cat sat on the mat and looked at the door.")
    (docs / "sub" / "dog.md").write_text("# Dogs\n\nA dog runs in the park while children play.")
    (docs / "records.jsonl").write_text(
        json.dumps({"id": "paris", "text": "Paris is the capital of France.", "metadata": {"lang": "en"}})
        + "\n"
        + json.dumps({"text": "Water boils at one hundred degrees.", "year": 2020})
        + "\n{not json\n"
    )
    (docs / "table.csv").write_text(
        "id,text,lang\nstocks,Stocks rose after the bank cut rates.,en\nrain,Rain fell on the roof.,fr\n"
    )
    (docs / "image.txt").write_bytes(b"\x89PNG\x00\x00binary")
    (docs / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (docs / "ignored.bin").write_bytes(b"\x00\x01")
    return docs


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_index_then_search(corpus, model_dir):
    result = run("index", str(corpus), "--out", "idx", "--model", model_dir, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["added"], summary["skipped"]) == (6, 3)
    for named in ("docs/image.txt", "docs/latin1.txt", "docs/records.jsonl:3"):
        assert named in result.stderr  # skipped files and records are named
    assert "ignored.bin" not in result.output  # unsupported suffixes inside folders are not read at all

    table = run("search", "idx", "the cat on the mat", "-k", "3", "--model", model_dir)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["rank", "score", "document", "text"] and len(lines) == 5

    hits = [
        json.loads(x)
        for x in run("search", "idx", "rain", "--json", "--model", model_dir).stdout.splitlines()
    ]
    assert len(hits) == 6 and {"score", "document_id", "text", "metadata", "rank"} <= set(hits[0])
    assert {h["document_id"] for h in hits} == {
        "docs/cat.txt", "docs/sub/dog.md", "paris", "docs/records.jsonl:2", "stocks", "rain",
    }  # fmt: skip

    french = run("search", "idx", "weather", "--filter", "lang=fr", "--json", "--model", model_dir).stdout
    assert [json.loads(x)["document_id"] for x in french.splitlines()] == ["rain"]
    year = run("search", "idx", "water", "--filter", "year=2020", "--json", "--model", model_dir).stdout
    assert [json.loads(x)["document_id"] for x in year.splitlines()] == ["docs/records.jsonl:2"]

    two = run("search", "idx", "cat", "dog", "-k", "2", "--json", "--model", model_dir).stdout.splitlines()
    assert [json.loads(x)["query"] for x in two] == ["cat", "cat", "dog", "dog"]


def test_reindexing_skips_unchanged_and_picks_up_changes(corpus, model_dir):
    assert run("index", str(corpus), "--out", "idx", "--model", model_dir).exit_code == 0
    (corpus / "cat.txt").write_text("The cat now sleeps on the sofa.")
    (corpus / "new.txt").write_text("A brand new note about violins.")
    result = run("index", str(corpus), "--out", "idx", "--model", model_dir, "--json")
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["added"], summary["updated"], summary["unchanged"]) == (1, 1, 5)
    hits = run("search", "idx", "sofa", "--json", "--model", model_dir).stdout.splitlines()
    texts = {json.loads(x)["document_id"]: json.loads(x)["text"] for x in hits}
    assert texts["docs/cat.txt"] == "The cat now sleeps on the sofa."

    with pytest.warns(UserWarning, match="index_type='hnsw' \\(the index has 'exact'\\)"):
        kept = run("index", str(corpus), "--out", "idx", "--type", "hnsw", "--model", model_dir)
    assert kept.exit_code == 0, kept.output

    stats = run("index", "--stats", "idx", "--json")
    assert stats.exit_code == 0, stats.output
    facts = json.loads(stats.stdout)
    assert (facts["documents"], facts["generation"], facts["index_type"]) == (7, 2, "exact")


def test_clear_errors(corpus, model_dir, tmp_path):
    missing = run("search", "nowhere", "query", "--model", model_dir)
    assert missing.exit_code == 1 and "no index at nowhere" in missing.output
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "blank.txt").write_text("   ")
    nothing = run("index", "empty", "--out", "idx2", "--model", model_dir)
    assert nothing.exit_code == 1 and "no documents to index" in nothing.output
    assert "skipped empty/blank.txt: empty file" in nothing.stderr
    no_path = run("index", "does-not-exist", "--out", "idx3", "--model", model_dir)
    assert no_path.exit_code == 1 and "does-not-exist does not exist" in no_path.output
    usage = run("index", str(corpus))
    assert usage.exit_code == 2 and "--out" in usage.output
    (corpus / "dupe.jsonl").write_text('{"id": "paris", "text": "Another Paris."}\n')
    dupes = run("index", str(corpus), "--out", "idx4", "--model", model_dir)
    assert dupes.exit_code == 1 and "more than once" in dupes.output
    bad_filter = run("search", "idx4", "q", "--filter", "lang", "--model", model_dir)
    assert bad_filter.exit_code == 2 and "key=value" in bad_filter.output


def test_model_mismatch_is_reported(corpus, model_dir, tmp_path):
    assert run("index", str(corpus / "cat.txt"), "--out", "idx", "--model", model_dir).exit_code == 0
    other = tmp_path / "other-model"
    magnet = tiny_magnet("qwen2")
    magnet.model.save_pretrained(other)
    magnet.tokenizer.save_pretrained(other)
    result = run("search", "idx", "cat", "--model", str(other))
    assert (
        result.exit_code == 1
        and "built with a different model" in result.output
        and "model:" in result.output
    )


def test_index_types_offered_by_the_cli_are_the_librarys():
    assert [t.value for t in IndexType] == INDEX_TYPES
