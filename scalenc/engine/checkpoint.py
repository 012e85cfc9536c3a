"""Checkpoints of a fit's passes: what a killed fit computed is read back, not redone.

Every pass is a tree reduction of small partials (:func:`scalenc.engine.reduce.reduce_rows`),
so one mechanism serves every pass of every estimator. While a fit runs inside
:func:`checkpointing`, each pass writes, to the checkpoint location (a local path or an
fsspec URL: a shared file system or an object store that every worker can reach):

* the partial of a row block or the merged partial of a completed *group* of blocks: a
  node of the pass's reduction tree, written by the task that computed it (on a worker)
  when the work it would save is worth the write (:func:`_worth_writing`: at least
  :data:`MIN_SECONDS` of computation not yet saved, and a write estimated at no more
  than :data:`WRITE_SHARE` of it);
* the pass's result, once it is complete.

A rerun with the same checkpoint reads back a finished pass's result (no read of X) or,
for a pass that was cut off, the saved groups, and computes only the blocks outside them.
The resumed tree has the same shape and merge order as an uninterrupted one, so the
result is the same to the bit.

What is trusted:

* A checkpoint is keyed to what its results depend on (:class:`CheckpointRun`'s ``key``:
  the input's identity, its row chunking, the estimator's parameters, the scalenc
  version). A rerun whose key differs is refused with
  :class:`~scalenc.exceptions.CheckpointMismatchError` naming what changed, or, with the
  Dask config ``scalenc.checkpoint.on-change: restart``, starts afresh.
* A pass's files live under a fingerprint of the pass itself (its block function, merge,
  shapes and chunks of its inputs, and every argument shared by its blocks, such as the
  class means of an earlier pass), so a partial is only ever merged into the pass that
  made it. A pass whose arguments cannot be fingerprinted deterministically is computed
  without a checkpoint.
* Each file carries a SHA-256 of its content, checked before the file is used; a
  truncated, altered or unreadable file is removed and its blocks computed again (with a
  :class:`~scalenc.exceptions.CheckpointWarning`), never merged. Files are written under
  a temporary name and renamed (one ``put`` on an object store), so a kill mid-write
  leaves no file that looks complete. Their content is a pickle read back by an
  unpickler that builds only NumPy arrays, plain containers and scalenc's own classes,
  so reading a checkpoint runs no other code.

Settings, from the Dask config (``dask.config.set`` or ``DASK_SCALENC__CHECKPOINT__…``
environment variables): ``scalenc.checkpoint.on-change`` (``"error"``, the default, or
``"restart"``), ``scalenc.checkpoint.keep`` (keep the checkpoint after a successful fit;
default False: it is removed), ``scalenc.checkpoint.storage-options`` (fsspec options
for a URL, such as an object store's endpoint; never written to the checkpoint), and the
group rule ``scalenc.checkpoint.min-seconds`` and ``scalenc.checkpoint.write-share``
(defaults :data:`MIN_SECONDS` and :data:`WRITE_SHARE`). On a cluster, a checkpointed fit
also splits the row blocks of its long passes (``scalenc.checkpoint.block-seconds``:
:mod:`scalenc.engine.blocksize`); each layout's passes live under their own fingerprints.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import dask
import fsspec
import numpy as np
from dask.base import tokenize
from dask.sizeof import sizeof

from scalenc.engine import reads
from scalenc.engine.checkpoint_files import (
    DamagedFile,
    decode,
    encode,
    is_local,
    verify,
    write_file,
)
from scalenc.exceptions import CheckpointMismatchError, CheckpointWarning, InputError

__all__ = [
    "CheckpointRun",
    "checkpointing",
    "active_run",
    "remembered",
    "checkpoint_settings",
    "MIN_SECONDS",
    "WRITE_SHARE",
]

#: A group of blocks is saved only when at least this many seconds of its computation are
#: not saved yet: losing less on a kill is cheaper than the files.
MIN_SECONDS = 2.0
#: A group is saved only when its write is estimated at no more than this share of the
#: unsaved computation it protects; each second of computation is protected by at most
#: one write, so the writes cost at most this share of a pass.
WRITE_SHARE = 0.05
#: The write rates assumed before a process has measured one (bytes per second): a local
#: or shared file system's, and an object store's, both conservatively.
_ASSUMED_WRITE_RATE = {True: 300e6, False: 50e6}
#: Writes of at least this many bytes update the measured rate.
_RATE_SAMPLE_BYTES = 4 * 2**20

_MANIFEST = "manifest.json"
_CONFIG = "scalenc.checkpoint"
_RESULT = "result"


def checkpoint_settings() -> dict:
    """The checkpoint settings of the Dask config: ``on_change``, ``keep`` and
    ``storage_options``.

    Examples
    --------
    >>> import dask
    >>> from scalenc.engine.checkpoint import checkpoint_settings
    >>> checkpoint_settings()["on_change"]
    'error'
    >>> with dask.config.set({"scalenc.checkpoint.keep": True}):
    ...     checkpoint_settings()["keep"]
    True
    """
    on_change = dask.config.get(f"{_CONFIG}.on-change", "error")
    if on_change not in ("error", "restart"):
        raise InputError(
            f"The Dask config {_CONFIG}.on-change must be 'error' or 'restart'; got {on_change!r}."
        )
    rule = (
        float(dask.config.get(f"{_CONFIG}.min-seconds", MIN_SECONDS)),
        float(dask.config.get(f"{_CONFIG}.write-share", WRITE_SHARE)),
    )
    keep = dask.config.get(f"{_CONFIG}.keep", False)
    if isinstance(keep, str):
        keep = keep.strip().lower() in ("1", "true", "yes", "on")
    options = dask.config.get(f"{_CONFIG}.storage-options", None) or {}
    return {
        "on_change": on_change,
        "keep": bool(keep),
        "storage_options": dict(options),
        "rule": rule,
    }


# --- the runtime side: group saves inside the reduction's tasks ---------------------------

#: Measured write rates of this process (bytes per second; local file systems and object
#: stores apart), updated after each write.
_WRITE_RATE = dict(_ASSUMED_WRITE_RATE)


@dataclass
class Timed:
    """A partial with the seconds of computation it holds that no saved file covers."""

    partial: object
    unsaved: float


def _worth_writing(fs, nbytes: int, unsaved: float, rule: tuple[float, float]) -> bool:
    min_seconds, share = rule
    rate = _WRITE_RATE[is_local(fs)]
    return unsaved >= min_seconds and nbytes / rate <= share * unsaved


def _save(fs, path: str, partial, what: str = "A checkpoint file") -> bool:
    """Write ``partial`` at ``path``; False, with a warning naming ``what``, where the write
    failed: a failed save loses nothing but the save."""
    start = time.perf_counter()
    try:
        data = encode(partial)
        write_file(fs, path, data)
    except Exception as exc:
        warnings.warn(
            f"{what} could not be written at {path!r} "
            f"({type(exc).__name__}: {exc}); the fit goes on without it.",
            CheckpointWarning,
            stacklevel=3,
        )
        return False
    elapsed = max(time.perf_counter() - start, 1e-6)
    if len(data) >= _RATE_SAMPLE_BYTES:  # small writes measure latency, not the rate
        local = is_local(fs)
        _WRITE_RATE[local] = 0.5 * _WRITE_RATE[local] + 0.5 * (len(data) / elapsed)
    return True


def _save_if_worth(partial, unsaved: float, fs, path: str, rule) -> float:
    """Save ``partial`` when its unsaved seconds are worth the write; the seconds left
    unsaved."""
    if _worth_writing(fs, nbytes_of(partial), unsaved, rule) and _save(fs, path, partial):
        return 0.0
    return unsaved


def timed_block(block_partial, save, block_id, *args, **kwargs) -> Timed:
    """One block's partial (``block_partial(*args, **kwargs)``) with its seconds, saved as
    node (0, block) of its pass when worth it (``save``: the file system, the pass's
    directory and the rule)."""
    start = time.perf_counter()
    partial = block_partial(*args, **kwargs)
    unsaved = time.perf_counter() - start
    fs, directory, rule = save
    unsaved = _save_if_worth(partial, unsaved, fs, f"{directory}/node-0-{block_id[0]}", rule)
    return Timed(partial, unsaved)


def combine_node(
    *children: Timed, combine, fs, path: str, rule=(MIN_SECONDS, WRITE_SHARE)
) -> Timed:
    """Merge a node's children; save the merged partial at ``path`` when worth it
    (``rule``: the least unsaved seconds, and the largest share of them a write may
    cost)."""
    start = time.perf_counter()
    partial = combine(*[child.partial for child in children])
    unsaved = sum(child.unsaved for child in children) + (time.perf_counter() - start)
    return Timed(partial, _save_if_worth(partial, unsaved, fs, path, rule))


def load_node(fs, path: str) -> Timed:
    """A saved node read back (its checksum checked again where it is read)."""
    with fs.open(path, "rb") as fh:
        data = fh.read()
    try:
        return Timed(decode(data), 0.0)
    except DamagedFile as exc:
        raise CheckpointMismatchError(
            f"The checkpoint file {path!r} changed while the fit read it ({exc}); run the "
            "fit again to compute its blocks again."
        ) from None


def finish_pass(root: Timed, *, fs, path: str):
    """The pass's result, saved whole, then handed on as the plain partial."""
    _save(fs, path, root.partial, "The checkpoint of a finished pass")
    return root.partial


