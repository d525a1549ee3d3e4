"""Turning library exceptions into messages a person at a shell can act on.

Library errors name Python arguments (``max_new_tokens=0``, ``left=... and right=...``); on the
command line the same advice must name flags, so :func:`fail` rewrites ``name=`` spellings into
the current command's own options (``--max-new-tokens 0``), plus per-command aliases for names
that differ (``gap_marker`` is ``--marker``).
"""

from __future__ import annotations

import re
import warnings

import click

_KEYWORD = re.compile(r"\b([a-z][a-z0-9_]*)=(\.\.\.|[^\s,;:)]+)")


def index_errors() -> tuple[type[BaseException], ...]:
    """What the index commands turn into messages: the index's own errors and bad input."""
    from magnetsdk.index import errors

    return (
        errors.IndexNotFoundError,
        errors.IndexMismatchError,
        errors.IndexCorruptedError,
        errors.IndexBusyError,
        errors.EmptyIndexError,
        FileExistsError,
        FileNotFoundError,
        ValueError,
        TypeError,
    )


def clean_message(message: str, aliases: dict[str, str] | None = None) -> str:
    """``message`` with Python keyword spellings replaced by the current command's flags."""
    message = message.strip().strip("'\"")
    flags = {name: (flag, None) for name, flag in (aliases or {}).items()}
    context = click.get_current_context(silent=True)
    if context is not None:
        for param in context.command.params:
            long = [o for o in param.opts if o.startswith("--")]
            if isinstance(param, click.Option) and param.name and long:
                negative = [o for o in param.secondary_opts if o.startswith("--")]
                flags.setdefault(param.name, (long[0], negative[0] if negative else None))

    def replace(match: re.Match) -> str:
        if match.group(1) not in flags:
            return match.group(0)
        flag, negative = flags[match.group(1)]
        if match.group(2) == "True":
            return flag
        if match.group(2) == "False":
            return negative or f"without {flag}"
        return f"{flag} {match.group(2)}"

    return _KEYWORD.sub(replace, message)


def fail(error: BaseException | str, aliases: dict[str, str] | None = None) -> click.ClickException:
    """A click error (exit status 1) whose message names flags, not Python arguments."""
    return click.ClickException(clean_message(str(error), aliases))


def print_warnings_as_messages() -> None:
    """Show library warnings as ``warning: ...`` lines on stderr, without Python's source lines."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ARG001
        click.echo(f"warning: {clean_message(str(message))}", err=True)

    warnings.showwarning = show
