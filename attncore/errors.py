"""Errors that carry a plain-words message meant for the person at the controls.

The UI shows ``str(error)`` of these verbatim, so every message says what was
asked, what the limit is and why.
"""

from __future__ import annotations

__all__ = ["AttnInputError", "Cancelled", "ResourceLimitError"]


class AttnInputError(ValueError):
    """An argument is out of range or inconsistent (shapes, sizes, parameters)."""


class ResourceLimitError(AttnInputError):
    """A request would need more memory or time than the configured budget allows."""


class Cancelled(RuntimeError):  # noqa: N818 - the word the UI shows
    """A long computation was stopped by its caller (progress callback, cancel event)."""
