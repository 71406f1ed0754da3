"""Keeping a ``logits`` sweep's unit-variance draws for the next sweep that reads the same stream.

The ``logits`` method draws, per row, n standard normals z and multiplies them by the row's
spread ``|q_r| * factor`` (:func:`attncore.sweeps.rng.fill_logit_tile` draws them with
std 1). The z depend on the seed, the number of query rows ``L`` and the block plan, but not
on d, the temperature, the scale rule or the normaliser: moving any of those (the Entropy
page's head-dim slider, say) changes only the per-row factors. Drawing is about a third of a
CPU sweep (torch's ``normal_`` takes ~3.4 ns a sample on one core), so the engine keeps the
z tiles of recent streams in this process-wide, byte-bounded LRU store and reads them back
instead of drawing again: the numbers are the same, bit for bit.

Shapes (the package legend): ``L`` query rows, ``K`` keys per block, ``Lt`` rows per tile;
one stored tile is ``(Lt, K)``, kept as ``z - max z`` (each row shifted by its maximum, as
every job reads it: a job's shifted logits are ``std * (z - max z)``), with its row maxima
``(Lt,)``.

The store holds at most :func:`draw_cache_bytes` (``ATTNCORE_DRAW_CACHE``, bytes or with a
K/M/G suffix; default :data:`DEFAULT_DRAW_CACHE_BYTES`; ``0`` turns it off). A stream larger
than that is never kept; its size is known before anything is drawn (:func:`stream_bytes`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

import torch
from torch import Tensor

from attncore.budget import env_bytes

__all__ = ["DEFAULT_DRAW_CACHE_BYTES", "DRAW_CACHE_ENV", "DrawStore", "Tiles", "draw_cache_bytes",
           "draw_store", "stream_bytes"]

DRAW_CACHE_ENV = "ATTNCORE_DRAW_CACHE"
# One stream of the Entropy page's default view (32 rows x 2^20 keys, float32) is 128 MiB.
DEFAULT_DRAW_CACHE_BYTES = 160 * 1024**2

Tiles = dict[tuple[int, int, int, int], tuple[Tensor, Tensor]]  # (lane, group, block, row0) -> (z, max)


def draw_cache_bytes() -> int:
    """The store's capacity in bytes (read from the environment on every call; 0 = off)."""
    return env_bytes(DRAW_CACHE_ENV, DEFAULT_DRAW_CACHE_BYTES)


def stream_bytes(rows: int, keys: int, dtype: torch.dtype) -> int:
    """Bytes a stream of ``rows`` x ``keys`` draws (plus per-tile maxima, a rounding) takes."""
    return rows * keys * torch.empty((), dtype=dtype).element_size() * 65 // 64


class DrawStore:
    """Streams of z tiles by key, least recently used dropped first, bounded in bytes.

    A stream's ``extent`` is how many blocks it holds: each lane draws its blocks in order, so
    the first blocks of a longer stream are those of a shorter one and a stored stream serves
    every request up to its extent.
    """

    def __init__(self) -> None:
        self._items: OrderedDict[Hashable, tuple[Tiles, int, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, extent: int) -> Tiles | None:
        """The stored tiles of stream ``key`` if it holds ``extent`` blocks (read-only: callers
        must not write into them). None when the store is off (capacity 0)."""
        if draw_cache_bytes() <= 0:
            return None
        with self._lock:
            hit = self._items.get(key)
            if hit is None or hit[2] < extent:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def fits(self, nbytes: int) -> bool:
        """Whether a stream of ``nbytes`` may be kept at all under the current capacity."""
        return 0 < nbytes <= draw_cache_bytes()

    def put(self, key: Hashable, tiles: Tiles, nbytes: int, extent: int) -> None:
        """Keep a complete stream of ``extent`` blocks (unless a longer one is kept), dropping the
        least recently used until everything fits the capacity."""
        cap = draw_cache_bytes()
        with self._lock:
            old = self._items.get(key)
            if old is not None and old[2] >= extent:
                return
            self._items.pop(key, None)
            if not 0 < nbytes <= cap:
                return
            self._items[key] = (tiles, nbytes, extent)
            while sum(b for _, b, _ in self._items.values()) > cap:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        with self._lock:
            return sum(b for _, b, _ in self._items.values())


_STORE = DrawStore()


def draw_store() -> DrawStore:
    """The process-wide store the torch engine reads and fills."""
    return _STORE
