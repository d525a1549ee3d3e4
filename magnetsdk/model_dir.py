"""The model directory on disk: the one writer, and the manifest that :mod:`magnetsdk.loading` reads.

Every writer of a model directory (``Magnet.save``, training's export, the UBMoE mixture, the
shipped-adapter script) stages its files with a callback and hands them to :func:`write_model_directory`,
which:

- refuses to delete what it did not write. A directory this code wrote carries ``magnet_files.json``,
  the manifest of its files. ``whole=True`` (the directory *is* the model, e.g. ``Magnet.save``)
  replaces a target only when it is empty or every file in it is listed in its manifest;
  ``whole=False`` (the model files sit beside other files, e.g. a training run's checkpoints and
  metrics) replaces only files the previous manifest lists and refuses to overwrite any other;
- writes atomically: files are staged in a temporary directory on the same file system and renamed
  into place, ``magnet_config.json`` last, so a directory that names itself a model is a complete one;
- adds the sentence-transformers files, written as plain JSON (no sentence-transformers import).

Two sentence-transformers layouts (the manifest's ``sentence_transformers`` says which, and why):

- ``stock``: ``Transformer`` + ``Pooling(lasttoken, include_prompt=True)`` + an optional ``Dense`` (the
  principal-component shift) + ``Normalize``. The model's instruction is the default prompt,
  ``config.json`` says ``"is_causal": false`` for a bidirectional encoder, and the tokenizer's
  post-processor appends the EOS token the encoder pools. ``SentenceTransformer(dir)`` loads it
  with no flag, and vLLM serves it. :mod:`magnetsdk.loading` undoes the two tokenizer and attention
  changes for magnetsdk itself (the manifest keeps the original post-processor).
- ``magnetsdk``: ``magnetsdk.integrations.sentence_transformers.MagnetModule`` + ``Normalize``, for
  what stock modules cannot express (echo embeddings, mean pooling over the text tokens only, an
  adapter or expert mixture that is not merged). It needs ``trust_remote_code=True``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from magnetsdk.config import CONFIG_NAME, MagnetConfig, Pooling
from magnetsdk.files import atomic_write_text, current_umask, file_sha256
from magnetsdk.modes import AttentionMode

MANIFEST_NAME = "magnet_files.json"
MANIFEST_VERSION = 1
STOCK = "stock"
CUSTOM = "magnetsdk"
# Frozen: saved model directories name these classes. The ``sentence_transformers.models.*`` paths
# are the ones sentence-transformers 2.x to 6.x import and vLLM recognises in ``modules.json``.
MAGNET_MODULE = "magnetsdk.integrations.sentence_transformers.MagnetModule"
ST_TRANSFORMER = "sentence_transformers.models.Transformer"
ST_POOLING = "sentence_transformers.models.Pooling"
ST_DENSE = "sentence_transformers.models.Dense"
ST_NORMALIZE = "sentence_transformers.models.Normalize"
SHIFT_WEIGHTS = "model.safetensors"  # in the Dense folder: ``linear.weight`` (d, d), ``linear.bias`` (d,)
# What an older Magnet.save wrote, before manifests: such a directory may be replaced.
_LEGACY_SAVE_FILES = {
    "config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "chat_template.jinja", "special_tokens_map.json", CONFIG_NAME, "principal_component.safetensors",
    "modules.json", "config_sentence_transformers.json", "1_Normalize/config.json",
}  # fmt: skip
# What an older training export or UBMoE mixture wrote into a run directory, before manifests.
_LEGACY_EXPORT_FILES = _LEGACY_SAVE_FILES | {
    "adapter_config.json", "adapter_model.safetensors", "gates.safetensors",
    "bidirectional/adapter_config.json", "bidirectional/adapter_model.safetensors",
}  # fmt: skip


class ModelDirectoryError(FileExistsError):
    """A model directory write would delete or overwrite files it did not write; the message says what to do."""


@dataclass
class Manifest:
    """What ``magnet_files.json`` records: the files this code wrote and how they are meant to be read."""

    kind: str  # "model" (merged weights), "adapter" (peft adapter + base name), "mixture" (UBMoE)
    files: list[str] = field(default_factory=list)  # relative, "/"-separated, this manifest included
    sentence_transformers: str | None = None  # STOCK, CUSTOM, or None (not written)
    sentence_transformers_reason: str = ""  # why that layout
    # The saved tokenizer appends EOS (stock layout); magnetsdk restores the post-processor it had.
    tokenizer_appends_eos: bool = False
    tokenizer_post_processor: dict[str, Any] | None = None
    weights_sha256: str | None = None  # of the merged weights (kind "model"): the model's identity
    format_version: int = MANIFEST_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def read_manifest(directory: str | os.PathLike) -> Manifest | None:
    """The manifest of a model directory, or None for a directory written before manifests (or by others)."""
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}); re-save the model") from None
    version = data.get("format_version", MANIFEST_VERSION)
    if not isinstance(version, int) or version > MANIFEST_VERSION:
        raise ValueError(
            f"{path} has format_version {version!r}, newer than this magnetsdk reads ({MANIFEST_VERSION}); "
            "upgrade magnetsdk"
        )
    known = {f.name for f in fields(Manifest)}
    return Manifest(**{k: v for k, v in data.items() if k in known})


# ---------------------------------------------------------------------------- the writer


def write_model_directory(
    target: str | os.PathLike, stage: Callable[[Path], Manifest], whole: bool = True, extend: bool = False
) -> Path:
    """Write a model directory: ``stage(tmp)`` writes the files into ``tmp`` and returns the manifest.

    ``whole=True`` replaces the whole ``target`` (refused unless it is empty or holds only files
    its manifest lists); ``whole=False`` writes the files into ``target`` beside others, replacing
    only files the previous manifest lists (and deleting those of them it no longer writes);
    ``extend=True`` (with ``whole=False``) adds files to the previous manifest and deletes none.
    Raises :class:`ModelDirectoryError` before writing anything when the write would delete or
    overwrite a file this code did not write.
    """
    target = Path(target).expanduser()
    if target.exists() and not target.is_dir():
        raise ModelDirectoryError(f"{target} exists and is a file; choose a directory path")
    previous = _check_target(target, whole)
    staging_root = target.parent if whole else target
    staging_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".staging", dir=staging_root))
    try:
        manifest = stage(tmp)
        written = _files_under(tmp)
        kept = previous if extend else set()
        manifest.files = sorted({*written, *kept, MANIFEST_NAME})
        if not whole:
            clashes = [f for f in written if (target / f).exists() and f not in previous]
            if clashes:
                raise ModelDirectoryError(_foreign_message(target, clashes, whole=False))
        atomic_write_text(tmp / MANIFEST_NAME, manifest.to_json())
        _make_readable(tmp)
        if whole:
            _swap_in(tmp, target)
        else:
            _move_into_place(tmp, target, stale=set(previous) - set(manifest.files))
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _check_target(target: Path, whole: bool) -> set[str]:
    """The files of ``target`` this code wrote (its manifest's); raise if a whole write would delete others."""
    if not target.is_dir():
        return set()
    present = _files_under(target)
    manifest = read_manifest(target)
    if manifest is not None:
        ours = set(manifest.files)
    elif (target / "modules.json").is_file() and MAGNET_MODULE in (target / "modules.json").read_text():
        ours = _LEGACY_SAVE_FILES  # an older Magnet.save directory: replaceable, as it was then
    elif not whole and (target / CONFIG_NAME).is_file():
        ours = _LEGACY_EXPORT_FILES  # an older export beside a run's files: these names, as then
    else:
        ours = set()
    foreign = sorted(f for f in present if f not in ours)
    if whole and foreign:
        raise ModelDirectoryError(_foreign_message(target, foreign, whole=True))
    return ours


def _foreign_message(target: Path, foreign: list[str], whole: bool) -> str:
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    if whole:
        return (
            f"{target} is not empty and holds files that magnetsdk's model writer did not write ({shown}); "
            f"writing a model there would delete them. Write it to a new or empty directory "
            f"(for example {target / 'model'}), or move those files away first"
        )
    return (
        f"{target} already holds {shown}, which magnetsdk's model writer did not write; it will not "
        "overwrite them. Write the model to another directory, or move those files away first"
    )


def _files_under(directory: Path) -> list[str]:
    return sorted(
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if (p.is_file() or p.is_symlink()) and ".staging" not in p.relative_to(directory).parts[0]
    )


def _make_readable(tmp: Path) -> None:
    """mkdtemp and some writers make owner-only files; a model directory is not secret."""
    umask = current_umask()
    for path in [tmp, *tmp.rglob("*")]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)


