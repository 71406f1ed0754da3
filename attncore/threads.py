"""torch's intra-op thread count, lowered for a while by several threads at once without leaking.

``torch.set_num_threads`` is process-wide. Sweep workers and training runs want one thread
each (their own threads are the parallelism); if each saved and restored the count itself,
two overlapping users could save each other's temporary 1 and "restore" it for good (every
later page then computed on 1 thread). :func:`single_threaded` counts its users under a lock:
the first saves the count, the last restores it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["single_threaded"]

_lock = threading.Lock()
_users = 0
_saved = 0


@contextmanager
def single_threaded() -> Iterator[int]:
    """Run the block with torch at 1 intra-op thread; yields the count the process had before."""
    global _users, _saved
    with _lock:
        if _users == 0:
            _saved = torch.get_num_threads()
        _users += 1
        before = _saved
        torch.set_num_threads(1)
    try:
        yield before
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                torch.set_num_threads(_saved)
            else:
                torch.set_num_threads(1)  # a worker may have reset it; the others still want 1
