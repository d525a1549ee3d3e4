"""A process killed (SIGKILL) in the middle of ``Index.save`` leaves the previous index intact.

The child process opens a saved index, adds documents and saves; the test stops it at one step of
the save by wrapping a library function *in the child only* (the library has no test hooks), waits
for it to report that it reached that step, kills it with SIGKILL and reopens the index.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings

from magnetsdk.index import Document, Index

CHILD = textwrap.dedent(
    """
    import sys, time
    from magnetsdk.index import Document, Index
    from magnetsdk.index import store, vectors
    from magnetsdk.testing import tiny_magnet

    directory, step = sys.argv[1], sys.argv[2]

    def pause(before: bool):
        def wrap(original):
            def wrapped(*args, **kwargs):
                if before:
                    print("REACHED", flush=True)
                    time.sleep(120)
                result = original(*args, **kwargs)
                print("REACHED", flush=True)
                time.sleep(120)
                return result
            return wrapped
        return wrap

    index = Index.open(directory, tiny_magnet("llama"))
    index.add([Document(f"new-{i}", f"Added later, number {i}, about the sea.") for i in range(5)])
    if step == "after-write":   # the new FAISS file is written, not yet renamed into place
        vectors.VectorIndex.write = pause(before=False)(vectors.VectorIndex.write)
    else:                       # the new FAISS file is in place, the SQLite commit has not run
        store.Store.commit = pause(before=True)(store.Store.commit)
    print("SAVING", flush=True)
    index.save()
    print("SAVED", flush=True)
    """
)


STEPS = ["after-write", "before-commit"]


def saved_index(path, magnet) -> list[int]:
    with Index.create(path, magnet) as index:
        index.add([Document(f"old-{i}", f"Original document {i} about cats.") for i in range(8)])
        index.save()
        return [h.chunk_id for h in index.search("cats", k=8)]


def kill_when_reached(child: subprocess.Popen, step: str) -> None:
    try:
        lines = []
        for line in child.stdout:
            lines.append(line.strip())
            if line.strip() == "REACHED":
                break
        assert lines[-1:] == ["REACHED"], f"child did not reach {step}: {lines} {child.stderr.read()[-2000:]}"
        assert "SAVING" in lines
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()
        child.stderr.close()


def test_sigkill_during_save_keeps_the_previous_index(tmp_path, llama_magnet):
    paths = {step: tmp_path / step for step in STEPS}
    before = {step: saved_index(path, llama_magnet) for step, path in paths.items()}
    children = {  # both kill points at once: each child spends most of its time importing torch
        step: subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), step],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for step, path in paths.items()
    }
    for step, child in children.items():
        kill_when_reached(child, step)

    for step, path in paths.items():
        leftovers = {p.name for p in path.iterdir()}
        assert any(name.startswith(".vectors-000002") or name == "vectors-000002.faiss" for name in leftovers)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the committed FAISS file must still match: no rebuild warning
            index = Index.open(path, llama_magnet)
        with index:
            assert sorted(d.id for d in index.documents()) == [f"old-{i}" for i in range(8)], step
            assert index.stats()["generation"] == 1
            assert [h.chunk_id for h in index.search("cats", k=8)] == before[step]
            # The next save works and clears the dead generation's files.
            index.add([Document("after", "Saved after the crash.")])
            index.save()
        assert sorted(p.name for p in path.glob("*vectors-*")) == ["vectors-000002.faiss"]