def _swap_in(tmp: Path, target: Path) -> None:
    # Linux cannot swap two directories in one rename: move the old one aside first, put it back
    # if the second rename fails, and delete it (only files this code wrote) once the new one is in.
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{tmp.name}")
        os.replace(target, old)
    try:
        os.replace(tmp, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _move_into_place(tmp: Path, target: Path, stale: set[str]) -> None:
    """Move staged files into ``target`` one by one, the manifest before and ``magnet_config.json`` last."""
    staged = _files_under(tmp)
    last = [f for f in (MANIFEST_NAME, CONFIG_NAME) if f in staged]
    for name in [f for f in staged if f not in last] + last:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / name, target / name)
    for name in sorted(stale):
        (target / name).unlink(missing_ok=True)
        parent = (target / name).parent
        while parent != target and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent


# ---------------------------------------------------------------------------- sentence-transformers files


def stock_obstacle(config: MagnetConfig, tokenizer) -> str | None:
    """Why the stock sentence-transformers modules cannot encode like ``config``, or None when they can."""
    if config.mixture:
        return "a UBMoE expert mixture runs two FFN experts per layer, which a stock Transformer cannot load"
    if config.echo:
        return "echo embeddings give each text twice and pool the second copy, which stock modules cannot"
    if config.pooling is Pooling.MEAN:
        return (
            "mean pooling over the text tokens only (instruction and EOS excluded) is not a stock "
            "Pooling mode (include_prompt=False still averages the EOS)"
        )
    if config.encode_attention not in (AttentionMode.CAUSAL, AttentionMode.BIDIRECTIONAL):
        return f"{config.encode_attention.value} attention has no stock equivalent"
    if tokenizer.eos_token_id is None:
        return "the tokenizer has no EOS token for last-token pooling"
    return None


