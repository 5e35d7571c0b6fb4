"""Files written whole or not at all: the one way this package writes a file that a crash, a kill
or a full disk must not leave half-written (checkpoints, training states, artifacts, data caches,
suite records)."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

__all__ = ["atomic_write", "not_a_folder"]

# What a full, read-only or closed disk raises when a file is written: a cache may do without it.
UNWRITABLE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


@contextmanager
def atomic_write(path: Path | str, text: bool = False) -> Iterator[IO]:
    """A file to write ``path`` through: a temporary file beside it (``.tmp-*``), flushed to
    disk and renamed over ``path`` when the block ends, removed when it raises. A reader sees the
    previous file or the new one, never a part. The file gets the mode ``open()`` would give it
    (0644 under the usual umask: workers of other users read checkpoints), not a temporary
    file's 0600. ``text``: a UTF-8 text file, else binary."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w" if text else "wb", encoding="utf-8" if text else None) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def not_a_folder(path: Path | str) -> Path | None:
    """The first of ``path`` and its parents that exists and is not a folder (a file named as a
    folder, or a file on its way), or None: a folder there can be made."""
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def _umask() -> int:
    """The process's umask (read by setting it, so set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
