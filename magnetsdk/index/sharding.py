"""Indexing across processes: every rank encodes a slice of the chunks, rank 0 stores them.

Launched with ``accelerate launch magnet index ...`` (or ``torchrun``), each process reads the same
sources and computes the same :class:`~magnetsdk.index.planning.Plan`; process ``r`` of ``w``
encodes chunks ``r, r + w, r + 2w, ...``; ``gather_object`` brings every slice to rank 0, which
applies the plan and saves. Rank 0 holds the index's write lock from before the plan is made until
the save, so the plan every rank computes is the one rank 0 applies. One process (no
``WORLD_SIZE`` > 1) does all of it itself and never imports accelerate.

Encoded batches are kept in ``pending.sqlite`` as they are made (see
:mod:`magnetsdk.index.pending`), so a killed run's re-run encodes only what is missing; an index
that this call created is removed again if the call fails before anything was saved into it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from magnetsdk.index.documents import AddReport, Document
from magnetsdk.index.index import Encoder, Index, report_for

# Chooses the ids of stored documents to delete in the same save (see sources.stale_documents).
Pruner = Callable[[Index], list[str]]


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def upsert_sharded(
    directory: str | os.PathLike,
    encoder: Encoder,
    documents: Iterable[Document],
    create_options: dict[str, Any] | None = None,
    batch_size: int = 32,
    progress: bool = False,
    prune: Pruner | None = None,
) -> AddReport | None:
    """Upsert ``documents`` into the index at ``directory`` (created if absent), delete the
    documents ``prune`` names, and save.

    Returns the report on the process that wrote the index (rank 0), None on the others.
    """
    documents = list(documents)
    create_options = create_options or {}
    directory = Path(directory).expanduser()
    if world_size() == 1:
        with Index.open_or_create(directory, encoder, **create_options) as index:
            index.lock_for_writing()
            started = time.perf_counter()
            removed = index.delete(prune(index)) if prune is not None else 0
            plan = index.plan(documents, upsert=True)
            encode_started = time.perf_counter()
            vectors = index.encode_chunks(plan.texts, batch_size=batch_size, progress=progress)
            encode_seconds = time.perf_counter() - encode_started
            index.apply(plan, vectors)
            index.save()
        return report_for(plan, encode_seconds, time.perf_counter() - started, removed)

    import torch
    from accelerate import PartialState
    from accelerate.utils import gather_object

    state = PartialState(cpu=not torch.cuda.is_available())  # gloo on CPU-only machines
    if state.num_processes != world_size():
        raise RuntimeError(
            f"WORLD_SIZE={world_size()} but accelerate set up {state.num_processes} process(es); launch with "
            "`accelerate launch --multi_gpu --num_processes N` or `torchrun --nproc_per_node N`"
        )
    index = None
    if state.is_main_process:
        index = Index.open_or_create(directory, encoder, **create_options)
        index.lock_for_writing()  # before any rank plans: nobody else changes the store meanwhile
    state.wait_for_everyone()
    if index is None:
        index = Index.open(directory, encoder)
    try:
        started = time.perf_counter()
        stale = prune(index) if prune is not None else []
        plan = index.plan(documents, upsert=True)
        texts = plan.texts
        mine = list(range(state.process_index, len(texts), state.num_processes))
        encode_started = time.perf_counter()
        vectors = index.encode_chunks(
            [texts[i] for i in mine], batch_size=batch_size, progress=progress and state.is_main_process
        )
        encode_seconds = time.perf_counter() - encode_started
        slices = gather_object([(mine, vectors)])
        report = None
        if state.is_main_process:
            removed = index.delete(stale)
            full = np.zeros((len(texts), index.manifest.dimension), dtype=np.float32)
            for rows, part in slices:
                full[rows] = part
            index.apply(plan, full)
            index.save()
            report = report_for(plan, encode_seconds, time.perf_counter() - started, removed)
        state.wait_for_everyone()
        return report
    finally:
        index.close()
