"""UBMoE-LLM (Li et al., ICML 2025): a unidirectional and a bidirectional FFN expert per layer.

Stage 1 (``magnet train --recipe ubmoe-ffn``) tunes only the FFN (MLP) projections of a decoder
with bidirectional contrastive learning. Stage 2 (:mod:`magnetsdk.train.ubmoe`) puts, in every
decoder layer, a :class:`TwoExpertFFN` where ``layer.mlp`` was: expert 0 is the original MLP,
expert 1 a copy of it with the stage-1 LoRA merged in, and a per-token gate ``Linear(d, 2)``
mixes them. Only the gates train (causal next-token loss plus :func:`balance_loss`).

Routing is a **soft mixture**, ``p0 * E0(x) + p1 * E1(x)`` with ``p = softmax(gate(x))``:

- with two experts there is no sparsity worth chasing (top-1 still runs one full MLP, soft runs
  two), while the soft mixture gives the gate the exact comparison gradient ``<dL/dy, E1 - E0>``;
  a top-1 gate only sees how scaling its *chosen* expert changes the loss;
- Switch-style top-1 scaling multiplies a frozen FFN's output by ``p < 1`` (a fresh gate at 0.5
  halves every FFN output), an input the frozen layers after it never saw; the soft mixture of
  two FFNs is an interpolation between two outputs the model already produces;
- a saturated gate reduces to one expert exactly, and :func:`force_expert` runs one expert alone
  (bit-for-bit the base model with expert 0, the stage-1 model with expert 1).

The layers are replaced through the public ``nn.Module`` attribute ``layer.mlp``; nothing of
the Hugging Face modeling code is copied or patched. This module also owns the saved mixture
directory (:func:`save_mixture` writes it, :func:`load_mixture` reads it)::

    OUT/magnet_config.json        MagnetConfig with ``mixture`` = MixtureConfig (kind "ubmoe")
    OUT/gates.safetensors         the gate weights, ``layers.<i>.weight`` / ``layers.<i>.bias``
    OUT/bidirectional/            the stage-1 peft adapter (adapter_config.json + safetensors)
    OUT/tokenizer*                only when stage 1 added layout tokens to the tokenizer

It knows nothing about data, optimizers or the command line.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

MIXTURE_KIND = "ubmoe"
GATES_FILE = "gates.safetensors"
BIDIRECTIONAL_DIR = "bidirectional"
_ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


class MixtureError(ValueError):
    """A stage-1 model or a saved mixture that cannot be used; the message says what to do."""


# ---------------------------------------------------------------------------- the module


class TwoExpertFFN(nn.Module):
    """Two FFN experts and a per-token gate, in place of one decoder layer's ``mlp``.

    ``force`` (None, 0 or 1) runs one expert alone; with ``record=True`` the last gate
    probabilities ``(b, n, 2)`` are kept in ``probs`` (with their graph) for the balance loss.
    """

    def __init__(self, unidirectional: nn.Module, bidirectional: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.experts = nn.ModuleList([unidirectional, bidirectional])
        self.gate = nn.Linear(hidden_size, 2)
        # A zero gate starts every token at 50/50; training moves it.
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)
        self.force: int | None = None
        self.record = False
        self.probs: torch.Tensor | None = None

    def routing(self, x: torch.Tensor) -> torch.Tensor:
        """Gate probabilities ``(..., 2)`` in float32 for hidden states ``x`` ``(..., d)``."""
        return torch.softmax(self.gate(x.to(self.gate.weight.dtype)).float(), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (b, n, d) -> (b, n, d)
        if self.force is not None:
            return self.experts[self.force](x)
        probs = self.routing(x)  # (b, n, 2)
        if self.record:
            self.probs = probs
        p = probs.to(x.dtype)
        return p[..., :1] * self.experts[0](x) + p[..., 1:] * self.experts[1](x)


def balance_loss(probs: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Switch Transformer load-balance loss ``E * sum_i f_i * P_i`` over the valid tokens.

    ``probs`` (b, n, E); ``f_i`` is the share of tokens whose top expert is ``i`` (no gradient),
    ``P_i`` the mean probability of expert ``i``. It is 1 when routing is uniform and grows to
    ``E`` when every token goes to one expert with certainty.
    """
    experts = probs.shape[-1]
    flat = probs.reshape(-1, experts)  # (t, E)
    if valid is not None:
        flat = flat[valid.reshape(-1).bool()]
    if flat.shape[0] == 0:
        return probs.sum() * 0.0
    share = torch.nn.functional.one_hot(flat.argmax(dim=-1), experts).float().mean(dim=0)  # (E,)
    return experts * (share * flat.mean(dim=0)).sum()


