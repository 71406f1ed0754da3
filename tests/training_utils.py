"""Shared setup for the attncore.training tests: a tiny vocabulary and a Shakespeare snippet.

The one-thread fixture they all use is `one_torch_thread` in tests/conftest.py.
"""

from __future__ import annotations

VOCAB = "abcdefghij .,\n"
"""A 14-character vocabulary for hand-built tiny models."""

SNIPPET = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
           "First Citizen:\nYou are all resolved rather to die than to famish?\n\n")
"""Two speeches from the opening of tinyshakespeare: repeat it for a corpus that needs no file."""
