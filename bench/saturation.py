"""Benchmarks for the Saturation & gradients page: ours, a baseline and their ratio, in one run.

    python -m bench.saturation

Baselines are what one would write with plain torch: the Jacobian through
``torch.func.vmap(torch.func.jacrev(softmax))``, gradients through autograd, q·k
samples by materialising the whole (N, d) draw, the q·k density through SciPy's
Bessel function (skipped when SciPy is absent). Times come from
timeit's autorange (best of 5 loops); on a shared machine they are noisy, so read the
ratios, not the digits.
"""

from __future__ import annotations

import math
import timeit
from collections.abc import Callable

import numpy as np
import torch

from attncore import theory
from attncore.dot_products import dot_product_samples
from attncore.gradients import jacobian_frobenius, softmax_jacobian, softmax_vjp
from attncore.synthetic import make_generator


def best_time(fn: Callable[[], object], repeats: int = 5) -> float:
    """Seconds per call of ``fn()``: the best of ``repeats`` loops of at least 0.2 s each (as timeit)."""
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeats, number=number)) / number


def line(label: str, ours: float, base: float, base_name: str) -> str:
    return (f"{label:<46} ours {ours * 1e3:9.3f} ms   {base_name} {base * 1e3:9.3f} ms   "
            f"ratio baseline/ours {base / ours:8.3g}x")


def main() -> None:
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; best of 5 timeit loops")
    g = make_generator(0)

    p = torch.softmax(torch.randn(512, 256, generator=g) * 2, -1)  # (rows, n)
    jac_ref = torch.func.vmap(torch.func.jacrev(lambda r: torch.softmax(r, -1)))
    logits = torch.log(p)
    ours = best_time(lambda: jacobian_frobenius(p))
    base = best_time(lambda: jac_ref(logits).flatten(-2).norm(dim=-1))
    print(line("‖J‖_F of 512 rows, n = 256 (O(n) form)", ours, base, "vmap(jacrev)"))
    torch.testing.assert_close(jacobian_frobenius(p), jac_ref(logits).flatten(-2).norm(dim=-1), rtol=1e-4,
                               atol=1e-6)

    small = p[:128, :64].softmax(-1)
    ours = best_time(lambda: softmax_jacobian(small))
    base = best_time(lambda: jac_ref(torch.log(small)))
    print(line("J = diag(p) - ppᵀ of 128 rows, n = 64", ours, base, "vmap(jacrev)"))

    x = torch.randn(4096, 1024, generator=g, requires_grad=True)
    up = torch.randn(4096, 1024, generator=g)
    w = torch.softmax(x, -1)

    def autograd_vjp() -> torch.Tensor:
        (gx,) = torch.autograd.grad(w, x, up, retain_graph=True)
        return gx

    ours = best_time(lambda: softmax_vjp(w.detach(), up))
    base = best_time(autograd_vjp)
    print(line("Jᵀg for 4096 rows, n = 1024 (chain rule)", ours, base, "autograd"))

    d, n = 512, 50_000

    def materialised() -> torch.Tensor:
        gen = make_generator(1)
        return (torch.randn(n, d, generator=gen) * torch.randn(n, d, generator=gen)).sum(-1)

    ours = best_time(lambda: dot_product_samples(d, n, seed=1), repeats=3)
    base = best_time(materialised, repeats=3)
    print(line(f"{n:,} samples of q·k, d = {d} (blocked)", ours, base, "one (N, d) draw"))

    xs = np.linspace(0.01, 80, 400)
    try:
        from scipy import special
    except ImportError:
        print("q·k density: SciPy not installed, baseline skipped")
        return
    for dd in (64, 4096):
        nu = (dd - 1) / 2

        def scipy_density(dd: int = dd, nu: float = nu) -> np.ndarray:
            # The textbook formula in floats; Gamma(d/2) alone overflows a float for d > 342.
            gamma = math.gamma(dd / 2) if dd <= 342 else math.inf
            return xs**nu * special.kv(nu, xs) / (math.sqrt(math.pi) * gamma * np.power(2.0, nu))

        with np.errstate(all="ignore"):
            ours = best_time(lambda dd=dd: theory.dot_product_density(xs, dd))
            base = best_time(scipy_density)
            finite = np.isfinite(scipy_density()).mean()
        print(line(f"q·k density at 400 points, d = {dd}", ours, base, "scipy kv") +
              f"   (scipy finite at {100 * finite:.0f}% of points, ours at "
              f"{100 * np.isfinite(theory.dot_product_density(xs, dd)).mean():.0f}%)")


if __name__ == "__main__":
    main()