def mixture_modules(model: nn.Module) -> list[TwoExpertFFN]:
    return [m for m in model.modules() if isinstance(m, TwoExpertFFN)]


@contextlib.contextmanager
def force_expert(model: nn.Module, expert: int | None) -> Iterator[None]:
    """Run every mixture layer of ``model`` with one expert (0: original, 1: bidirectional)."""
    if expert not in (None, 0, 1):
        raise ValueError(f"expert={expert!r} must be 0 (unidirectional), 1 (bidirectional) or None")
    modules = mixture_modules(model)
    if not modules:
        raise MixtureError("the model has no UBMoE mixture layers")
    before = [m.force for m in modules]
    for m in modules:
        m.force = expert
    try:
        yield
    finally:
        for m, value in zip(modules, before, strict=True):
            m.force = value


# ---------------------------------------------------------------------------- building


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of ``model``, each with an ``mlp`` attribute (through peft wrappers too)."""
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None or not all(hasattr(layer, "mlp") for layer in layers):
        raise MixtureError(
            f"{type(model).__name__} has no decoder layers with an `mlp` module; UBMoE needs a decoder "
            "whose layers hold their FFN as `layer.mlp` (Llama, Qwen2, Mistral, ...)"
        )
    return list(layers)


def _ffn_names(model: nn.Module) -> set[str]:
    mlp = decoder_layers(model)[0].mlp
    if isinstance(mlp, TwoExpertFFN):
        raise MixtureError("the model already holds a UBMoE mixture; load the base model instead")
    return {name.rsplit(".", 1)[-1] for name, module in mlp.named_modules() if name}


def check_ffn_adapter(adapter_dir: Path, model: nn.Module) -> dict[str, Any]:
    """The adapter's peft config, after checking that it adapts only the FFN projections."""
    adapter_dir = Path(adapter_dir)
    missing = [name for name in _ADAPTER_FILES if not (adapter_dir / name).is_file()]
    if missing:
        raise MixtureError(
            f"{adapter_dir} is not a LoRA adapter directory (missing {missing}); pass the output "
            "directory of `magnet train --recipe ubmoe-ffn`"
        )
    peft_config = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    targets = peft_config.get("target_modules")
    ffn = _ffn_names(model)
    wrong = [targets] if isinstance(targets, str) or targets is None else sorted(set(targets) - ffn)
    if wrong or peft_config.get("modules_to_save"):
        outside = wrong or peft_config.get("modules_to_save")
        raise MixtureError(
            f"{adapter_dir} adapts {outside}, not only the FFN projections {sorted(ffn)}; UBMoE's "
            "bidirectional expert must differ from the base only in its MLPs: train stage 1 with "
            "`magnet train --recipe ubmoe-ffn`"
        )
    return peft_config


