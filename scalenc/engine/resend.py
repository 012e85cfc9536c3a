"""The client's copy of each value it scattered to the workers, kept while the value's Future
lives: Dask cannot compute scattered data again, so when the worker holding its last copy
is lost, :func:`rescatter_lost` sends it again under the same key
(:func:`scalenc.engine.cluster.compute` then computes the graph again).
"""

from __future__ import annotations

import weakref

#: Scattered values still referred to by a live graph: (client id, key) → Future.
SCATTERED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
#: Every scattered Future still alive, by its key, and the plain value behind it with
#: whether it went to every worker: what :func:`rescatter_lost` sends again.
_LIVE_SCATTERED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_SCATTERED_VALUES: dict = {}


def remember_scattered(future, value, broadcast: bool) -> None:
    """Keep ``value`` on the client for as long as its scattered ``future`` lives, so that
    :func:`rescatter_lost` can send it again if the workers holding it are lost."""
    _SCATTERED_VALUES[future.key] = (value, broadcast)
    _LIVE_SCATTERED[future.key] = future
    weakref.finalize(future, _SCATTERED_VALUES.pop, future.key, None)


def rescatter_lost(client) -> int:
    """Send again, each under its own key, the scattered values of ``client`` whose every
    copy was lost with its workers (Dask cannot compute scattered data again); the
    graphs that refer to them can then be computed again. Returns how many were sent."""
    again: dict[bool, dict] = {True: {}, False: {}}
    for key, future in list(_LIVE_SCATTERED.items()):
        if future.client is client and future.status != "finished" and key in _SCATTERED_VALUES:
            value, broadcast = _SCATTERED_VALUES[key]
            again[broadcast][key] = value
    for broadcast, data in again.items():
        if data:
            client.scatter(data, broadcast=broadcast)
    return len(again[True]) + len(again[False])
