"""One writer per index: an OS file lock (``flock``) on ``write.lock``, held for the writer's lifetime.

The first change an :class:`~magnetsdk.index.Index` makes takes the lock; :meth:`WriterLock.release`
(called by ``Index.close``) lets it go, and so does the operating system when the process dies,
so a killed writer never leaves a stale lock behind. ``flock`` locks belong to an open file, so
two ``Index`` objects in one process exclude each other just like two processes do. Readers
never take the lock: SQLite's WAL mode lets them read the last committed state meanwhile.

The lock file holds the writer's process id, for the message a waiting writer prints. This
module knows nothing about the index's contents.
"""

from __future__ import annotations

import fcntl
import os
import time
import warnings
from pathlib import Path

from magnetsdk.index.errors import IndexBusyError

LOCK_NAME = "write.lock"


class WriterLock:
    """The exclusive write lock of one index directory (not held until :meth:`acquire`)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, timeout_s: float) -> None:
        """Take the lock, waiting up to ``timeout_s`` seconds (with a warning saying who holds it);
        raise :class:`IndexBusyError` if it is still held then."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + timeout_s
            warned = False
            while not _try_lock(fd):
                if time.monotonic() >= deadline:
                    raise IndexBusyError(
                        f"another writer ({_holder(fd)}) is writing to {self.path.parent}; wait for it "
                        "to finish and retry (an index has one writer at a time; searches keep working)"
                    )
                if not warned:
                    warnings.warn(
                        f"waiting up to {timeout_s:g}s for another writer ({_holder(fd)}) of "
                        f"{self.path.parent} to finish",
                        stacklevel=3,
                    )
                    warned = True
                time.sleep(0.05)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(fd: int) -> str:
    pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
    if not pid.isdigit():
        return "a process"
    return "this process" if int(pid) == os.getpid() else f"process {pid}"
