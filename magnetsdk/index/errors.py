"""What can go wrong with an index on disk, as exception types a caller (and the CLI) can catch."""

from __future__ import annotations


class IndexNotFoundError(FileNotFoundError):
    """The directory holds no index (no manifest)."""


class IndexMismatchError(ValueError):
    """The index was built with a different model than the one it is opened with."""


class IndexCorruptedError(ValueError):
    """A file of the index cannot be read; the message names the file and what to do."""


class IndexBusyError(RuntimeError):
    """Another process is writing to the index."""


class EmptyIndexError(LookupError):
    """A search ran before any document was indexed."""
