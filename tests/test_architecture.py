"""Import rules: ``import magnetsdk`` stays light, and the core never imports the outer layers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("faiss", "peft", "accelerate", "sentence_transformers", "matplotlib")
OUTER = ("magnetsdk.train", "magnetsdk.integrations", "magnetsdk.cli")
# Deliberate exceptions: the facade methods the public API promises on Magnet (save, to_sentence_transformer)
# import their integration lazily, inside the method, so importing the core still pulls in nothing outer.
ALLOWED = {("magnetsdk/magnet.py", "magnetsdk.integrations.sentence_transformers")}


def test_import_magnetsdk_is_light():
    code = (
        "import sys, magnetsdk; "
        f"print(','.join(m for m in {HEAVY!r} if any(k == m or k.startswith(m + '.') for k in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_core_never_imports_outer_layers():
    offenders = []
    for path in (ROOT / "magnetsdk").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            where = str(path.relative_to(ROOT))
            offenders += [f"{where}: {n}" for n in names if n.startswith(OUTER) and (where, n) not in ALLOWED]
            if (where, *names) in ALLOWED and node.col_offset == 0:
                offenders.append(
                    f"{where}: {names[0]} is imported at module level; import it inside the method"
                )
    assert offenders == []
