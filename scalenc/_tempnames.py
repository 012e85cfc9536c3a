"""Temporary names for atomic writes, and clean-up of those a killed run left behind.

Every output (a Zarr store, a Parquet dataset, a model directory, a report) is written to
``<path>.tmp-<host>-<pid>-<random>`` and renamed to ``path`` when complete. A run that
fails removes its temporary; one that is killed (SIGKILL, a lost node) cannot. The next
write to the same path removes the temporaries whose writer was a process of this host
that no longer exists. Temporaries of other hosts (a shared file system) and of live
processes are left alone.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from pathlib import Path

__all__ = ["temporary_sibling", "remove_abandoned", "claim"]


def _host() -> str:
    return socket.gethostname().replace("-", "_") or "host"


def temporary_sibling(path) -> str:
    """``<path>.tmp-<host>-<pid>-<random>``: where to write before renaming to ``path``."""
    return f"{os.fspath(path)}.tmp-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_abandoned(path) -> list[str]:
    """Remove temporaries of ``path`` left by dead processes of this host; return them."""
    target = Path(os.fspath(path))
    if not target.parent.is_dir():
        return []
    removed = []
    prefix = f"{target.name}.tmp-{_host()}-"
    for entry in target.parent.iterdir():
        if not entry.name.startswith(prefix):
            continue
        pid = entry.name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(str(entry))
    return removed


def claim(path) -> str:
    """Prepare an atomic write of ``path``: create its parent directory, remove what killed
    runs left behind, and return a fresh temporary sibling to write into."""
    Path(os.fspath(path)).parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(path)
    return temporary_sibling(path)