def nbytes_of(value) -> int:
    """Bytes held by ``value``, counting the arrays inside containers, dataclasses and
    other objects (what a partial costs to write, or to send to the workers)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (tuple, list, set, frozenset)):
        return sum(nbytes_of(v) for v in value)
    if isinstance(value, dict):
        return sum(nbytes_of(v) for v in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(nbytes_of(getattr(value, f.name)) for f in dataclasses.fields(value))
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return sum(nbytes_of(v) for v in vars(value).values())
    return sizeof(value)


# --- the client side: the run and its passes ----------------------------------------------


@dataclass
class PassPlan:
    """What a pass finds in the checkpoint: its finished result, or its saved nodes."""

    fs: object
    directory: str
    rule: tuple = (MIN_SECONDS, WRITE_SHARE)
    result: str | None = None
    nodes: set = field(default_factory=set)

    def node_path(self, level: int, index: int) -> str:
        return f"{self.directory}/node-{level}-{index}"

    @property
    def result_path(self) -> str:
        return f"{self.directory}/{_RESULT}"


class CheckpointRun:
    """One fit's checkpoint: its location, its key and what it reused.

    Parameters
    ----------
    url : str or path-like
        The checkpoint location, a directory (created if absent).
    key : dict
        What the fit's results depend on, as JSON: sections such as ``"X"``, ``"y"``,
        ``"parameters"``, ``"version"``; compared section by section on a rerun.
    on_change : {"error", "restart"}
    storage_options : dict, optional
    """

    def __init__(self, url, key: dict, *, on_change="error", storage_options=None, rule=None):
        self.url = os.fspath(url)
        self.rule = rule or (MIN_SECONDS, WRITE_SHARE)
        self.key = json.loads(json.dumps(key, sort_keys=True, default=str))
        self.on_change = on_change
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **(storage_options or {}))
        self.root = self.root.rstrip("/") or "/"
        self.reused = {"passes": 0, "groups": 0, "blocks": 0}
        self.computed = {"passes": 0, "blocks": 0}
        self.unkeyed = 0
        self.resumed = False
        self.attempts = 1  # set by scalenc.engine.resume when the fit resumed by itself
        self.current: tuple[str, int, int] | None = None  # the last pass planned

    # the manifest -----------------------------------------------------------------------

    def open(self) -> CheckpointRun:
        """Read the manifest (refusing another fit's checkpoint) or write a new one."""
        path = f"{self.root}/{_MANIFEST}"
        manifest = None
        if self.fs.exists(path):
            try:
                manifest = decode(self.fs.cat_file(path))
                if not isinstance(manifest, dict) or "key" not in manifest:
                    raise DamagedFile("it holds no key")
            except (DamagedFile, OSError) as exc:
                warnings.warn(
                    f"The checkpoint at {self.url!r} has a damaged manifest ({exc}); it is "
                    "started afresh.",
                    CheckpointWarning,
                    stacklevel=3,
                )
                manifest = None
                self._clear()
        if manifest is not None:
            changes = describe_changes(manifest["key"], self.key)
            if not changes:
                self.resumed = True
                return self
            if self.on_change == "error":
                raise CheckpointMismatchError(
                    f"The checkpoint at {self.url!r} was written by another fit, so it is not "
                    f"resumed: {'; '.join(changes)}. Use another checkpoint location, remove "
                    "this one, or start it afresh (dask config "
                    "scalenc.checkpoint.on-change='restart'; the command's "
                    "--restart-checkpoint)."
                )
            self._clear()
        self.fs.makedirs(self.root, exist_ok=True)
        write_file(self.fs, path, encode({"key": self.key, "created": time.time()}))
        return self

    def _clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            for entry in self.fs.ls(self.root, detail=False):
                self.fs.rm(entry, recursive=True)

    def remove(self) -> None:
        """Remove the checkpoint (after a successful fit)."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.root, recursive=True)

    # passes ------------------------------------------------------------------------------

    def plan_pass(self, fingerprint: str, n_blocks: int = 0, split_every: int = 2) -> PassPlan:
        """The pass's directory and what of it can be trusted (checksums checked here;
        damaged files removed with a warning). ``n_blocks`` and ``split_every``, the
        shape of its tree, say how much of it a cut-off fit left (:meth:`describe`)."""
        directory = f"{self.root}/passes/{fingerprint}"
        self.current = (directory, n_blocks, split_every)
        plan = PassPlan(self.fs, directory, self.rule)
        try:
            names = [p.rsplit("/", 1)[-1] for p in self.fs.ls(directory, detail=False)]
        except FileNotFoundError:
            names = []
        if not names:
            self.fs.makedirs(directory, exist_ok=True)
        for name in names:
            if ".tmp-" in name:
                continue  # a write cut off: never renamed, never read
            path = f"{directory}/{name}"
            if name == _RESULT or name.startswith("node-"):
                if self._trusted(path):
                    if name == _RESULT:
                        plan.result = path
                    else:
                        level, index = name[len("node-") :].split("-")
                        plan.nodes.add((int(level), int(index)))
        return plan

    def _trusted(self, path: str) -> bool:
        try:
            verify(self.fs, path)
            return True
        except (DamagedFile, OSError) as exc:
            warnings.warn(
                f"The checkpoint file {path!r} is damaged ({exc}); its blocks are computed again.",
                CheckpointWarning,
                stacklevel=4,
            )
            with contextlib.suppress(OSError):
                self.fs.rm(path)
            return False

    def remembered(self, name: str, compute):
        """``compute()``'s value, stored in the checkpoint the first time and read back on
        a rerun: for the fit's decisions that depend on the moment (the memory free, the
        measured rates), so that a resumed fit decides as the first run did."""
        path = f"{self.root}/decisions/{name}"
        if self.fs.exists(path):
            try:
                stored = decode(self.fs.cat_file(path))
            except (DamagedFile, OSError):
                pass
            else:
                if isinstance(stored, tuple) and len(stored) == 3 and stored[0] == _REMEMBERED:
                    reads.note_read_back(stored[1])  # the passes it cost keep their place
                    return stored[2]
                return stored
        before = reads.passes_so_far()
        value = compute()
        self.fs.makedirs(f"{self.root}/decisions", exist_ok=True)
        write_file(self.fs, path, encode((_REMEMBERED, reads.passes_so_far() - before, value)))
        return value

    def saved(self) -> frozenset[str]:
        """The files that hold the fit's work, relative to the checkpoint: finished
        passes, saved groups of blocks and remembered decisions. A fit only adds to
        them, so a set with a name the last one lacks is work done since
        (:mod:`scalenc.engine.resume` counts it as progress)."""
        try:
            paths = self.fs.find(self.root)
        except FileNotFoundError:
            return frozenset()
        names = set()
        for path in paths:
            name = path[len(self.root) :].lstrip("/")
            leaf = name.rsplit("/", 1)[-1]
            if ".tmp-" in leaf:
                continue
            work = leaf == _RESULT or leaf.startswith("node-")
            if (name.startswith("passes/") and work) or name.startswith("decisions/"):
                names.add(name)
        return frozenset(names)

    def describe(self, saved: frozenset[str]) -> tuple[str, str]:
        """(what the checkpoint holds, what is left), in words, for the files ``saved``:
        the finished passes and saved groups, and the row blocks the pass planned last
        still needs."""
        finished = {name.split("/")[1] for name in saved if name.endswith(f"/{_RESULT}")}
        groups = [n for n in saved if "/node-" in n and n.split("/")[1] not in finished]
        held = (
            f"{_plural(len(finished), 'finished pass', 'finished passes')} and "
            f"{_plural(len(groups), 'saved group')} of row blocks"
        )
        if self.current is None:
            return held, "the fit's passes from the first"
        directory, n_blocks, split_every = self.current
        name = directory.rsplit("/", 1)[-1]
        if name in finished or not n_blocks:
            return held, "the passes after the last one finished"
        covered = np.zeros(n_blocks, dtype=bool)
        for node in groups:
            if node.split("/")[1] != name:
                continue
            level, index = (int(v) for v in node.rsplit("/node-", 1)[1].split("-"))
            width = split_every**level
            covered[index * width : (index + 1) * width] = True
        left = n_blocks - int(covered.sum())
        return held, (
            f"{left} of {n_blocks} row blocks of the pass that was cut off, and the passes after it"
        )

    def summary(self) -> dict:
        """What this fit reused and computed: passes, groups and blocks, and the
        attempts it took (more than 1: it resumed by itself after its tasks were lost)."""
        return {
            "path": self.url,
            "resumed": self.resumed,
            "attempts": self.attempts,
            **{f"{what}_reused": count for what, count in self.reused.items()},
            **{f"{what}_computed": count for what, count in self.computed.items()},
            "passes_not_checkpointed": self.unkeyed,
        }


_ACTIVE: contextvars.ContextVar[CheckpointRun | None] = contextvars.ContextVar(
    "scalenc_checkpoint", default=None
)


#: What a remembered value is stored with: (this marker, the passes over X it cost, value).
_REMEMBERED = "scalenc-remembered"


def active_run() -> CheckpointRun | None:
    """The checkpoint of the fit running in this context, or None."""
    return _ACTIVE.get()


def remembered(name: str, compute):
    """``compute()``, or, in a checkpointed fit, the value its first run computed
    (:meth:`CheckpointRun.remembered`)."""
    run = _ACTIVE.get()
    return compute() if run is None else run.remembered(name, compute)


@contextlib.contextmanager
def checkpointing(url, key: dict, *, settings: dict | None = None) -> Iterator[CheckpointRun]:
    """Run the block with a checkpoint at ``url`` keyed to ``key``.

    On a normal exit the checkpoint is removed, unless ``settings["keep"]``; on an error
    (or a signal) it stays for the rerun.

    Examples
    --------
    >>> import tempfile
    >>> import dask.array as da
    >>> from scalenc.engine.checkpoint import checkpointing
    >>> from scalenc.engine.cluster import compute
    >>> from scalenc.engine.passes import label_counts_pass
    >>> codes = da.arange(100, chunks=10) % 2
    >>> folder = tempfile.mkdtemp()
    >>> with checkpointing(folder, {"codes": "0, 1, ..."}, settings={"keep": True}) as run:
    ...     (counts,) = compute(label_counts_pass(codes, 2))
    >>> with checkpointing(folder, {"codes": "0, 1, ..."}) as run:  # read back, not computed
    ...     (again,) = compute(label_counts_pass(codes, 2))
    >>> counts.tolist(), again.tolist(), run.summary()["passes_reused"]
    ([50, 50], [50, 50], 1)
    """
    settings = {**checkpoint_settings(), **(settings or {})}
    run = CheckpointRun(
        url,
        key,
        on_change=settings["on_change"],
        storage_options=settings["storage_options"],
        rule=settings["rule"],
    ).open()
    token = _ACTIVE.set(run)
    try:
        yield run
    finally:
        _ACTIVE.reset(token)
    if not settings["keep"]:
        run.remove()


def _plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count} {word if count == 1 else words or word + 's'}"


def describe_changes(old: dict, new: dict) -> list[str]:
    """What differs between two checkpoint keys, in words (empty when they are equal)."""
    changes = []
    for section in sorted(set(old) | set(new)):
        before, after = old.get(section), new.get(section)
        if before == after:
            continue
        if section == "parameters" and isinstance(before, dict) and isinstance(after, dict):
            names = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
            shown = ", ".join(f"{n}: {before.get(n)!r} → {after.get(n)!r}" for n in names[:6])
            changes.append(f"the parameters changed ({shown})")
        elif isinstance(before, dict) and isinstance(after, dict):
            changes.append(f"{section} changed ({_dict_change(before, after)})")
        else:
            changes.append(f"{section} changed ({before!r} → {after!r})")
    return changes


def _dict_change(before: dict, after: dict) -> str:
    parts = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        if name == "files" and isinstance(a, dict) and isinstance(b, dict):
            changed = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f))
            listed = ", ".join(
                f"{f!r} ({_file_state(a.get(f))} → {_file_state(b.get(f))})" for f in changed[:3]
            )
            more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            parts.append(f"{len(changed)} file(s) differ: {listed}{more}")
        elif name == "graph":
            parts.append(
                "its Dask graph is another one (other steps on the data, or a graph whose "
                "task names are random: open the data with scalenc.load, build it from "
                "pure functions)"
            )
        else:
            parts.append(f"{name}: {_short(a)} → {_short(b)}")
    return "; ".join(parts)


def _file_state(state) -> str:
    if state is None:
        return "absent"
    size, stamp = state
    return f"{size} bytes, {stamp}"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def fingerprint(*parts) -> str | None:
    """A deterministic token of a pass's parts, or None where one cannot be made."""
    try:
        with dask.config.set({"tokenize.ensure-deterministic": True}):
            return tokenize(*parts)
    except Exception:
        return None
