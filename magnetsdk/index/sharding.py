"""Indexing across processes: every rank encodes a slice of the chunks, rank 0 stores them.

Launched with ``accelerate launch magnet index ...`` (or ``torchrun``), each process reads the same
sources and computes the same :class:`~magnetsdk.index.planning.Plan`; process ``r`` of ``w``
encodes chunks ``r, r + w, r + 2w, ...``; ``gather_object`` brings every slice to rank 0, which
applies the plan and saves. One process (no ``WORLD_SIZE`` > 1) does all of it itself and never
imports accelerate.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from magnetsdk.index.documents import AddReport, Document
from magnetsdk.index.index import Encoder, Index, report_for


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def upsert_sharded(
    directory: str | os.PathLike,
    encoder: Encoder,
    documents: Iterable[Document],
    create_options: dict[str, Any] | None = None,
    batch_size: int = 32,
    progress: bool = False,
) -> AddReport | None:
    """Upsert ``documents`` into the index at ``directory`` (created if absent) and save.

    Returns the report on the process that wrote the index (rank 0), None on the others.
    """
    documents = list(documents)
    create_options = create_options or {}
    if world_size() == 1:
        with Index.open_or_create(directory, encoder, **create_options) as index:
            report = index.upsert(documents, batch_size=batch_size, progress=progress)
            index.save()
        return report

    import torch
    from accelerate import PartialState
    from accelerate.utils import gather_object

    state = PartialState(cpu=not torch.cuda.is_available())  # gloo on CPU-only machines
    if state.num_processes != world_size():
        raise RuntimeError(
            f"WORLD_SIZE={world_size()} but accelerate set up {state.num_processes} process(es); launch with "
            "`accelerate launch --multi_gpu --num_processes N` or `torchrun --nproc_per_node N`"
        )
    if state.is_main_process:
        Index.open_or_create(directory, encoder, **create_options).close()
    state.wait_for_everyone()
    index = Index.open(Path(directory), encoder)
    try:
        started = time.perf_counter()
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
            full = np.zeros((len(texts), index.manifest.dimension), dtype=np.float32)
            for rows, part in slices:
                full[rows] = part
            index.apply(plan, full)
            index.save()
            report = report_for(plan, encode_seconds, time.perf_counter() - started)
        state.wait_for_everyone()
        return report
    finally:
        index.close()