def bidirectional_mlps(model: nn.Module, adapter_dir: str | os.PathLike) -> list[nn.Module]:
    """Per layer, a copy of ``model``'s MLP with the stage-1 FFN LoRA of ``adapter_dir`` merged in.

    ``model`` is left unchanged. The merge runs on a temporary copy of the whole model (peft's
    public ``PeftModel.from_pretrained`` + ``merge_and_unload``), which also checks that the
    adapter changes nothing outside the MLPs (e.g. trained embedding rows).
    """
    from peft import PeftModel

    adapter_dir = Path(adapter_dir)
    check_ffn_adapter(adapter_dir, model)
    merged = PeftModel.from_pretrained(copy.deepcopy(model), str(adapter_dir)).merge_and_unload()
    mlps = {id(layer.mlp) for layer in decoder_layers(model)}
    mlp_prefixes = tuple(f"{name}." for name, module in model.named_modules() if id(module) in mlps)
    merged_params = dict(merged.named_parameters())
    changed = [
        name
        for name, parameter in model.named_parameters()
        if not name.startswith(mlp_prefixes)
        and (name not in merged_params or not torch.equal(parameter, merged_params[name]))
    ]
    if changed:
        raise MixtureError(
            f"the stage-1 adapter {adapter_dir} changes weights outside the FFN ({changed[:3]}); is it "
            "an adapter of this base model, trained with `--recipe ubmoe-ffn`?"
        )
    return [layer.mlp for layer in decoder_layers(merged)]


def install_experts(model: nn.Module, bidirectional: list[nn.Module]) -> list[TwoExpertFFN]:
    """Replace each layer's ``mlp`` by a :class:`TwoExpertFFN` (original, ``bidirectional[i]``)."""
    layers = decoder_layers(model)
    if len(bidirectional) != len(layers):
        raise MixtureError(f"{len(bidirectional)} bidirectional MLPs for {len(layers)} decoder layers")
    hidden = int(model.config.hidden_size)
    parameter = next(model.parameters())
    installed = []
    for layer, tuned in zip(layers, bidirectional, strict=True):
        mixture = TwoExpertFFN(layer.mlp, tuned, hidden).to(parameter.device)
        layer.mlp = mixture
        installed.append(mixture)
    return installed


def gate_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The gate weights by ``layers.<i>.weight`` / ``layers.<i>.bias`` (what gates.safetensors holds)."""
    state = {}
    for i, layer in enumerate(decoder_layers(model)):
        if not isinstance(layer.mlp, TwoExpertFFN):
            raise MixtureError(f"decoder layer {i} holds no UBMoE mixture")
        for key, value in layer.mlp.gate.state_dict().items():
            state[f"layers.{i}.{key}"] = value.detach().float().cpu().contiguous()
    return state


# ---------------------------------------------------------------------------- on disk


@dataclass
class MixtureConfig:
    """What ``magnet_config.json``'s ``mixture`` field holds for a UBMoE mixture."""

    kind: str = MIXTURE_KIND
    routing: str = "soft"  # p0 * E0(x) + p1 * E1(x), see the module docstring
    bidirectional: str = BIDIRECTIONAL_DIR  # the stage-1 adapter, relative to the mixture directory
    bidirectional_sha256: str = ""  # of its adapter_model.safetensors
    bidirectional_source: str = ""  # where stage 1 was read from (for the record)
    gates: str = GATES_FILE

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str) -> MixtureConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise MixtureError(f"{source}: unknown mixture keys {unknown}; known keys are {sorted(known)}")
        config = cls(**data)
        if config.kind != MIXTURE_KIND or config.routing != "soft":
            raise MixtureError(
                f"{source}: mixture kind={config.kind!r}, routing={config.routing!r}; this magnetsdk "
                f"reads kind={MIXTURE_KIND!r} with routing='soft'"
            )
        return config

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _sha256(path: Path) -> str:
    from magnetsdk.files import file_sha256

    return file_sha256(path)


