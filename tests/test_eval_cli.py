"""``magnet eval <task>`` through click's CliRunner on a tiny model saved to disk, and the infill
set builder script."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from magnetsdk.cli.main import cli

from magnetsdk.copies import DEFAULT_WHOLE_SENTENCES
from magnetsdk.eval.result import EvalResult
from magnetsdk.testing import tiny_model, tiny_tokenizer

SENTENCES = [
    "The cat sat on the mat and looked at the door.",
    "A dog runs in the park while children play football.",
    "Paris is the capital of France and a city of museums.",
    "Rain fell on the roof all night, and the river rose.",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny-eval")
    tiny_model("qwen2").save_pretrained(directory)
    tiny_tokenizer().save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval-data")
    (root / "pairs.tsv").write_text(
        "".join(
            f"{a}\t{b}\t{s}\n"
            for a, b, s in zip(SENTENCES, SENTENCES[1:] + SENTENCES[:1], [1, 2, 3, 4], strict=True)
        ),
        encoding="utf-8",
    )
    (root / "texts.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    (root / "items.jsonl").write_text(
        "".join(
            json.dumps({"left": SENTENCES[i], "span": " " + SENTENCES[i + 1], "right": ""}) + "\n"
            for i in range(3)
        ),
        encoding="utf-8",
    )
    (root / "train.conll").write_text("the DT\ncat NN\n\na DT\ndog NN\n", encoding="utf-8")
    return root


def run(*args: str):
    return CliRunner().invoke(cli, ["eval", *args], catch_exceptions=False)


@pytest.mark.parametrize(
    ("task", "arguments", "figure"),
    [
        ("sts", ["pairs.tsv", "--pooling", "mean", "--attention", "causal"], "pairs.spearman"),
        ("repetition", ["texts.txt", "--prefix-tokens", "4", "--new-tokens", "6"], "greedy.rep4"),
        (
            "repetition",
            ["texts.txt", "--prefix-tokens", "4", "--new-tokens", "6", "--judge", "MODEL"],
            "nucleus.implausible",
        ),
        ("infill", ["items.jsonl", "--generate", "1", "--max-new-tokens", "3"], "ppl_both_sides"),
        (
            "infill",
            ["items.jsonl", "--generate", "2", "--max-new-tokens", "6", "--no-repeat-ngram", "2"],
            "copy_rate",
        ),
        (
            "infill",
            ["items.jsonl", "--generate", "2", "--max-new-tokens", "6", "--resample-copies", "4"],
            "resampled_rate",
        ),
        (
            "infill",
            [
                "items.jsonl",
                "--generate",
                "2",
                "--max-new-tokens",
                "6",
                "--no-cut-unclosed",
                "--whole-sentences",
            ],
            "cut_rate",
        ),
        (
            "infill",
            [
                "items.jsonl",
                "--generate",
                "2",
                "--resample-copies",
                "4",
                "--resample-ranking",
                "total",
                "--no-whole-sentences",
            ],
            "resampled_rate",
        ),
        ("probe", ["train.conll", "train.conll"], "accuracy"),
        ("dependence", ["texts.txt", "--min-tokens", "4"], "bidirectional.after"),
        ("lm", ["texts.txt", "--context", "16"], "ppl"),
    ],
)
def test_each_task_writes_a_result_and_prints_its_table(model_dir, data, tmp_path, task, arguments, figure):
    files = [str(data / a) if (data / a).is_file() else model_dir if a == "MODEL" else a for a in arguments]
    out = tmp_path / f"{task}.json"
    result = run(task, *files, "--model", model_dir, "--limit", "3", "--output", str(out))
    assert result.exit_code == 0, result.output
    stored = EvalResult.load(out)
    assert stored.task == task and figure in stored.figures
    assert stored.model["model"] and stored.data[0]["sha256"] and stored.settings["limit"] == 3
    assert stored.table().splitlines()[0] in result.stdout
    if "--no-repeat-ngram" in arguments:
        assert stored.settings["no_repeat_ngram"] == 2
    if task == "infill":  # the guards as the fills ran: an unset one at Magnet.infill's default
        assert stored.settings["resample_copies"] == (4 if "--resample-copies" in arguments else 8)
        assert stored.settings["no_repeat_ngram"] == (2 if "--no-repeat-ngram" in arguments else 4)
        assert stored.settings["copy_guard"] == 0
        assert stored.settings["cut_unclosed"] == ("--no-cut-unclosed" not in arguments)
        given = {"--whole-sentences": True, "--no-whole-sentences": False}
        asked = [given[a] for a in arguments if a in given]
        assert stored.settings["whole_sentences"] == (asked[0] if asked else DEFAULT_WHOLE_SENTENCES)
        assert stored.settings["candidate_ranking"] == "auto"
        assert stored.settings["resample_ranking"] == (
            "total" if "--resample-ranking" in arguments else "per-token"
        )


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_format_prints_the_saved_result_as_json(model_dir, data, tmp_path, fmt):
    out = tmp_path / "sts.json"
    pairs = str(data / "pairs.tsv")
    result = run("sts", pairs, "--model", model_dir, "--format", fmt, "--data-format", "tsv", "-o", str(out))
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert (len(lines) == 1) == (fmt == "jsonl")
    printed = json.loads(result.stdout)
    assert printed == json.loads(out.read_text(encoding="utf-8"))
    assert printed["task"] == "sts" and "pairs.spearman" in printed["figures"]


def test_compare_runs_tasks_and_renders_results(model_dir, data, tmp_path):
    result = run(
        "compare",
        "--model",
        model_dir,
        "--sts",
        str(data / "pairs.tsv"),
        "--lm",
        str(data / "texts.txt"),
        "--output",
        str(tmp_path / "cmp"),
    )
    assert result.exit_code == 0, result.output
    assert "### sts" in result.stdout and "### lm" in result.stdout
    assert (tmp_path / "cmp" / "comparison.md").is_file() and (tmp_path / "cmp" / "compare-lm.png").is_file()
    again = run(
        "compare", str(tmp_path / "cmp" / "run0-sts.json"), "--output", str(tmp_path / "c2"), "--no-plots"
    )
    assert again.exit_code == 0 and "### sts" in again.stdout
    empty = run("compare", "--output", str(tmp_path / "c3"))
    assert empty.exit_code != 0 and "give result files" in empty.output


def test_bad_input_is_a_clear_error(model_dir, data, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("only one column\n", encoding="utf-8")
    result = run("sts", str(bad), "--model", model_dir, "--output", str(tmp_path / "x.json"))
    assert result.exit_code != 0 and "pass --data-format" in result.output
    broken = run(
        "infill", str(data / "texts.txt"), "--model", model_dir, "--output", str(tmp_path / "y.json")
    )
    assert broken.exit_code != 0 and "texts.txt:1: not valid JSON" in broken.output


@pytest.fixture
def infill_set(repo_script):
    return repo_script("scripts/build_infill_set.py")


def test_infill_set_removes_an_inner_sentence(tmp_path, infill_set):
    paragraph = " One two three four five . Six seven eight nine ten ? Eleven twelve thirteen fourteen . Last one here ok . "
    lines = [" = Title = ", "", paragraph, " Too short . "]
    records = infill_set.build(lines, items=5, context=3, min_words=5, max_words=40, seed=0)
    assert len(records) == 1 and records[0]["line"] == 3
    record = records[0]
    assert record["left"] + record["span"] + record["right"] == paragraph.strip()
    assert record["span"] in (" Six seven eight nine ten ?", " Eleven twelve thirteen fourteen .")
    out = tmp_path / "set.jsonl"
    assert (
        infill_set.main([str(tmp_path / "missing")] if False else [_write(tmp_path, lines), "-o", str(out)])
        == 0
    )
    assert json.loads(out.read_text(encoding="utf-8").splitlines()[0])["line"] == 3


def _write(tmp_path, lines):
    path = tmp_path / "wiki.tokens"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_sts_echo_option_and_magnet_directories_with_modules_json(model_dir, data, tmp_path):
    from magnetsdk import Magnet

    plain = run("sts", str(data / "pairs.tsv"), "--model", model_dir, "--output", str(tmp_path / "a.json"))
    echoed = run(
        "sts", str(data / "pairs.tsv"), "--model", model_dir, "--echo", "--output", str(tmp_path / "b.json")
    )
    assert plain.exit_code == 0 and echoed.exit_code == 0, echoed.output
    assert EvalResult.load(tmp_path / "b.json").settings["echo"] is True
    assert EvalResult.load(tmp_path / "a.json").settings["echo"] is False
    # A saved magnetsdk directory also carries modules.json; it is still evaluated as a Magnet,
    # so magnetsdk's options apply to it.
    saved = tmp_path / "saved"
    Magnet.from_pretrained(model_dir).save(saved)
    assert (saved / "modules.json").is_file()
    result = run(
        "sts", str(data / "pairs.tsv"), "--model", str(saved), "--echo", "--output", str(tmp_path / "c.json")
    )
    assert result.exit_code == 0, result.output
    assert EvalResult.load(tmp_path / "c.json").figures == EvalResult.load(tmp_path / "b.json").figures


def test_sts_with_a_principal_shift_fitted_on_other_texts(model_dir, data, tmp_path):
    from magnetsdk import Magnet
    from magnetsdk.alignment import PrincipalShift

    fit_file = tmp_path / "fit.txt"
    fit_file.write_text(
        "\n".join(f"sentence number {i} about {w}" for i, w in enumerate("abcdefghij")) + "\n"
    )
    plain = run("sts", str(data / "pairs.tsv"), "--model", model_dir, "-o", str(tmp_path / "plain.json"))
    removed = run(
        "sts", str(data / "pairs.tsv"), "--model", model_dir, "--principal-shift", "remove",
        "--shift-texts", str(fit_file), "-o", str(tmp_path / "removed.json"),
    )  # fmt: skip
    assert plain.exit_code == 0 and removed.exit_code == 0, removed.output
    result = EvalResult.load(tmp_path / "removed.json")
    assert result.model["principal_shift"].startswith("remove:")
    assert EvalResult.load(tmp_path / "plain.json").model["principal_shift"] is None
    # The figure is the one the library gives for the same fit: encode, remove v1, score.
    magnet = Magnet.from_pretrained(model_dir)
    shift = magnet.fit_principal_component(fit_file.read_text().splitlines(), "remove")
    assert isinstance(shift, PrincipalShift) and shift.describe() == result.model["principal_shift"]
    # The two options go together.
    lonely = run("sts", str(data / "pairs.tsv"), "--model", model_dir, "--principal-shift", "shift")
    assert lonely.exit_code != 0 and "--shift-texts" in lonely.output


def test_infill_set_phrase_items_remove_words_inside_a_sentence(infill_set):
    paragraph = " One two three four five . Six seven , eight nine ten ? Eleven twelve thirteen fourteen . Last one here ok . "
    lines = [paragraph] * 30
    records = infill_set.build(lines, items=30, context=3, min_words=5, max_words=40, seed=0, phrase=3)
    assert len(records) == 30
    for record in records:
        assert record["left"] + record["span"] + record["right"] == paragraph.strip()
        words = record["span"].split()
        assert 1 <= len(words) <= 3 and record["span"].startswith(" ")
        assert all(w[0].isalnum() for w in words)  # no comma, no closing mark
        assert record["left"].split()[-1] not in {".", "?"}  # never the sentence's first word
    assert {len(r["span"].split()) for r in records} == {1, 2, 3}


def test_infill_set_start_items_remove_the_first_sentence(infill_set, tmp_path):
    paragraph = " One two three four five . Six seven , eight nine ten ? Eleven twelve thirteen fourteen . "
    records = infill_set.build(
        [paragraph, " Too short . Six seven eight nine ten . "], 5, 3, 5, 40, 0, at_start=True
    )
    assert len(records) == 1  # the second paragraph's first sentence is under 5 words
    (record,) = records
    assert record["left"] == "" and record["span"] == "One two three four five ."
    assert record["span"] + record["right"] == paragraph.strip()
    source = tmp_path / "wiki.tokens"
    source.write_text(paragraph + "\n")
    with pytest.raises(SystemExit):
        infill_set.main([str(source), "--at-start", "--phrase", "2", "-o", str(tmp_path / "x.jsonl")])
