"""Indexing under ``accelerate launch`` with 2 CPU processes gives the same index as 1 process."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from magnetsdk.cli.main import cli

from magnetsdk.testing import tiny_magnet


def contents(directory: Path):
    conn = sqlite3.connect(directory / "store.sqlite")
    documents = conn.execute(
        "SELECT doc_id, text, metadata, content_hash FROM documents ORDER BY doc_id"
    ).fetchall()
    chunks = conn.execute(
        "SELECT chunk_id, doc_id, position, start, end, text, vector FROM chunks ORDER BY chunk_id"
    ).fetchall()
    conn.close()
    vectors = np.stack([np.frombuffer(c[6], dtype="<f4") for c in chunks])
    return documents, [c[:6] for c in chunks], vectors


@pytest.mark.slow  # three Python processes importing torch: ~20 s on an idle 2-core machine
def test_two_processes_build_the_same_index_as_one(tmp_path, monkeypatch):
    model = tmp_path / "model"
    magnet = tiny_magnet("llama")
    magnet.model.save_pretrained(model)
    magnet.tokenizer.save_pretrained(model)
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(9):  # uneven: ranks get different numbers of chunks
        (docs / f"note-{i}.txt").write_text(
            f"Note {i}: " + "the cat sat on the mat while rain fell. " * (1 + i % 3)
        )
    common = ["index", "docs", "--model", str(model), "--chunk-tokens", "16", "--chunk-overlap", "4", "-q"]

    monkeypatch.chdir(tmp_path)
    single = CliRunner().invoke(cli, [*common, "--out", "one"], catch_exceptions=False)  # this process
    assert single.exit_code == 0, single.output
    # accelerate's launcher from this interpreter: no skip when its script is not on PATH.
    launch = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "magnetsdk.cli.main",
    ]  # fmt: skip
    double = subprocess.run([*launch, *common, "--out", "two"], capture_output=True, text=True, cwd=tmp_path)
    # The rank that failed first is named in its own lines; the tail is rank 0's view of it.
    failed = [line for line in double.stderr.splitlines() if line.startswith("[rank1]")]
    assert double.returncode == 0, "\n".join(failed)[-3000:] + "\n...\n" + double.stderr[-2000:]
    assert "2 process(es)" in double.stdout

    one_docs, one_chunks, one_vectors = contents(tmp_path / "one")
    two_docs, two_chunks, two_vectors = contents(tmp_path / "two")
    assert len(one_chunks) > 9
    assert two_docs == one_docs
    assert two_chunks == one_chunks
    np.testing.assert_allclose(two_vectors, one_vectors, atol=1e-5)