def instruction_prompt(instruction: str) -> str:
    """The sentence-transformers prompt that encodes like ``instruction``: it is prepended to the text."""
    return f"{instruction.rstrip()} " if instruction.strip() else ""


def write_stock_files(
    directory: Path,
    config: MagnetConfig,
    dimension: int,
    shift: Any | None,
    prompts: dict[str, str] | None,
    default_prompt_name: str | None,
) -> None:
    """The stock pipeline: Transformer, last-token Pooling, the shift as a Dense layer, Normalize.

    Prompts keep the meaning they have for :class:`MagnetModule`: an empty prompt is the model's
    instruction and a named prompt replaces it (one space before the text). The model's instruction
    is stored as the prompt ``"instruction"`` and is the default, so ``encode(x)`` equals
    ``Magnet.encode(x)``.
    """
    modules = [{"idx": 0, "name": "0", "path": "", "type": ST_TRANSFORMER}]
    _write_json(
        directory / "sentence_bert_config.json",
        {
            "max_seq_length": config.max_length,
            "do_lower_case": False,
            "transformer_task": "feature-extraction",
            # Text only: a chat template in the tokenizer must not turn texts into chat messages.
            "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
            "module_output_name": "token_embeddings",
        },
    )
    # The pre-6.0 key set: sentence-transformers 6 converts it, and vLLM reads only this one.
    pooling = {f"pooling_mode_{m}": False for m in ("cls_token", "mean_tokens", "max_tokens")}
    pooling |= {"pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False}
    pooling |= {"word_embedding_dimension": dimension, "pooling_mode_lasttoken": True, "include_prompt": True}
    _write_json(directory / "1_Pooling" / "config.json", pooling)
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": ST_POOLING})
    if shift is not None:
        _write_shift_dense(directory / "2_Dense", shift, dimension)
        modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": ST_DENSE})
    index = len(modules)
    _write_json(directory / f"{index}_Normalize" / "config.json", {})
    modules.append({"idx": index, "name": str(index), "path": f"{index}_Normalize", "type": ST_NORMALIZE})
    own = instruction_prompt(config.instruction)
    named = {
        name: (instruction_prompt(text) if text.strip() else own)
        for name, text in _checked_prompts(prompts, default_prompt_name).items()
    }
    _write_settings(directory, {"instruction": own, **named}, default_prompt_name or "instruction")
    _write_json(directory / "modules.json", modules)


def write_custom_files(
    directory: Path, prompts: dict[str, str] | None, default_prompt_name: str | None
) -> None:
    """``MagnetModule`` (which reads ``magnet_config.json``) and ``Normalize``."""
    _write_json(directory / "1_Normalize" / "config.json", {})
    _write_settings(directory, _checked_prompts(prompts, default_prompt_name), default_prompt_name)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": MAGNET_MODULE},
        {"idx": 1, "name": "1", "path": "1_Normalize", "type": ST_NORMALIZE},
    ]
    _write_json(directory / "modules.json", modules)


