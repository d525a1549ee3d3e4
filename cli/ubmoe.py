"""``magnet ubmoe``: UBMoE stage 2, the gates of a uni/bidirectional FFN expert mixture.

Stage 1 is ``magnet train --recipe ubmoe-ffn --output-dir BI``; then::

    magnet ubmoe --bi-model BI --data text.txt --output-dir OUT --max-steps 100

writes a mixture directory that every ``--model`` option (and ``Magnet.from_pretrained``) loads.
"""

from __future__ import annotations

from pathlib import Path

import click
from magnetsdk.cli.errors import fail
from magnetsdk.cli.output import emit, format_option, print_fields


@click.command("ubmoe")
@click.option(
    "--bi-model",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The stage-1 directory (magnet train --recipe ubmoe-ffn).",
)
@click.option("--data", multiple=True, required=True, help="Plain text file(s) to train the gates on.")
@click.option("--output-dir", default="runs/ubmoe", show_default=True)
@click.option("--text-field", default="text", show_default=True, help="Column of .jsonl/.csv text files.")
@click.option("--max-steps", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--max-length", type=click.IntRange(min=8), default=128, show_default=True)
@click.option("--learning-rate", type=float, default=1e-3, show_default=True)
@click.option("--warmup-steps", type=click.IntRange(min=0), default=10, show_default=True)
@click.option(
    "--schedule", type=click.Choice(["linear", "cosine", "constant"]), default="cosine", show_default=True
)
@click.option(
    "--balance-weight", type=float, default=0.01, show_default=True, help="Weight of the load-balance loss."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--threads", type=click.IntRange(min=1), default=None, help="torch threads (1 on a shared CPU)."
)
@click.option("--device", default="auto", show_default=True)
@click.option("--save-every", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--resume", is_flag=True, help="Continue from the latest checkpoint in --output-dir.")
@format_option("jsonl")
def ubmoe_command(bi_model: Path, data: tuple[str, ...], resume: bool, fmt: str, **settings) -> None:
    """Train the per-layer gates between the original and the stage-1 (bidirectional) FFNs."""
    from magnetsdk.train.ubmoe import UBMoEConfig, train_gates

    try:
        config = UBMoEConfig(bi_model=str(bi_model), data=list(data), **settings)
        result = train_gates(config, resume=resume)
    except (ValueError, FileNotFoundError, FileExistsError, FloatingPointError) as error:
        raise fail(error) from None
    from magnetsdk.integrations.sentence_transformers import write_sentence_transformers_files

    write_sentence_transformers_files(result.output_dir)
    summary = {
        "output_dir": str(result.output_dir),
        "steps": result.steps,
        "first_losses": result.first_losses,
        "losses": result.losses,
        "bidirectional_share": round(sum(result.bidirectional_share) / len(result.bidirectional_share), 4),
        "wall_s": round(result.wall_s, 1),
    }
    emit(summary, fmt, lambda: print_fields(summary))


COMMANDS = [ubmoe_command]
