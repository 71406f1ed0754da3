"""How the class answered (issue 41, item 3): one process-wide store of answer counts, behind a lock.

Counts only: no names, no session ids, no answer text (a numeric answer is counted by where it fell against
the answer: below, within the tolerance, above). Bounded: at most :data:`MAX_QUESTIONS` questions (the one
answered longest ago is dropped first) of at most :data:`MAX_BUCKETS` counts each. Kept in memory, so a
restart clears it; one server's sessions share it (replicas behind a balancer each count their own).

A student who changes their answer moves their one count (:meth:`Poll.record` takes the bucket they had).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["MAX_BUCKETS", "MAX_QUESTIONS", "POLL", "Poll", "Tally"]

MAX_QUESTIONS = 64
MAX_BUCKETS = 8
MAX_COUNT = 1_000_000  # a count never passes this (a runaway client cannot overflow anything)


@dataclass(frozen=True)
class Tally:
    """A copy of one question's counts: ``labels[i]`` answered ``counts[i]`` times."""

    labels: tuple[str, ...]
    counts: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.counts)


class Poll:
    """The counts per question id, bounded, thread-safe."""

    def __init__(self, max_questions: int = MAX_QUESTIONS) -> None:
        self._lock = threading.Lock()
        self._max = max_questions
        self._counts: OrderedDict[str, tuple[tuple[str, ...], list[int]]] = OrderedDict()

    def record(self, qid: str, labels: tuple[str, ...], bucket: int, previous: int | None = None) -> None:
        """Count one answer in ``bucket`` (moving it out of ``previous``, this session's earlier answer)."""
        labels = tuple(str(x) for x in labels[:MAX_BUCKETS])
        if not 0 <= bucket < len(labels):
            return
        with self._lock:
            entry = self._counts.get(qid)
            if entry is None or entry[0] != labels:
                entry = (labels, [0] * len(labels))
                previous = None
            self._counts[qid] = entry
            self._counts.move_to_end(qid)
            counts = entry[1]
            if previous is not None and 0 <= previous < len(counts) and counts[previous] > 0:
                counts[previous] -= 1
            counts[bucket] = min(counts[bucket] + 1, MAX_COUNT)
            while len(self._counts) > self._max:
                self._counts.popitem(last=False)

    def tally(self, qid: str) -> Tally | None:
        """This question's counts (None: nobody answered it since the server started)."""
        with self._lock:
            entry = self._counts.get(qid)
            return None if entry is None else Tally(entry[0], tuple(entry[1]))

    def __len__(self) -> int:
        with self._lock:
            return len(self._counts)

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()


POLL = Poll()  # the server's one store (module state: every session of this process shares it)
