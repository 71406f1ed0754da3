"""SDPA backend choices (torch's process-wide ``sdpa_kernel`` flags) never leak across threads.

Found by bench/load.py: with two sessions on the Kernels page, one session's "efficient"-only
call switched the other session's plain SDPA call to "No viable backend". attncore holds
:data:`attncore.kernels.SDPA_LOCK` around every SDPA call.
"""

from __future__ import annotations

import contextlib
import threading

import torch
import torch.nn.functional as F

from attncore.kernels import KernelSpec, make_inputs
from attncore.kernels import calls as kernels


def test_a_restricted_backend_in_one_thread_never_breaks_default_sdpa_in_another() -> None:
    x = make_inputs(KernelSpec(heads=2, head_dim=16, seed=3), 32, 32, "cpu")
    want = F.scaled_dot_product_attention(x.query, x.key, x.value)
    stop = threading.Event()
    errors: list[str] = []

    def restricted() -> None:  # "efficient" has no CPU kernel: every call is refused inside the context
        while not stop.is_set():
            with contextlib.suppress(RuntimeError):
                kernels.call("efficient", x, 0.0, None)

    t = threading.Thread(target=restricted, daemon=True)
    t.start()
    try:
        for _ in range(300):
            try:
                got = kernels.call("default", x, 0.0, None)
            except RuntimeError as exc:  # pragma: no cover - the bug this guards against
                errors.append(str(exc)[:120])
                continue
            torch.testing.assert_close(got, want)
    finally:
        stop.set()
        t.join(10)
    assert errors == []
    # the flags are back to torch's defaults afterwards
    assert torch.backends.cuda.math_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()
