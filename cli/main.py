"""The ``magnet`` command group. Each concept's commands live in their own module and are
registered here; commands parse options, call one library function and print the result."""

from __future__ import annotations

import click
from magnetsdk.cli import ask, index, runtime, train, ubmoe
from magnetsdk.cli.errors import print_warnings_as_messages
from magnetsdk.cli.eval import eval_group

from magnetsdk import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="magnet")
def cli() -> None:
    """magnetsdk: one decoder LLM that embeds, infills and generates."""


for command in runtime.COMMANDS + index.COMMANDS + ask.COMMANDS + train.COMMANDS + ubmoe.COMMANDS:
    cli.add_command(command)
cli.add_command(eval_group)


def main() -> None:
    print_warnings_as_messages()
    cli()


if __name__ == "__main__":  # `python -m magnetsdk.cli.main`, e.g. under accelerate launch
    main()
