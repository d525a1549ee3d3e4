"""The one reader of text and record files (magnetsdk.records): formats, errors that name the line,
and the lenient mode the index uses to skip a bad record and go on."""

from __future__ import annotations

import json

import pytest

from magnetsdk.index.sources import read_sources
from magnetsdk.records import DataError, jsonl_rows, read_texts, rows, table_rows


def test_every_format_reads_the_same_texts(tmp_path):
    (tmp_path / "a.txt").write_bytes("\ufeffone \n\n  two\n".encode())  # a byte-order mark is dropped
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "one "}) + "\n\n" + json.dumps({"text": "  two"}))
    (tmp_path / "a.csv").write_text('id,text\n1,"one "\n2,"  two"\n')
    (tmp_path / "a.tsv").write_text("text\tid\none \t1\n  two\t2\n")
    for name in ("a.txt", "a.jsonl", "a.csv", "a.tsv"):
        assert read_texts(tmp_path / name) == ["one", "two"], name
        assert read_texts(tmp_path / name, strip=False) == ["one ", "  two"], name


def test_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "ok"}) + "\n[1, 2]\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: expected a JSON object, got list"):
        read_texts(bad)
    bad.write_text(json.dumps({"text": 3}) + "\n")
    with pytest.raises(DataError, match=r'bad.jsonl:1: expected "text" to be a string'):
        read_texts(bad)
    with pytest.raises(DataError, match=r"bad.jsonl:1: missing \['body'\]"):
        rows(bad, ("body",))
    (tmp_path / "latin.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match="latin.txt is not UTF-8 text .byte 3"):
        read_texts(tmp_path / "latin.txt")
    with pytest.raises(FileNotFoundError, match="cannot read .*nope.txt"):
        read_texts(tmp_path / "nope.txt")
    with pytest.raises(DataError, match=r"records are read from .* not '.txt'"):
        rows(tmp_path / "latin.txt")


def test_lenient_rows_report_problems_and_go_on():
    found = list(jsonl_rows('{"text": "a"}\n{oops\n\n7\n{"text": "b"}\n', "x.jsonl", strict=False))
    assert [(r.line, r.problem is None) for r in found] == [(1, True), (2, False), (4, False), (5, True)]
    assert "not valid JSON" in found[1].problem and "got int" in found[2].problem
    table = list(table_rows("a,b\n1,2\n", "x.csv", ("text",), strict=False))
    assert len(table) == 1 and "no 'text' column (columns: ['a', 'b'])" in table[0].problem
    short = list(table_rows("text\tid\nonly\n", "x.tsv", ("text", "id"), "\t", strict=False))
    assert short[0].line == 2 and "fewer columns" in short[0].problem


def test_the_index_skips_bad_records_and_a_file_without_the_text_column(tmp_path):
    (tmp_path / "docs.jsonl").write_text(json.dumps({"text": "kept", "id": "k"}) + "\n{broken\n")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    report = read_sources([tmp_path])
    assert [d.text for d in report.documents] == ["kept"]
    reasons = dict(report.skipped)
    assert any("not valid JSON" in why for where, why in reasons.items() if where.endswith("docs.jsonl:2"))
    assert any("no 'text' column" in why for where, why in reasons.items() if where.endswith("other.csv"))
