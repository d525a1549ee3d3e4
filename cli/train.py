"""``magnet train``: MAGNET adaptation from a config file and/or flags.

Every field of :class:`magnetsdk.train.config.TrainConfig` is a flag (``max_steps`` ->
``--max-steps``; list fields repeat: ``--data a.txt --data b.txt``); flags override the
``--config`` file, which overrides the recipe. Multi-process runs go through accelerate::

    accelerate launch --num_processes 2 --cpu -m magnetsdk.cli.main train --config run.toml
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import MISSING, fields
from enum import Enum
from pathlib import Path
from typing import Any

import click
from magnetsdk.cli.errors import fail
from magnetsdk.cli.output import emit, format_option, print_fields


def _config_options(command: Callable) -> Callable:
    """One option per TrainConfig field, typed from its annotation; unset options stay None."""
    from magnetsdk.train.config import TrainConfig
    from magnetsdk.train.recipes import RECIPES

    from_recipe = set(RECIPES["magnet"])
    hints = typing.get_type_hints(TrainConfig)
    for item in reversed(fields(TrainConfig)):
        hint = hints[item.name]
        members = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        flag = "--" + item.name.replace("_", "-")
        default = item.default if item.default is not MISSING else None
        if default is not None:
            help_text = f"[default: {default}]"
        elif item.name in from_recipe:
            help_text = "[default: from the recipe]"
        else:
            help_text = "[default: chosen at run time, see docs/training.md]"
        if item.default_factory is not MISSING:  # type: ignore[misc]
            help_text = "Repeat for several values."
        base = members[0]
        if any(typing.get_origin(m) is list for m in members):
            option = click.option(flag, item.name, multiple=True, default=None, help=help_text)
        elif base is bool:
            negative = "--no-" + item.name.replace("_", "-")
            option = click.option(f"{flag}/{negative}", item.name, default=None, help=help_text)
        elif item.name == "recipe":
            option = click.option(
                flag, item.name, type=click.Choice(sorted(RECIPES)), default=None, help=help_text
            )
        elif isinstance(base, type) and issubclass(base, Enum):
            choices = click.Choice([m.value for m in base])
            option = click.option(flag, item.name, type=choices, default=None, help=help_text)
        else:
            option = click.option(flag, item.name, type=base, default=None, help=help_text)
        command = option(command)
    return command


@click.command("train")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A TOML (or YAML) file of TrainConfig settings.",
)
@click.option("--resume", is_flag=True, help="Continue from the latest checkpoint in --output-dir.")
@format_option("jsonl")
@_config_options
def train_command(config_file: Path | None, resume: bool, fmt: str, **overrides: Any) -> None:
    """Adapt a decoder with MAGNET (or another recipe) and write the adapted model to --output-dir."""
    from magnetsdk.train.config import TrainConfig
    from magnetsdk.train.trainer import NonFiniteLossError, train

    given = {k: (list(v) if isinstance(v, tuple) else v) for k, v in overrides.items()}
    given = {k: v for k, v in given.items() if v not in (None, [])}
    if given.get("lora_target_modules") == ["all-linear"]:
        given["lora_target_modules"] = "all-linear"
    try:
        config = TrainConfig.load(config_file, given)
        _check_utf8(config.data)
        result = train(config, resume=resume)
    except (ValueError, FileNotFoundError, FileExistsError, NonFiniteLossError) as error:
        raise fail(error) from None
    if not result.main_process:
        return
    # The adapted directory is also a sentence-transformers model (MagnetModule in modules.json);
    # without these files sentence-transformers would load the adapter as a plain causal model.
    from magnetsdk.integrations.sentence_transformers import write_sentence_transformers_files

    write_sentence_transformers_files(result.output_dir)
    summary = {
        "output_dir": str(result.output_dir),
        "steps": result.steps,
        "losses": result.losses,
        "tokens_per_s": round(result.tokens_per_s, 1),
        "wall_s": round(result.wall_s, 1),
    }
    emit(summary, fmt, lambda: print_fields(summary))


def _check_utf8(paths: list[str]) -> None:
    """Name a training file that is not UTF-8 text before the model loads."""
    for name in paths:
        path = Path(name)
        if not path.is_file():
            continue  # the trainer reports missing files
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise click.ClickException(
                        f"{path} is not UTF-8 text (line {number}, byte {error.start}); convert it to "
                        "UTF-8 first, e.g. `iconv -f latin1 -t utf-8`"
                    ) from None


COMMANDS = [train_command]
