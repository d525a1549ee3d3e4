"""Training checkpoints: written atomically, read back exactly, the oldest pruned.

A checkpoint is a directory ``<run>/checkpoints/step-00000100/`` holding

- ``trainable.safetensors``: the weights that train (LoRA adapters, or all weights when fully
  fine-tuning), by parameter name;
- ``optimizer.pt``, ``scheduler.pt``: their ``state_dict`` (tensors and numbers only, read back
  with ``weights_only=True``);
- ``rng.json``: the Python, NumPy and torch (CPU and CUDA) generator states of every process;
- ``state.json``: the step, the format version and the config the run was started with.

The directory is written under a temporary name and renamed into place, so a run killed at any
moment leaves only complete checkpoints (and perhaps a ``.step-*.tmp`` directory, which
:func:`remove_partial_checkpoints` clears and nothing reads). A checkpoint that cannot be read back
(damaged on disk, copied half) raises :class:`CheckpointError` before anything is restored, so
the caller can fall back to an older one. The data position is the step (see
:class:`magnetsdk.train.data.Order`), so it needs no file of its own.

Under FSDP every process holds only a shard of each weight and of its optimizer state.
:func:`gather_training_state` assembles whole tensors on the main process before writing, and
:func:`load_checkpoint` given the ``model`` hands whole tensors back to be re-sharded, so the files
are the same whether a run used one process, DDP or FSDP, and any of them can resume it.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT_VERSION = 1
_PREFIX = "step-"


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be read back; nothing was restored from it."""


@dataclass
class Checkpoint:
    path: Path
    step: int  # optimizer steps completed


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: Path) -> list[Checkpoint]:
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        if path.is_dir() and path.name.startswith(_PREFIX) and (path / "state.json").is_file():
            found.append(Checkpoint(path, int(path.name[len(_PREFIX) :])))
    return sorted(found, key=lambda c: c.step)


