"""Names of the temporaries and backups of atomic writes, and repair of those a killed run
left behind.

The writer (:mod:`scalenc.io.atomic`) writes every output to
``<path>.tmp-<host>-<pid>-<random>`` and, where it cannot swap two names in one step,
moves the old result aside to ``<path>.old-<host>-<pid>-<random>`` for the instant of the
swap. A run that fails removes its temporary; one that is killed (SIGKILL, a lost node)
cannot. The next write to the same path repairs what writers of this host that no longer
exist left: their temporaries are removed, and their backups are restored to ``path``
when ``path`` is missing (killed between the two renames of the swap) or removed
otherwise. Names of other hosts (a shared file system) and of live processes are left
alone.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from pathlib import Path

__all__ = [
    "temporary_sibling",
    "backup_sibling",
    "repair_abandoned",
    "claim",
    "remove",
]


TEMPORARY = "tmp"
BACKUP = "old"


def _host() -> str:
    return socket.gethostname().replace("-", "_") or "host"


def _sibling(path, kind: str) -> str:
    return f"{os.fspath(path)}.{kind}-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def temporary_sibling(path) -> str:
    """``<path>.tmp-<host>-<pid>-<random>``: where to write before publishing ``path``."""
    return _sibling(path, TEMPORARY)


def backup_sibling(path) -> str:
    """``<path>.old-<host>-<pid>-<random>``: where the old result waits during a swap."""
    return _sibling(path, BACKUP)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove(path) -> None:
    """Remove a file or a directory tree, if it exists."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


def _abandoned(target: Path, kind: str) -> list[Path]:
    """Siblings ``<target>.<kind>-<host>-<pid>-…`` whose writer, a process of this host, is dead."""
    prefix = f"{target.name}.{kind}-{_host()}-"
    found = []
    for entry in target.parent.iterdir():
        if not entry.name.startswith(prefix):
            continue
        pid = entry.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            found.append(entry)
    return found


def repair_abandoned(path) -> list[str]:
    """Repair what dead writers of this host left beside ``path``; return the names handled.

    A backup is renamed back to ``path`` if ``path`` is missing, and removed otherwise;
    a temporary is removed.
    """
    target = Path(os.fspath(path))
    if not target.parent.is_dir():
        return []
    handled = []
    for backup in _abandoned(target, BACKUP):
        if not os.path.lexists(target):
            try:
                os.rename(backup, target)
            except OSError:  # another writer published meanwhile: the backup is stale
                remove(backup)
        else:
            remove(backup)
        handled.append(str(backup))
    for temporary in _abandoned(target, TEMPORARY):
        remove(temporary)
        handled.append(str(temporary))
    return handled


def claim(path) -> str:
    """Prepare an atomic write of ``path``: create its parent directory, repair what killed
    runs left behind, and return a fresh temporary sibling to write into."""
    Path(os.fspath(path)).parent.mkdir(parents=True, exist_ok=True)
    repair_abandoned(path)
    return temporary_sibling(path)
