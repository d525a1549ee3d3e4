"""Reading a list of texts for a task: one per line, or one field of each jsonl object."""

from __future__ import annotations

import json
from pathlib import Path


def read_texts(path: str | Path, field: str) -> list[str]:
    """Non-blank lines of a text file (stripped), or the ``field`` string of each line of ``.jsonl``."""
    source = Path(path)
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise FileNotFoundError(f"cannot read {source}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{source} is not UTF-8 text (byte {error.start}); convert it to UTF-8") from None
    if source.suffix != ".jsonl":
        return [line.strip() for line in lines if line.strip()]
    texts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{source}:{number}: not valid JSON ({error.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
            raise ValueError(f'{source}:{number}: expected an object with a "{field}" string')
        texts.append(record[field].strip())
    return texts