def _checked_prompts(prompts: dict[str, str] | None, default_prompt_name: str | None) -> dict[str, str]:
    prompts = {"query": "", "document": "", **(prompts or {})}
    for name, text in prompts.items():
        if not isinstance(text, str):
            raise TypeError(f"prompts[{name!r}] is {type(text).__name__}, expected str")
    allowed = {*prompts, "instruction"}
    if default_prompt_name is not None and default_prompt_name not in allowed:
        raise ValueError(f"default_prompt_name={default_prompt_name!r} is not one of {sorted(allowed)}")
    return prompts


def _write_settings(directory: Path, prompts: dict[str, str], default_prompt_name: str | None) -> None:
    from magnetsdk import __version__

    settings = {
        "model_type": "SentenceTransformer",
        "__version__": {"magnetsdk": __version__},
        "prompts": prompts,
        "default_prompt_name": default_prompt_name,
        "similarity_fn_name": "cosine",
    }
    _write_json(directory / "config_sentence_transformers.json", settings)


def _write_shift_dense(folder: Path, shift: Any, dimension: int) -> None:
    """The principal-component shift as a linear layer: ``e + w v`` (I, w v) or ``e - (e.v) v`` (I - v v^T, 0)."""
    import numpy as np
    from safetensors.numpy import save_file

    v = shift.component.astype(np.float32)  # (d,)
    if shift.mode.value == "shift":
        weight, bias = np.eye(dimension, dtype=np.float32), (shift.weight * v).astype(np.float32)
    else:
        weight, bias = np.eye(dimension, dtype=np.float32) - np.outer(v, v), np.zeros(dimension, np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"linear.weight": weight, "linear.bias": bias}, str(folder / SHIFT_WEIGHTS))
    config = {
        "in_features": dimension,
        "out_features": dimension,
        "bias": True,
        "activation_function": "torch.nn.modules.linear.Identity",
    }
    _write_json(folder / "config.json", config)


def _write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


# ---------------------------------------------------------------------------- stock-loader adjustments


def append_eos(directory: Path, tokenizer) -> tuple[bool, dict[str, Any] | None]:
    """Make the saved ``tokenizer.json`` append EOS (as the encoder does): (done, original post-processor).

    Not done, the file left as it was, when the result would not tokenize a text exactly as
    :func:`magnetsdk.encoding.prepare` does (``prefix + text + [EOS]``).
    """
    from tokenizers import Tokenizer

    from magnetsdk.encoding import special_prefix

    path = directory / "tokenizer.json"
    if not path.is_file():
        return False, None
    data = json.loads(path.read_text(encoding="utf-8"))
    original = data.get("post_processor")
    eos = tokenizer.eos_token
    append = {"SpecialToken": {"id": eos, "type_id": 0}}
    special = {eos: {"id": eos, "ids": [tokenizer.eos_token_id], "tokens": [eos]}}
    if original is not None and original.get("type") == "TemplateProcessing":
        changed = json.loads(json.dumps(original))
        changed["single"] = [*changed["single"], append]
        changed["pair"] = [*changed["pair"], {"SpecialToken": {"id": eos, "type_id": 1}}]
        changed["special_tokens"] = {**changed.get("special_tokens", {}), **special}
    else:
        template = {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}, append],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}, append],
            "special_tokens": special,
        }
        changed = template if original is None else {"type": "Sequence", "processors": [original, template]}
    data["post_processor"] = changed
    saved = Tokenizer.from_str(json.dumps(data))
    probe = "The cat sat."
    expected = special_prefix(tokenizer) + tokenizer(probe, add_special_tokens=False)["input_ids"]
    if saved.encode(probe).ids != [*expected, tokenizer.eos_token_id]:
        return False, None
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    return True, original


