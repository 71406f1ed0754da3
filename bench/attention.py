"""Benchmark: attncore.attention (materialised, with weights) against torch's fused SDPA,
and the Heatmaps page's compute at its default and largest settings.

Run: python -m bench.attention
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attncore import attention, resolve_device
from attncore.explore import SyntheticSpec, draw_pool, synthetic_stages
from bench.common import median_time, row

SHAPES = [  # (B, H, L, S, E)
    (1, 4, 16, 16, 64),
    (1, 8, 256, 256, 64),
    (1, 16, 1024, 1024, 64),
    (1, 16, 1024, 1024, 1024),
]


def main() -> None:
    torch.set_flush_denormal(True)
    device = resolve_device()
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    g = torch.Generator(device=device).manual_seed(0)
    for B, H, L, S, E in SHAPES:
        q, k, v = (torch.randn(B, H, n, E, generator=g, device=device) for n in (L, S, S))
        for causal in (False, True):
            ours = median_time(lambda: attention(q, k, v, is_causal=causal, return_weights=True),
                               repeats=3)
            base = median_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                               repeats=3)
            print(row(f"attention B{B} H{H} L{L} S{S} E{E} causal={causal}", ours, base, "sdpa"))
    print("Heatmaps page compute (all stages kept, inputs from the cached pool):")
    for name, spec in (("default", SyntheticSpec()),
                       ("largest", SyntheticSpec(L=1024, S=1024, heads=16, kv_heads=16, d_k=1024))):
        pool = draw_pool(spec, device)
        ours = median_time(lambda: synthetic_stages(spec, device, pool), repeats=3)
        q = pool.query[..., : spec.L, :]
        k = pool.key[..., : spec.S, :]
        v = pool.value[..., : spec.S, :]
        base = median_time(lambda: F.scaled_dot_product_attention(q, k, v), repeats=3)
        print(row(f"heatmaps {name} ({spec.heads}x{spec.L}x{spec.S}, d_k={spec.d_k})", ours, base, "sdpa"))


if __name__ == "__main__":
    main()