def mixture_sha256(directory: str | os.PathLike) -> str:
    """One hash over the mixture's weights (stage-1 adapter and gates): the model's identity."""
    directory = Path(directory)
    from magnetsdk.config import MagnetConfig

    mixture = MixtureConfig.from_dict(MagnetConfig.load(directory).mixture, str(directory))
    parts = [
        _sha256(directory / mixture.bidirectional / "adapter_model.safetensors"),
        _sha256(directory / mixture.gates),
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def save_mixture(
    model: nn.Module,
    tokenizer,
    out_dir: str | os.PathLike,
    stage1_dir: str | os.PathLike,
    training: dict[str, Any],
) -> Path:
    """Write the mixture directory: gates, a copy of the stage-1 adapter, the config (last).

    The encoding settings (instruction, attention, pooling, layout tokens) and the base model are
    the stage-1 model's. :func:`magnetsdk.model_dir.write_model_directory` stages the files and
    moves them into place one by one, ``magnet_config.json`` last, so a loadable directory is a
    complete one; it replaces only files an earlier write listed, never the run's other files.
    """
    from safetensors.torch import save_file

    from magnetsdk.config import MagnetConfig
    from magnetsdk.model_dir import Manifest, write_model_directory
    from magnetsdk.st_layout import CUSTOM, write_custom_files

    stage1_dir, out_dir = Path(stage1_dir), Path(out_dir)
    stage1 = MagnetConfig.load(stage1_dir)
    mixture = MixtureConfig(
        bidirectional_sha256=_sha256(stage1_dir / "adapter_model.safetensors"),
        bidirectional_source=str(stage1_dir.resolve()),
    )
    config = MagnetConfig(
        base_model=stage1.base_model,
        instruction=stage1.instruction,
        encode_attention=stage1.encode_attention,
        pooling=stage1.pooling,
        max_length=stage1.max_length,
        layout_tokens=stage1.layout_tokens,
        adapted=True,
        training={"ubmoe": training, "stage1": stage1.training},
        mixture=mixture.to_dict(),
    )

    def stage(tmp: Path) -> Manifest:
        (tmp / BIDIRECTIONAL_DIR).mkdir()
        for name in _ADAPTER_FILES:
            shutil.copyfile(stage1_dir / name, tmp / BIDIRECTIONAL_DIR / name)
        save_file(gate_state(model), str(tmp / GATES_FILE))
        if (stage1_dir / "tokenizer_config.json").is_file():  # stage 1 added layout tokens
            tokenizer.save_pretrained(tmp)
        config.save(tmp)
        write_custom_files(tmp, prompts=None, default_prompt_name=None)
        return Manifest(
            kind="mixture",
            sentence_transformers=CUSTOM,
            sentence_transformers_reason="a UBMoE expert mixture is installed by magnetsdk at load",
        )

    return write_model_directory(out_dir, stage, whole=False)


def load_mixture(model: nn.Module, directory: str | os.PathLike) -> list[TwoExpertFFN]:
    """Install the saved mixture of ``directory`` into ``model`` (the loaded base model)."""
    from safetensors.torch import load_file

    from magnetsdk.config import MagnetConfig

    directory = Path(directory)
    mixture = MixtureConfig.from_dict(MagnetConfig.load(directory).mixture, str(directory))
    adapter = directory / mixture.bidirectional
    gates = directory / mixture.gates
    for path in (adapter / "adapter_model.safetensors", adapter / "adapter_config.json", gates):
        if not path.is_file():
            raise MixtureError(
                f"{path} is missing: {directory} is an incomplete UBMoE mixture; re-run `magnet ubmoe`"
            )
    if mixture.bidirectional_sha256 and _sha256(adapter / "adapter_model.safetensors") != (
        mixture.bidirectional_sha256
    ):
        raise MixtureError(
            f"{adapter}/adapter_model.safetensors does not match the hash recorded in {directory}'s "
            "magnet_config.json; the file was changed or damaged: re-run `magnet ubmoe`"
        )
    installed = install_experts(model, bidirectional_mlps(model, adapter))
    state = load_file(str(gates))
    expected = {f"layers.{i}.{key}" for i in range(len(installed)) for key in ("weight", "bias")}
    if set(state) != expected:
        raise MixtureError(
            f"{gates} holds gates {sorted(set(state))[:4]}..., expected {len(installed)} layers' "
            "weight and bias; it belongs to another model"
        )
    with torch.no_grad():
        for i, module in enumerate(installed):
            for key, parameter in module.gate.named_parameters():
                value = state[f"layers.{i}.{key}"]
                if value.shape != parameter.shape:
                    raise MixtureError(
                        f"{gates}: layers.{i}.{key} has shape {tuple(value.shape)}, expected "
                        f"{tuple(parameter.shape)}; it belongs to another model"
                    )
                parameter.copy_(value.to(parameter.device, parameter.dtype))
    return installed