def restore_post_processor(tokenizer, original: dict[str, Any] | None) -> None:
    """Give a tokenizer loaded from a stock directory back the post-processor magnetsdk saved it with."""
    from tokenizers import Tokenizer

    backend = tokenizer.backend_tokenizer
    data = json.loads(backend.to_str())
    data["post_processor"] = original
    backend.post_processor = Tokenizer.from_str(json.dumps(data)).post_processor


def mark_bidirectional(directory: Path) -> None:
    """``"is_causal": false`` in ``config.json``: transformers' (and vLLM's) own path is then bidirectional."""
    path = directory / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["is_causal"] = False
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def weights_sha256(directory: Path) -> str | None:
    """One hash over a directory's safetensors weight files (top level): a merged model's identity."""
    import hashlib

    files = sorted(p for p in directory.glob("*.safetensors") if p.name != "principal_component.safetensors")
    if not files:
        return None
    return hashlib.sha256("|".join(f"{p.name}:{file_sha256(p)}" for p in files).encode()).hexdigest()


# ---------------------------------------------------------------------------- Magnet.save


def save_magnet(
    magnet: Any,
    directory: str | os.PathLike,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
) -> Path:
    """Write a loaded :class:`magnetsdk.Magnet` as a whole model directory (see the module docstring)."""
    if magnet.config.mixture:
        raise ValueError(
            "a UBMoE expert mixture cannot be saved as merged weights (its two FFN experts and gates "
            "do not merge into one model); keep the directory `magnet ubmoe` wrote, which "
            "Magnet.from_pretrained loads"
        )
    _checked_prompts(prompts, default_prompt_name)  # fail before any file is written

    def stage(tmp: Path) -> Manifest:
        magnet.model.save_pretrained(tmp, safe_serialization=True)
        magnet.tokenizer.save_pretrained(tmp)
        magnet.config.save(tmp)
        if magnet.principal_shift is not None:
            magnet.principal_shift.save(tmp)
        manifest = Manifest(kind="model", weights_sha256=weights_sha256(tmp))
        obstacle = stock_obstacle(magnet.config, magnet.tokenizer)
        if obstacle is None:
            appended, original = append_eos(tmp, magnet.tokenizer)
            if not appended:
                obstacle = "the tokenizer's post-processor could not be made to append EOS exactly"
        if obstacle is None:
            manifest.tokenizer_appends_eos, manifest.tokenizer_post_processor = True, original
            if magnet.config.encode_attention is AttentionMode.BIDIRECTIONAL:
                mark_bidirectional(tmp)
            write_stock_files(
                tmp, magnet.config, magnet.dimension, magnet.principal_shift, prompts, default_prompt_name
            )
            manifest.sentence_transformers = STOCK
            manifest.sentence_transformers_reason = "every encode setting is a stock module"
        else:
            write_custom_files(tmp, prompts, default_prompt_name)
            manifest.sentence_transformers, manifest.sentence_transformers_reason = CUSTOM, obstacle
        return manifest

    return write_model_directory(directory, stage, whole=True)


def add_custom_sentence_transformers_files(
    directory: str | os.PathLike, prompts: dict[str, str] | None = None, default_prompt_name: str | None = None
) -> Path:
    """Make a magnetsdk adapter or mixture directory loadable by ``SentenceTransformer`` (``MagnetModule``)."""
    directory = Path(directory)
    if not (directory / CONFIG_NAME).is_file():
        raise FileNotFoundError(
            f"{directory} has no {CONFIG_NAME}; write the model first (Magnet.save or training's export)"
        )
    previous = read_manifest(directory)

    def stage(tmp: Path) -> Manifest:
        write_custom_files(tmp, prompts, default_prompt_name)
        manifest = previous or Manifest(kind="adapter")
        manifest.sentence_transformers = CUSTOM
        manifest.sentence_transformers_reason = "an adapter or expert mixture is merged by magnetsdk at load"
        return manifest

    return write_model_directory(directory, stage, whole=False, extend=True)
