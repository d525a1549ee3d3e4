"""FSDP2 through accelerate and the shipped config, on a tiny model.

On CPU processes (gloo): accelerate selects FSDP only on GPU-like devices; under an FSDP config
on a CPU it quietly falls back to DDP (``MULTI_CPU``), although torch's FSDP2 (``fully_shard``)
itself runs on CPU with gloo. So ``accelerate launch --config_file configs/accelerate/fsdp.yaml``
starts this file, which sets the accelerator's distributed type to FSDP with the plugin accelerate
builds from that config's variables and then runs ``magnet train --config run.toml`` unchanged:
the weights are really sharded and the trainer's FSDP path (model and optimizer prepared
together, checkpoints and export gathered from the shards, resume re-sharding them) runs as on GPUs.

- Two FSDP processes with 2 examples each compute the same losses, write the same checkpoint and
  export the same adapter as one process with 4 examples. Only the order of floating-point sums
  differs: losses agree to relative 1e-4 (as for DDP); each weight and optimizer-moment tensor
  to a relative norm of difference 1e-3 (measured: 3.7e-5 at worst). Not entry by entry: Adam's
  first steps divide by the gradient's size, so an entry whose gradient is near 0 amplifies that
  rounding noise (one LoRA entry was measured 1.1e-3 of its tensor's largest entry apart).
- A checkpoint written under FSDP resumes under FSDP: the later steps reproduce those losses.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from magnetsdk.train.checkpoint import list_checkpoints
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.metrics import read_metrics
from magnetsdk.train.trainer import train

from magnetsdk import Magnet

pytestmark = pytest.mark.usefixtures("one_thread")

TOLERANCE = 1e-4
TENSOR_TOLERANCE = 1e-3  # |a - b| / |a|, per tensor
LOSSES = ("mntp", "sscl", "msg", "loss")
FSDP_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "accelerate" / "fsdp.yaml"


def settings(base_dir, data_file, output_dir, **overrides) -> dict:
    base = dict(
        base_model=base_dir,
        data=[data_file],
        output_dir=str(output_dir),
        batch_size=4,
        max_length=32,
        sscl_max_length=48,
        warmup_steps=1,
        learning_rate=5e-3,
        max_steps=6,
        save_every=3,
        keep_checkpoints=4,
        gradient_accumulation=2,  # covers FSDP's no-sync micro-batches
        gradient_checkpointing=True,
        lora_dropout=0.0,  # processes seed dropout differently
        attention_dropout=0.0,
        progress=False,
        # fp32: "auto" picks bf16 on a CPU with native bf16 (AVX512-BF16, AMX), and bf16 rounding
        # alone moves one- and two-process losses apart by more than TOLERANCE after one update.
        mixed_precision="no",
        positives="dropout",  # no generation pass
    )
    return {**base, **overrides}


def write_toml(values: dict, path: Path) -> Path:
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items()))
    return path


def launch_fsdp(config_file: Path, *extra: str, processes: int = 2, on_cpu: bool = True) -> None:
    target = [__file__] if on_cpu else ["-m", "magnetsdk.cli.main"]
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(FSDP_CONFIG),
        "--num_processes",
        str(processes),
        *target,
        "train",
        "--config",
        str(config_file),
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]


def assert_same_losses(a: list[dict], b: list[dict]) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for left, right in zip(a, b, strict=True):
        for key in LOSSES:
            if left[key] is None:
                assert right[key] is None
            else:
                assert right[key] == pytest.approx(left[key], rel=TOLERANCE), (left["step"], key)


def assert_same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert (a[name] - b[name]).norm() <= TENSOR_TOLERANCE * a[name].norm(), name


def checkpoint_weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    path = next(c.path for c in list_checkpoints(run_dir) if c.step == step)
    return load_file(str(path / "trainable.safetensors"))


def adapter(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "adapter_model.safetensors"))


def test_fsdp_on_two_processes_matches_one_process_and_resumes(tmp_path, base_dir, data_file):
    one = train(TrainConfig(**settings(base_dir, data_file, tmp_path / "one")))
    ones = read_metrics(one.metrics_path)

    run_dir = tmp_path / "fsdp"
    config_file = write_toml(settings(base_dir, data_file, run_dir, batch_size=2), tmp_path / "run.toml")
    launch_fsdp(config_file)
    fsdp = read_metrics(run_dir / "metrics.jsonl")
    assert [r["tokens"] for r in fsdp] == [r["tokens"] for r in ones]  # the same examples
    assert_same_losses(ones, fsdp)
    # Checkpoints and the export hold whole tensors gathered from the shards, equal to the 1-process ones.
    assert [c.step for c in list_checkpoints(run_dir)] == [3, 6]
    assert_same_tensors(checkpoint_weights(one.output_dir, 3), checkpoint_weights(run_dir, 3))
    optimizer_one = torch.load(list_checkpoints(one.output_dir)[0].path / "optimizer.pt", weights_only=True)
    optimizer_fsdp = torch.load(list_checkpoints(run_dir)[0].path / "optimizer.pt", weights_only=True)
    assert optimizer_fsdp["param_groups"] == optimizer_one["param_groups"]
    for index, state in optimizer_one["state"].items():
        assert_same_tensors(state, optimizer_fsdp["state"][index])
    assert_same_tensors(adapter(one.output_dir), adapter(run_dir))
    saved = json.loads((run_dir / "magnet_config.json").read_text())
    assert saved["training"]["processes"] == 2 and saved["training"]["engine"] == "FSDP"
    magnet = Magnet.from_pretrained(str(run_dir), device="cpu")
    assert magnet.encode("the cat sat on the mat").shape == (64,)

    # Resume under FSDP from the step-3 checkpoint: steps 4-6 must come out the same again.
    shutil.rmtree(list_checkpoints(run_dir)[-1].path)
    (run_dir / "adapter_model.safetensors").unlink()
    launch_fsdp(config_file, "--resume")
    resumed = read_metrics(run_dir / "metrics.jsonl")
    assert_same_losses(ones, resumed)
    saved = json.loads((run_dir / "magnet_config.json").read_text())
    assert saved["training"]["tokens_last_session"] == sum(r["tokens"] for r in resumed[3:])  # from step 3
    assert_same_tensors(adapter(one.output_dir), adapter(run_dir))


def test_fsdp_full_finetune_exports_the_same_model_as_one_process(tmp_path, base_dir, data_file):
    """All weights train and are sharded; the tied embedding and LM head are written once, as unsharded."""
    common = dict(max_steps=2, save_every=2, full_finetune=True)
    one = train(TrainConfig(**settings(base_dir, data_file, tmp_path / "one", **common)))
    run_dir = tmp_path / "fsdp"
    values = settings(base_dir, data_file, run_dir, batch_size=2, **common)
    launch_fsdp(write_toml(values, tmp_path / "run.toml"))
    assert_same_losses(read_metrics(one.metrics_path), read_metrics(run_dir / "metrics.jsonl"))
    from safetensors.torch import load_file

    assert_same_tensors(checkpoint_weights(one.output_dir, 2), checkpoint_weights(run_dir, 2))
    exported = [load_file(str(d / "model.safetensors")) for d in (one.output_dir, run_dir)]
    assert_same_tensors(*exported)  # the same names too: no second copy of the tied weights


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fsdp_on_gpus_trains_and_exports(tmp_path, base_dir, data_file):
    """The shipped config as is, on every visible GPU (no CPU switch): trains, checkpoints, exports."""
    run_dir = tmp_path / "gpu"
    values = settings(base_dir, data_file, run_dir, batch_size=2, device="cuda")
    launch_fsdp(write_toml(values, tmp_path / "run.toml"), processes=torch.cuda.device_count(), on_cpu=False)
    assert all(math.isfinite(r["loss"]) for r in read_metrics(run_dir / "metrics.jsonl"))
    assert [c.step for c in list_checkpoints(run_dir)] == [3, 6]
    assert Magnet.from_pretrained(str(run_dir), device="cuda").encode("a cat").shape == (64,)


def _run_fsdp_on_cpu() -> None:
    """The process body started by :func:`launch_fsdp`: `magnet train` with FSDP on CPU processes."""
    from accelerate import Accelerator, PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from magnetsdk.cli.main import cli

    init = Accelerator.__init__

    def init_with_fsdp(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        # What accelerate does on GPUs under an FSDP config (state.py: AcceleratorState.__init__).
        self.state.fsdp_plugin = FullyShardedDataParallelPlugin()  # from the config's FSDP_* variables
        self.state.distributed_type = DistributedType.FSDP
        PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    Accelerator.__init__ = init_with_fsdp
    cli(prog_name="magnet")


if __name__ == "__main__":
    _run_fsdp_on_cpu()
