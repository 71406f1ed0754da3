"""A planned computation: the work and its memory estimate in one object (DESIGN principle 10).

A :class:`Plan` is made by the function that knows the computation (:func:`attncore.decoder.probe.pass_plan`,
:func:`attncore.models.generation.generation_plan`, :func:`attncore.models.capture.text_plan`, ...), from
the same sizes the computation will allocate: :attr:`Plan.nbytes` is its peak beyond what is already
resident (a model's weights), :attr:`Plan.seconds` a rough CPU time for queueing and for deciding whether a
view waits for a Run button. :meth:`Plan.run` checks the estimate against the per-computation budget
(:func:`attncore.budget.check_bytes`) and does the work, holding the shared model alone
(:func:`attncore.models.modules.exclusive`) when it reads one. A caller that queues (``ui.admission``) takes
:meth:`Plan.holding` first and its admission place second, so that a caller waiting for a busy model holds
no place. ``tests/test_plan_memory.py`` holds every estimate against the peak resident memory measured in a
fresh process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from attncore.budget import check_bytes
from attncore.models.modules import exclusive

__all__ = ["Plan"]

T = TypeVar("T")


@dataclass(frozen=True)
class Plan(Generic[T]):
    """One expensive computation, not yet run.

    Attributes:
        label: what it is, in words ("a 1,024-token pass of the decoder").
        nbytes: peak bytes it allocates beyond what is resident before it (a model's weights excluded).
        seconds: a rough CPU time (queueing, and whether a page waits for Run).
        work: the computation (no arguments).
        model: the shared model the work reads (held alone while it runs), or None.
        advice: what a user can do when ``nbytes`` is over the budget.
    """

    label: str
    nbytes: int
    seconds: float
    work: Callable[[], T]
    model: Any = None
    advice: str = "Use a shorter text."

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold this plan's model alone for the block (nothing without a model); re-entrant in one thread,
        so :meth:`run` inside it does not wait again."""
        if self.model is None:
            yield
            return
        with exclusive(self.model):
            yield

    def run(self) -> T:
        """Refuse (:class:`attncore.errors.ResourceLimitError`) an estimate over the budget, else do the work
        holding the model."""
        check_bytes(self.nbytes, self.label, self.advice)
        with self.holding():
            return self.work()
