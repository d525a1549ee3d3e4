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
- adds the sentence-transformers files (:mod:`magnetsdk.st_layout`): the ``stock`` layout that
  ``SentenceTransformer(dir)`` and vLLM load without trusted code whenever the encode settings are
  stock modules, else the ``magnetsdk`` layout (``MagnetModule``, ``trust_remote_code=True``).
  The manifest's ``sentence_transformers`` and ``sentence_transformers_reason`` say which, and why.

:mod:`magnetsdk.loading` reads the manifest back: the weights hash (the model's identity) and, for a
stock directory, the tokenizer post-processor magnetsdk itself uses.
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

from magnetsdk.config import CONFIG_NAME
from magnetsdk.files import atomic_write_text, current_umask, file_sha256
from magnetsdk.modes import AttentionMode
from magnetsdk.st_layout import (
    CUSTOM,
    MAGNET_MODULE,
    STOCK,
    append_eos,
    checked_prompts,
    mark_bidirectional,
    stock_obstacle,
    write_custom_files,
    write_stock_files,
)

MANIFEST_NAME = "magnet_files.json"
MANIFEST_VERSION = 1
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
    checked_prompts(prompts, default_prompt_name)  # fail before any file is written

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
    directory: str | os.PathLike,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
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
