"""``manifest.json``: what an index directory was built with, fixed when the index is created.

One writer (:meth:`Manifest.save`), one reader (:meth:`Manifest.load`) and one upgrade path
(:func:`_upgrade`). The manifest names the model identity (so vectors from another model are
never mixed in), the instructions used for documents and queries, the requested index type and
the chunking. Which FAISS file matches the documents is *not* here: the SQLite store records it in
the same transaction that commits the documents (see :mod:`magnetsdk.index.index`).
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from magnetsdk.config import atomic_write_text
from magnetsdk.index.chunking import ChunkSettings, check_fits_encoder
from magnetsdk.index.errors import IndexCorruptedError, IndexMismatchError, IndexNotFoundError
from magnetsdk.index.types import INDEX_TYPE_NAMES, IndexType, parse_type

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1

# Identity fields that must match for vectors to be comparable. The adapter's path is left out on
# purpose: moving an adapter directory does not change the model, its SHA-256 does.
# Everything that changes vectors. "echo" and "weights_sha256" are recorded only when set (ModelIdentity.to_dict),
# so indexes built before they existed still open with the same model.
IDENTITY_KEYS = (
    "model", "adapter_sha256", "dimension", "encode_attention", "pooling", "instruction",
    "principal_shift", "echo", "weights_sha256",
)  # fmt: skip


@dataclass
class Manifest:
    identity: dict[str, Any]
    document_instruction: str
    query_instruction: str
    index_type: str
    chunk_tokens: int
    chunk_overlap: int
    vector_settings: dict[str, Any] = field(default_factory=dict)  # VectorSettings fields
    # Vectors are L2-normalised before they are stored or searched, so scores are cosine similarities.
    normalized: bool = True
    format_version: int = FORMAT_VERSION

    @property
    def dimension(self) -> int:
        return int(self.identity["dimension"])

    def save(self, directory: Path) -> None:
        atomic_write_text(
            directory / MANIFEST_NAME, json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"
        )

    @classmethod
    def load(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST_NAME
        if not path.is_file():
            what = "does not exist" if not directory.exists() else f"has no {MANIFEST_NAME}"
            raise IndexNotFoundError(
                f"no index at {directory}: the directory {what}; build one with "
                f"`magnet index PATH --out {directory}` or Index.create()"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise IndexCorruptedError(
                f"{path} is not valid JSON ({error}); restore it from a backup or rebuild the index"
            ) from None
        data = _upgrade(data, path)
        known = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        missing = sorted(required - set(data))
        if missing or not isinstance(data.get("identity"), dict):
            raise IndexCorruptedError(f"{path} lacks {missing or ['identity']}; rebuild the index")
        _check_types(data, path)
        return cls(**{k: v for k, v in data.items() if k in known})

    def check_identity(self, current: dict[str, Any], directory: Path) -> None:
        """Raise :class:`IndexMismatchError` listing every field where ``current`` differs."""
        differences = [
            f"{key}: index has {self.identity.get(key)!r}, model has {current.get(key)!r}"
            for key in IDENTITY_KEYS
            if self.identity.get(key) != current.get(key)
        ]
        if differences:
            raise IndexMismatchError(
                f"the index at {directory} was built with a different model; its vectors are not "
                "comparable with this model's. Differences: "
                + "; ".join(differences)
                + ". Open it with the model it was built with, or build a new index."
            )


# The JSON type each field must have; a hand-edited manifest with another one is refused by name.
_TYPES: dict[str, type | tuple[type, ...]] = {
    "document_instruction": str,
    "query_instruction": str,
    "index_type": str,
    "chunk_tokens": int,
    "chunk_overlap": int,
    "vector_settings": dict,
    "normalized": bool,
}


def _check_types(data: dict[str, Any], path: Path) -> None:
    wrong = [
        f"{key} is {type(data[key]).__name__} {data[key]!r}, expected {expected.__name__}"
        for key, expected in _TYPES.items()
        if key in data
        and (not isinstance(data[key], expected) or (expected is int and isinstance(data[key], bool)))
    ]
    identity = data["identity"]
    if not isinstance(identity.get("dimension"), int) or isinstance(identity.get("dimension"), bool):
        wrong.append(f"identity.dimension is {identity.get('dimension')!r}, expected an integer")
    if not isinstance(identity.get("model"), str):
        wrong.append(f"identity.model is {identity.get('model')!r}, expected a string")
    if isinstance(data.get("index_type"), str) and data["index_type"] not in INDEX_TYPE_NAMES:
        wrong.append(f"index_type {data['index_type']!r} is not one of {INDEX_TYPE_NAMES}")
    if wrong:
        raise IndexCorruptedError(
            f"{path} is not a valid manifest: " + "; ".join(wrong) + ". Restore it or rebuild the index"
        )


def new_manifest(
    encoder: Any,
    index_type: IndexType | str = IndexType.EXACT,
    chunk_tokens: int = 256,
    chunk_overlap: int = 32,
    document_instruction: str | None = None,
    query_instruction: str | None = None,
    vector_settings: dict[str, Any] | None = None,
) -> Manifest:
    """The manifest of a new index for ``encoder`` (see ``Index.create``); refuses chunks longer
    than the encoder reads (its ``max_length``, when it has one)."""
    identity = encoder.identity.to_dict()
    chunking = ChunkSettings(chunk_tokens, chunk_overlap)
    documents = identity["instruction"] if document_instruction is None else document_instruction
    check_fits_encoder(chunking, encoder.tokenizer, getattr(encoder, "max_length", None), documents)
    return Manifest(
        identity=identity,
        document_instruction=documents,
        query_instruction=identity["instruction"] if query_instruction is None else query_instruction,
        index_type=parse_type(index_type).value,
        chunk_tokens=chunking.max_tokens,
        chunk_overlap=chunk_overlap,
        vector_settings=dict(vector_settings or {}),
    )


def _upgrade(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Bring an older manifest up to :data:`FORMAT_VERSION` (version 1 is the first)."""
    version = data.get("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise IndexCorruptedError(
            f"{path} has format_version {version!r}; this magnetsdk reads up to {FORMAT_VERSION}: upgrade magnetsdk"
        )
    data["format_version"] = FORMAT_VERSION
    return data
