"""The files of a checkpoint: each written whole (a temporary sibling renamed, or one
object-store put), with a header of its content's length and SHA-256, and read back only
through an unpickler that builds NumPy arrays, plain containers and scalenc's classes.
A file that fails any check is :class:`DamagedFile` and never merged
(:mod:`scalenc.engine.checkpoint`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import uuid

import numpy as np

__all__ = ["DamagedFile", "encode", "decode", "verify", "is_local", "write_file"]

_MAGIC = b"scalenc-checkpoint 1\n"


def encode(value) -> bytes:
    payload = pickle.dumps(value, protocol=5)
    header = {"sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload)}
    return _MAGIC + json.dumps(header).encode() + b"\n" + payload


class DamagedFile(Exception):
    """A checkpoint file that cannot be trusted; the message says why."""


def _read_header(fh) -> dict:
    magic = fh.read(len(_MAGIC))
    if magic != _MAGIC:
        raise DamagedFile("it does not start as a scalenc checkpoint file")
    line = b""
    while len(line) < 4096 and not line.endswith(b"\n"):  # fsspec files: no readline(size)
        char = fh.read(1)
        if not char:
            break
        line += char
    try:
        header = json.loads(line)
        return {"sha256": str(header["sha256"]), "bytes": int(header["bytes"])}
    except (ValueError, KeyError, TypeError):
        raise DamagedFile("its header is unreadable") from None


def verify(fs, path: str) -> None:
    """Check a file's checksum, streaming (nothing of the size of its content is held)."""
    with fs.open(path, "rb") as fh:
        header = _read_header(fh)
        digest = hashlib.sha256()
        size = 0
        while chunk := fh.read(1 << 24):
            digest.update(chunk)
            size += len(chunk)
    if size != header["bytes"]:
        raise DamagedFile(
            f"it holds {size} bytes of content where its header says {header['bytes']}"
        )
    if digest.hexdigest() != header["sha256"]:
        raise DamagedFile("its content does not match its checksum")


def decode(data: bytes):
    buffer = io.BytesIO(data)
    header = _read_header(buffer)
    payload = buffer.read()
    if len(payload) != header["bytes"] or hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise DamagedFile("its content does not match its checksum")
    try:
        return _RestrictedUnpickler(io.BytesIO(payload)).load()
    except DamagedFile:
        raise
    except Exception as exc:
        raise DamagedFile(f"its content cannot be read ({type(exc).__name__}: {exc})") from None


_ALLOWED_GLOBALS = {
    ("builtins", name) for name in ("set", "frozenset", "complex", "slice", "range", "bytearray")
} | {
    ("collections", "OrderedDict"),
    ("collections", "Counter"),
    ("copyreg", "_reconstructor"),
    ("builtins", "object"),
}
_NUMPY_GLOBALS = {"_reconstruct", "scalar", "_frombuffer", "ndarray", "dtype"}


class _RestrictedUnpickler(pickle.Unpickler):
    """Builds NumPy arrays and scalars, plain containers and scalenc's classes; refuses
    any other global (a function to call, a class from elsewhere)."""

    def find_class(self, module, name):
        allowed = (
            (module, name) in _ALLOWED_GLOBALS
            or (module.split(".")[0] == "numpy" and (name in _NUMPY_GLOBALS or "dtypes" in module))
            or module == "scalenc"
            or module.startswith("scalenc.")
        )
        if allowed:
            found = super().find_class(module, name)
            if module.startswith("scalenc") and not isinstance(found, type):
                raise DamagedFile(f"it names {module}.{name}, which is not a class")
            return found
        raise DamagedFile(f"it names {module}.{name}, which a checkpoint never holds")


def is_local(fs) -> bool:
    protocols = np.atleast_1d(fs.protocol)
    return any(p in ("file", "local", "memory") for p in protocols)


def write_file(fs, path: str, data: bytes) -> None:
    """``data`` at ``path`` all at once: a temporary sibling renamed (one ``put`` on an
    object store, which publishes it whole)."""
    if not is_local(fs):
        fs.pipe_file(path, data)
        return
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with fs.open(tmp, "wb") as fh:
            fh.write(data)
            if hasattr(fh, "flush"):
                fh.flush()
            with contextlib.suppress(AttributeError, OSError, io.UnsupportedOperation):
                os.fsync(fh.fileno())
        fs.mv(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            if fs.exists(tmp):
                fs.rm(tmp)
