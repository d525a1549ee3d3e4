"""``magnet index`` / ``magnet search`` through click's CliRunner, with a tiny model saved to disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from magnetsdk.cli.index import index_command
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
    monkeypatch.chdir(tmp_path)  # the index directories the tests name are relative
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


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def ids(result) -> set[str]:
    return {json.loads(x)["document_id"] for x in result.stdout.splitlines()}


def test_index_then_search(corpus, model_dir):
    result = run("index", str(corpus), "--out", "idx", "--model", model_dir, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["added"], summary["skipped"]) == (6, 3)
    for named in ("docs/image.txt", "docs/latin1.txt", "docs/records.jsonl:3"):
        assert f"{corpus.parent}/{named}" in result.stderr  # skipped files and records are named
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
        f"{corpus}/cat.txt", f"{corpus}/sub/dog.md", "paris", f"{corpus}/records.jsonl:2", "stocks", "rain",
    }  # fmt: skip

    french = run("search", "idx", "weather", "--filter", "lang=fr", "--json", "--model", model_dir).stdout
    assert [json.loads(x)["document_id"] for x in french.splitlines()] == ["rain"]
    year = run("search", "idx", "water", "--filter", "year=2020", "--json", "--model", model_dir).stdout
    assert [json.loads(x)["document_id"] for x in year.splitlines()] == [f"{corpus}/records.jsonl:2"]

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
    assert texts[f"{corpus}/cat.txt"] == "The cat now sleeps on the sofa."

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
    assert f"skipped {tmp_path}/empty/blank.txt: empty file" in nothing.stderr
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


def test_index_types_offered_by_the_cli_are_the_librarys_without_importing_faiss():
    option = next(p for p in index_command.params if p.name == "index_type")
    assert list(option.type.choices) == [t.value for t in IndexType]
    code = (
        "import sys; from magnetsdk.cli.main import cli; from click.testing import CliRunner; "
        "out = CliRunner().invoke(cli, ['index', '--help']).output; "
        "print('faiss' in sys.modules, 'exact|hnsw|ivfpq|auto' in out)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


# ---------------------------------------------------------------------- ids, pruning, links


def test_the_same_folder_from_elsewhere_or_by_absolute_path_is_not_added_again(corpus, model_dir, tmp_path):
    assert run("index", "docs", "--out", "idx", "--model", model_dir).exit_code == 0
    again = run("index", str(corpus), "--out", str(tmp_path / "idx"), "--model", model_dir, "--json")
    assert json.loads(again.stdout)["added"] == 0
    os.chdir(corpus / "sub")
    inside = run("index", "..", "--out", str(tmp_path / "idx"), "--model", model_dir, "--json")
    assert (json.loads(inside.stdout)["added"], json.loads(inside.stdout)["unchanged"]) == (0, 6)
    stats = json.loads(run("index", "--stats", str(tmp_path / "idx"), "--json").stdout)
    assert stats["documents"] == 6


def test_deleted_files_and_records_are_pruned_unless_no_prune(corpus, model_dir):
    assert run("index", "docs", "--out", "idx", "--model", model_dir).exit_code == 0
    (corpus / "cat.txt").unlink()
    (corpus / "table.csv").write_text("id,text,lang\nstocks,Stocks rose after the bank cut rates.,en\n")
    kept = run("index", "docs", "--out", "idx", "--model", model_dir, "--no-prune", "--json")
    assert json.loads(kept.stdout)["removed"] == 0
    assert f"{corpus}/cat.txt" in ids(run("search", "idx", "cat", "-k", "10", "--json", "--model", model_dir))
    pruned = run("index", "docs", "--out", "idx", "--model", model_dir)
    assert pruned.exit_code == 0 and "2 removed (source gone)" in pruned.stdout
    found = ids(run("search", "idx", "cat", "-k", "10", "--json", "--model", model_dir))
    assert f"{corpus}/cat.txt" not in found and "rain" not in found and "stocks" in found and len(found) == 4
    stats = json.loads(run("index", "--stats", "idx", "--json").stdout)
    assert (stats["documents_removed_last_save"], stats["documents_removed_total"]) == (2, 2)
    # Indexing one file of the folder prunes nothing else.
    (corpus / "new.txt").write_text("A new note about violins.")
    single = run("index", str(corpus / "new.txt"), "--out", "idx", "--model", model_dir, "--json")
    assert (json.loads(single.stdout)["added"], json.loads(single.stdout)["removed"]) == (1, 0)
    # A file that is still there but unreadable now keeps its document.
    (corpus / "sub" / "dog.md").write_bytes("caf\xe9".encode("latin-1"))
    unreadable = run("index", "docs", "--out", "idx", "--model", model_dir, "--json")
    assert json.loads(unreadable.stdout)["removed"] == 0


def test_links_out_of_the_folder_are_skipped_unless_follow_links(corpus, model_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("A private note about the sea shore.")
    (corpus / "link.txt").symlink_to(outside / "secret.txt")
    (corpus / "linked-folder").symlink_to(outside, target_is_directory=True)
    (corpus / "inside.txt").symlink_to(corpus / "cat.txt")  # a link within the folder: read once
    skipped = run("index", "docs", "--out", "idx", "--model", model_dir, "--json")
    assert json.loads(skipped.stdout)["added"] == 6
    assert f"skipped {corpus}/link.txt: a link to {outside}/secret.txt, outside {corpus}" in skipped.stderr
    assert f"skipped {corpus}/linked-folder: a link to {outside}" in skipped.stderr
    followed = run("index", "docs", "--out", "idx2", "--model", model_dir, "--follow-links", "--json")
    assert json.loads(followed.stdout)["added"] == 7  # the file, once, under the link's own name
    found = ids(run("search", "idx2", "sea", "-k", "10", "--json", "--model", model_dir))
    assert f"{corpus}/link.txt" in found and f"{outside}/secret.txt" not in found


def test_ivfpq_on_a_small_corpus_fails_before_encoding_and_the_suggested_retry_works(corpus, model_dir):
    failed = run("index", "docs", "--out", "idx", "--type", "ivfpq", "--model", model_dir, "-q")
    assert failed.exit_code == 1 and "IVF-PQ" in failed.output and "'exact'" in failed.output
    retry = run("index", "docs", "--out", "idx", "--type", "exact", "--model", model_dir, "--json")
    assert retry.exit_code == 0, retry.output
    assert json.loads(retry.stdout)["added"] == 6


def test_chunk_tokens_beyond_what_the_model_reads_is_refused_with_the_flag(corpus, model_dir):
    result = run("index", "docs", "--out", "idx", "--chunk-tokens", "4000", "--model", model_dir)
    assert result.exit_code == 1 and "--chunk-tokens 4000 is more than the model encodes" in result.output
    assert not os.path.exists("idx")


def test_one_output_option_everywhere(corpus, model_dir):
    assert run("index", "docs", "--out", "idx", "--model", model_dir, "--format", "jsonl").exit_code == 0
    as_json = run("search", "idx", "cat", "dog", "-k", "2", "--format", "json", "--model", model_dir)
    assert [h["query"] for h in json.loads(as_json.stdout)] == ["cat", "cat", "dog", "dog"]
    lines = run("search", "idx", "cat", "-k", "2", "--format", "jsonl", "--model", model_dir).stdout
    assert len(lines.splitlines()) == 2 and all(json.loads(x)["query"] == "cat" for x in lines.splitlines())
    stats = run("index", "--stats", "idx", "--format", "json")
    assert json.loads(stats.stdout)["documents"] == 6
    assert "field" in run("index", "--stats", "idx").stdout  # table by default
    for command in (
        "encode",
        "infill",
        "generate",
        "explain",
        "info",
        "index",
        "search",
        "ask",
        "train",
        "ubmoe",
    ):
        help_text = run(command, "--help").output
        assert "--format [table|json|jsonl]" in help_text, command
