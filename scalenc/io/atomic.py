"""The one atomic writer of scalenc's outputs: Zarr and Parquet directories, model
directories, reports and JSON summaries.

A result is written into a temporary sibling ``<path>.tmp-<host>-<pid>-<random>``
(:mod:`scalenc.io.tempnames`) and then published at ``path``, so that at every instant
``path`` holds either its complete old content or the complete new result:

* ``path`` absent: ``rename(tmp, path)`` (without ``overwrite``, one that refuses to
  replace a ``path`` created meanwhile, where the system offers it).
* ``path`` present, with ``overwrite``: on Linux, ``renameat2(RENAME_EXCHANGE)`` swaps the
  two names in one system call; ``tmp`` then holds the old result, which is deleted.
* where there is no exchange (another OS, a file system without it): ``path`` is renamed to
  a backup ``<path>.old-<host>-<pid>-<random>``, ``tmp`` to ``path``, and the backup is
  deleted. SIGINT and SIGTERM are deferred during the two renames (in the main thread);
  a SIGKILL between them leaves ``path`` missing beside its backup, which the next write
  of ``path`` restores (:func:`scalenc.io.tempnames.repair_abandoned`).

The temporary directory is fsynced before the rename and the parent directory after it;
files a caller writes itself are its to fsync (:func:`write_text` does). On any failure,
including ``KeyboardInterrupt`` and ``SystemExit``, the temporary is removed. Nothing here
installs a signal handler outside the two renames of the fallback.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

import fsspec
import numpy as np

from scalenc.exceptions import IncompleteOutputError, OutputExistsError
from scalenc.io.tempnames import backup_sibling, claim, remove, temporary_sibling

__all__ = [
    "atomic_path",
    "atomic_prefix",
    "check_complete",
    "IncompleteOutputError",
    "publish",
    "published",
    "write_text",
    "remove",
    "fsync_directory",
]


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
#: renameat2's errors meaning "not on this kernel or file system": use the fallback.
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV}

#: Test hook (tests/io/test_atomic_writes_under_signals.py): called with ``path`` at the
#: swap's most exposed instant: just before the exchange, between the fallback's two
#: renames, or after an object store's completion marker is written
#: (:func:`atomic_prefix`). Never set outside tests.
_swap_hook: Callable[[str], None] | None = None


def _exists_message(path: str) -> str:
    return f"{path} exists; pass overwrite=True (--overwrite) to replace it."


@contextlib.contextmanager
def atomic_path(
    path, *, overwrite: bool = False, discard: Callable[[str], None] = remove
) -> Iterator[str]:
    """Yield a temporary sibling of ``path`` to write (a file or a directory) and publish it
    at ``path`` when the block ends without an error.

    An existing ``path`` raises ``FileExistsError`` first unless ``overwrite``. On any
    exception the temporary is removed with ``discard`` (data outputs pass one that
    outlasts in-flight Dask writes) and the exception propagates.
    """
    spath = os.fspath(path)
    tmp = claim(spath)  # first: it may restore a backup a killed swap left
    if os.path.lexists(spath) and not overwrite:
        raise OutputExistsError(_exists_message(spath))
    try:
        yield tmp
        publish(tmp, spath, overwrite=overwrite)
    except BaseException:
        discard(tmp)
        raise


def write_text(path, text: str, *, overwrite: bool = False, storage_options=None) -> str:
    """Write ``text`` (UTF-8) to ``path`` atomically, fsynced; return the path.

    A URL of a file system without atomic renames (``s3://``) is written as one object
    (one PUT: a reader sees the old object or the new one, never a part).
    """
    text_path = os.fspath(path)
    if "://" in text_path:
        fs, fs_path = fsspec.core.url_to_fs(text_path, **(storage_options or {}))
        if "file" not in np.atleast_1d(fs.protocol):
            if fs.exists(fs_path) and not overwrite:
                raise OutputExistsError(_exists_message(text_path))
            fs.pipe_file(fs_path, text.encode("utf-8"))
            return text_path
        path = fs_path
    with atomic_path(path, overwrite=overwrite) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    return os.fspath(path)


def publish(tmp: str, path: str, *, overwrite: bool) -> None:
    """Move the complete result ``tmp`` to ``path`` in one atomic step (see the module)."""
    fsync_directory(tmp)
    if not os.path.lexists(path):
        _rename_new(tmp, path, overwrite)
    elif not overwrite:
        raise OutputExistsError(_exists_message(path))
    else:
        if _swap_hook is not None and _renameat2() is not None:
            _swap_hook(path)
        if _rename2(tmp, path, _RENAME_EXCHANGE):
            _PUBLISHED.add(_where(path))
            remove(tmp)  # now the old result
        else:
            _swap_with_backup(tmp, path)
    _PUBLISHED.add(_where(path))
    fsync_directory(os.path.dirname(os.path.abspath(path)))


#: Where this process has published a complete result (:func:`published`).
_PUBLISHED: set[str] = set()


def _where(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


def published(path) -> bool:
    """Whether this process has published a complete result at ``path`` (a local path or a
    URL): what an interruption after the swap, while the old result is deleted, leaves
    there.

    Examples
    --------
    >>> import os, tempfile
    >>> from scalenc.io.atomic import published, write_text
    >>> path = os.path.join(tempfile.mkdtemp(), "note.txt")
    >>> published(path)
    False
    >>> _ = write_text(path, "done")
    >>> published(path)
    True
    """
    return _where(os.fspath(path).rstrip("/")) in _PUBLISHED


def _rename_new(tmp: str, path: str, overwrite: bool) -> None:
    if overwrite:
        os.rename(tmp, path)
        return
    try:
        done = _rename2(tmp, path, _RENAME_NOREPLACE)
    except FileExistsError:
        raise OutputExistsError(_exists_message(path)) from None
    if not done:
        if os.path.lexists(path):
            raise OutputExistsError(_exists_message(path))
        os.rename(tmp, path)


def _swap_with_backup(tmp: str, path: str) -> None:
    """Two renames with SIGINT/SIGTERM deferred between them; then delete the backup."""
    backup = backup_sibling(path)
    swapped = False
    try:
        with _signals_deferred():
            os.rename(path, backup)
            try:
                if _swap_hook is not None:
                    _swap_hook(path)
                os.rename(tmp, path)
            except BaseException:
                os.rename(backup, path)
                raise
            swapped = True
            _PUBLISHED.add(_where(path))
    finally:  # also when a deferred signal is delivered on leaving the block
        if swapped:
            remove(backup)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Record SIGINT and SIGTERM instead of acting on them, and deliver them on exit.

    Only the main thread can set handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda signum, frame: received.append(signum))
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)


@functools.cache
def _renameat2():
    """glibc's ``renameat2``, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


def _rename2(src: str, dst: str, flags: int) -> bool:
    """``renameat2(src, dst, flags)``; False when the system or file system cannot do it."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), src, None, dst)


def fsync_directory(path: str) -> None:
    """fsync a directory's entries (a no-op for a file or where directories cannot be opened)."""
    if not os.path.isdir(path):
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory descriptors
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- object stores and other fsspec file systems without an atomic rename -------------------

#: Written first and deleted last when a result is published on a file system without an
#: atomic rename: while it exists, the prefix is not a result (:func:`check_complete`).
INCOMPLETE = ".scalenc-incomplete"


@contextlib.contextmanager
def atomic_prefix(
    fs, path: str, *, overwrite: bool = False, url: str | None = None
) -> Iterator[str]:
    """:func:`atomic_path` for an fsspec file system without atomic renames (``s3://``,
    ``memory://``, …): yield a temporary prefix (as a URL) to write, and publish it at
    ``path`` when the block ends without an error.

    Publishing writes the marker :data:`INCOMPLETE` under ``path`` first, replaces the old
    objects by copies of the new ones, and deletes the marker last. A reader
    (:func:`check_complete`, which :func:`scalenc.load` calls) refuses a prefix holding the
    marker, so an interrupted publish is never taken for a result; but unlike a local
    disk, the old result is gone from the moment publishing starts. On any exception the
    temporary prefix is removed.
    """
    path = path.rstrip("/")
    if fs.exists(path) and not overwrite:
        raise OutputExistsError(_exists_message(url or fs.unstrip_protocol(path)))
    tmp = temporary_sibling(path)
    try:
        yield fs.unstrip_protocol(tmp)
        _publish_prefix(fs, tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(tmp, recursive=True)
        raise


def _publish_prefix(fs, tmp: str, path: str) -> None:
    marker = f"{path}/{INCOMPLETE}"
    fs.pipe(marker, b"scalenc is writing this result; it is not complete.\n")
    if _swap_hook is not None:  # tests: the publish's most exposed instant
        _swap_hook(path)
    old = [name for name in fs.find(path) if name != marker]
    if old:
        fs.rm(old)
    for name in fs.find(tmp):
        fs.copy(name, path + name[len(tmp) :])
    fs.rm(marker)
    _PUBLISHED.add(fs.unstrip_protocol(path))
    fs.rm(tmp, recursive=True)


def check_complete(fs, path: str) -> None:
    """Refuse a prefix whose publishing did not finish (it holds :data:`INCOMPLETE`)."""
    if fs.exists(f"{path.rstrip('/')}/{INCOMPLETE}"):
        raise IncompleteOutputError(
            f"{fs.unstrip_protocol(path)} is an incomplete result: its writer stopped while "
            "publishing it (it holds the marker "
            f"{INCOMPLETE}). Write it again; nothing in it can be trusted."
        )