def remove_partial_checkpoints(run_dir: Path) -> int:
    """Delete the temporary directories of checkpoints whose writing was interrupted; their count."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return 0
    partial = [
        p
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith(f".{_PREFIX}") and p.name.endswith(".tmp")
    ]
    for path in partial:
        shutil.rmtree(path, ignore_errors=True)
    return len(partial)


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def rng_state() -> dict[str, Any]:
    """This process's generator states as plain JSON values (they travel between processes too)."""
    _, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    return {
        "python": [version, list(internal), gauss],
        "numpy": {
            "keys": keys.tolist(),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state().tolist(),
        "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    keys = np.array(n["keys"], dtype=np.uint32)
    np.random.set_state(("MT19937", keys, n["pos"], n["has_gauss"], n["cached"]))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


def _by_position(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """An optimizer state keyed by parameter name -> torch's own format, keyed by position."""
    position = {name: i for i, name in enumerate(names)}
    return {
        "state": {position[name]: value for name, value in state["state"].items()},
        "param_groups": [{**g, "params": [position[n] for n in g["params"]]} for g in state["param_groups"]],
    }


def _by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of :func:`_by_position`."""
    return {
        "state": {names[int(i)]: value for i, value in state["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]],
    }


def _optimizer_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The names of the optimizer's parameters, in the optimizer's order."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def gather_training_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The trainable weights by name and the optimizer state (torch's format), whole and on the CPU.

    Uses torch's distributed state-dict API, the one accelerate's ``get_state_dict`` calls for FSDP2;
    it also gathers the optimizer state and can skip the frozen base weights. Under FSDP it is a
    collective: every process must call it; the main process gets the tensors, the others empty
    dicts. Unsharded (one process, DDP) it returns the tensors as they are.
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
    weights = get_model_state_dict(model, options=options)
    by_name = get_optimizer_state_dict(model, optimizer, options=options)
    if not weights:  # not the main process
        return {}, {}
    names = [name for group in by_name["param_groups"] for name in group["params"]]
    return {name: weights[name] for name in names}, _by_position(by_name, names)


def save_checkpoint(
    run_dir: Path,
    step: int,
    trainable: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer | dict[str, Any],
    scheduler: Any,
    rng_states: list[dict[str, Any]],
    config: dict[str, Any],
    keep: int,
) -> Path:
    """Write the checkpoint of ``step`` atomically (main process only) and prune old ones.

    ``optimizer`` is the optimizer or its state dict (from :func:`gather_training_state`).
    """
    from safetensors.torch import save_file

    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{_PREFIX}{step:08d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=root))
    try:
        save_file(
            {name: t.detach().contiguous().cpu() for name, t in trainable.items()},
            str(tmp / "trainable.safetensors"),
        )
        optimizer_state = optimizer if isinstance(optimizer, dict) else optimizer.state_dict()
        torch.save(optimizer_state, tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        (tmp / "rng.json").write_text(json.dumps(rng_states), encoding="utf-8")
        state = {"format_version": FORMAT_VERSION, "step": step, "config": config}
        (tmp / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        for file in tmp.iterdir():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
        if final.exists():  # a re-run of the same step: replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old.path, ignore_errors=True)
    return final


def load_checkpoint(
    checkpoint: Checkpoint,
    trainable: dict[str, torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    rank: int,
    model: torch.nn.Module | None = None,
) -> dict[str, Any]:
    """Restore weights, optimizer, scheduler and this process's RNG; return ``state.json``.

    Given the ``model`` that holds ``trainable``, the whole tensors go through torch's distributed
    state-dict API, which re-shards them under FSDP (every process must call it then). Without it
    they are copied into the parameters, which must then be unsharded.
    """
    state, weights, optimizer_state, scheduler_state, rng = read_checkpoint(checkpoint)
    if state.get("format_version", FORMAT_VERSION) > FORMAT_VERSION:
        raise ValueError(f"{checkpoint.path} was written by a newer magnetsdk; upgrade to resume it")
    missing = sorted(set(trainable) - set(weights))
    unexpected = sorted(set(weights) - set(trainable))
    if missing or unexpected:
        raise ValueError(
            f"{checkpoint.path} does not match this model (missing {missing[:3]}, unexpected {unexpected[:3]}); "
            "resume with the same base model and LoRA settings, or start a new output directory"
        )
    if rank >= len(rng):
        raise ValueError(
            f"{checkpoint.path} was written by {len(rng)} process(es); resume with the same number of processes"
        )
    # The resumed run's own learning rate and weight decay, as its optimizer and scheduler were
    # built: loading their states restores the saved ones, which would silently win.
    base_lrs = list(scheduler.base_lrs)
    decays = [group["weight_decay"] for group in optimizer.param_groups]
    if model is None:
        with torch.no_grad():
            for name, parameter in trainable.items():
                parameter.copy_(weights[name].to(parameter.device, parameter.dtype))
        optimizer.load_state_dict(optimizer_state)
    else:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        whole = StateDictOptions(full_state_dict=True, strict=False)  # strict=False: the frozen weights stay
        set_model_state_dict(model, weights, options=whole)
        by_name = _by_name(optimizer_state, _optimizer_names(model, optimizer))
        set_optimizer_state_dict(model, optimizer, by_name, options=whole)
    scheduler.load_state_dict(scheduler_state)
    keep_run_settings(optimizer, scheduler, base_lrs, decays)
    set_rng_state(rng[rank])
    return state


def keep_run_settings(optimizer: Any, scheduler: Any, base_lrs: list[float], decays: list[float]) -> None:
    """After loading a checkpoint: the saved moments and step stay, the run's own learning rate and
    weight decay apply (``scheduler`` is a ``LambdaLR``; its schedule is always the run's own)."""
    scheduler.base_lrs = base_lrs
    groups = optimizer.param_groups
    for group, lr, decay, factor in zip(groups, base_lrs, decays, scheduler.lr_lambdas, strict=True):
        group["initial_lr"] = lr
        group["weight_decay"] = decay
        group["lr"] = lr * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in groups]


def read_checkpoint(checkpoint: Checkpoint) -> tuple[dict, dict, dict, dict, list]:
    """Every file of a checkpoint, read and parsed; a :class:`CheckpointError` if any cannot be."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = checkpoint.path
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
        weights = load_file(str(path / "trainable.safetensors"))
        optimizer_state = torch.load(path / "optimizer.pt", weights_only=True)
        scheduler_state = torch.load(path / "scheduler.pt", weights_only=True)
        rng = json.loads((path / "rng.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError, SafetensorError) as error:
        # json.JSONDecodeError is a ValueError; torch.load raises RuntimeError/EOFError on a cut file.
        raise CheckpointError(f"{path} cannot be read ({type(error).__name__}: {error})") from None
    return state, weights, optimizer_state, scheduler_state, rng
