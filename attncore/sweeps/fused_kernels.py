"""Triton kernels of the fused entropy sweep (imported only by :mod:`attncore.sweeps.fused`).

This module imports triton at the top; nothing else in attncore imports it, so attncore works
without triton. Whether these kernels run compiled (CUDA) or in Triton's interpreter (CPU) is
fixed when triton is first imported: ``TRITON_INTERPRET=1`` must be set before that.

Random numbers: Philox-4x32-10 (``tl.randint4x``) at 64-bit counters gives four 32-bit words;
:func:`_box_muller` turns two words into two N(0, 1) samples. The radius uniform is the first
word plus 8 more bits from the second, ``u = (w1 + (w2 mod 256 + 1/2) / 256) / 2^32``, so
its smallest value is ``2^-41`` and the largest normal ``sqrt(2 * 41 ln 2) = 7.54`` standard
deviations (a 32-bit uniform caps at 6.66; ``tl.randn`` clamps its uniform at 1e-7: 5.68).
The angle uses the top 24 bits of the second word (all a float32 angle can hold). With
2^40 radius uniforms (cell midpoints) the tail probability ``P(R > r) = e^{-r^2/2}`` is
resolved to 0.07% at 6.5 and 2% at 7 standard deviations; the largest of the 2^30 draws of
one row passes 7 with probability 0.14% and 7.54 with 3e-5, so the mean max weight at
n = 2^30 is unaffected (checked against the quadrature on CUDA by the tests). Each sample
is a fixed function of (seed, stream, index): the draws do not depend on tile sizes, chunking
or launch boundaries, and the replay kernels write exactly the samples the sweep kernels use.

The vectors kernels draw on CUDA with the GPU's one-instruction ``lg2``, ``sin`` and ``cos``
(``FAST``; see :func:`_box_muller`) and round every key and value component to tf32 (10
mantissa bits, :func:`_tf32`): the tensor cores then multiply them exactly, and the queries
enter as two tf32 parts (``hi + lo``), so ``q . k`` is float32-accurate from two tf32 passes.

Index maps (``Q4 = GROUP / 4``; ``a, b`` in {0, 1}):

* logits: key ``j`` of row ``r`` is output ``(j mod GROUP) // Q4`` of counter
  ``r * ROW_COUNTERS + (j // GROUP) * Q4 + j mod Q4``;
* keys: component ``DCH c + 4 p + 2 a + b`` of key ``j`` is output ``a + 2 b`` of counter
  ``(j * n_dch + c) * DCH / 4 + p`` (``n_dch`` DCH-wide chunks of the padded head dim);
* values: component ``4 u + 2 a + b`` of key ``j`` is output ``a + 2 b`` of counter
  ``j * DVP / 4 + u`` (``DVP`` the padded value dim).

(the tests check both vectors maps against :func:`_normals_kernel`'s outputs.)
"""

from __future__ import annotations

import triton
import triton.language as tl

ROW_COUNTERS = tl.constexpr(1 << 28)  # counters per logits row: 2^30 keys / 4 outputs (a constexpr global)


@triton.jit
def _box_muller(w1, w2, FAST: tl.constexpr = False):
    """Two N(0, 1) float32 tiles from two uint32 tiles (radius from 40 bits, angle from 24).

    Without ``FAST`` (the logits kernels; the interpreter) ``log``, ``sin`` and ``cos`` are the
    precise library functions on the angle ``(0, 2 pi)``. With ``FAST`` (the vectors kernels
    compiled for CUDA) they are the one-instruction approximations ``lg2.approx`` (absolute
    error about 2^-22) and ``sin/cos.approx`` (2^-20.5 on ``(-pi, pi)``) on the angle shifted
    by -pi (the pair only changes sign: the same law): a sample moves by less than 1e-6 of its
    radius (radii below ~0.005, from ``u`` within 1e-5 of 1, by a little more), and a pair
    costs about 20 instructions instead of about 100. The interpreter runs no inline assembly:
    interpreted vectors kernels draw without ``FAST`` (the same law; a kernel and its replay
    always draw the same way, which is what the tests compare).
    """
    frac = ((w2 & 255).to(tl.float32) + 0.5) * 0.00390625
    u = tl.minimum((w1.to(tl.float32) + frac) * 2.3283064365386963e-10, 1.0)  # (0, 1]
    th = ((w2 >> 8).to(tl.float32) + 0.5) * 3.7450702829239286e-07  # 2 pi / 2^24
    if FAST:
        r = tl.sqrt(tl.maximum(-1.3862943611198906 * _fast_lg2(u), 0.0))  # -2 ln u = -2 ln 2 log2 u
        th = th - 3.141592653589793
        return r * _fast_cos(th), r * _fast_sin(th)
    r = tl.sqrt(-2.0 * tl.log(u))
    return r * tl.cos(th), r * tl.sin(th)


@triton.jit
def _fast_lg2(x):
    return tl.inline_asm_elementwise("lg2.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def _fast_sin(x):
    return tl.inline_asm_elementwise("sin.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def _fast_cos(x):
    return tl.inline_asm_elementwise("cos.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def _normal4(seed, ctr, FAST: tl.constexpr = False):
    """Four N(0, 1) float32 tiles shaped like ``ctr`` (int64 counters) from one Philox call."""
    w1, w2, w3, w4 = tl.randint4x(seed, ctr)
    n1, n2 = _box_muller(w1, w2, FAST)
    n3, n4 = _box_muller(w3, w4, FAST)
    return n1, n2, n3, n4


@triton.jit
def _logit_z(seed, rows, g, Q4: tl.constexpr):
    """The four quarter tiles (RB, Q4) of z for key group g of ``rows`` (see the index map)."""
    p = tl.arange(0, Q4)
    ctr = rows[:, None].to(tl.int64) * ROW_COUNTERS + g * Q4 + p[None, :]  # g: int64 in the sweep
    return _normal4(seed, ctr)


# --------------------------------------------------------------------------- logits


@triton.jit
def _softmax_update(m, s0, s1, s2, mt):
    """Rescale running sums (relative to max m) to the new max max(m, mt)."""
    m_new = tl.maximum(m, mt)
    al = tl.exp(m - m_new)
    s1 = al * (s1 + (m - m_new) * s0)
    return m_new, al * s0, s1, al * al * s2, al


@triton.jit
def _softmax_add(x, ok, m_new, s0, s1, s2):
    """Add a tile's ``e = exp(x - m)``, ``(x - m) e`` and ``e^2`` row sums (masked keys add 0)."""
    dx = x - m_new[:, None]
    e = tl.where(ok, tl.exp(dx), 0.0)
    return s0 + tl.sum(e, axis=1), s1 + tl.sum(dx * e, axis=1), s2 + tl.sum(e * e, axis=1)


@triton.jit
def _sigmoid_add(x, ok, bias, m, s0, s1, s2):
    """Add a tile's sigmoid weights ``w = sigma(x + bias)``: max, sum w, sum w log w, sum w^2."""
    w = tl.where(ok, tl.sigmoid(x + bias), 0.0)
    wlw = w * tl.log(tl.maximum(w, 1.0e-30))  # 0 log 0 = 0 (a normal float: FTZ flushes 1e-38)
    return (tl.maximum(m, tl.max(w, axis=1)), s0 + tl.sum(w, axis=1), s1 + tl.sum(wlw, axis=1),
            s2 + tl.sum(w * w, axis=1))


@triton.jit
def _masked_max(x, ok):
    return tl.max(tl.where(ok, x, -1.0e30), axis=1)


@triton.jit
def _load_z(z_ptr, rows, row_ok, keys, n_fixed):
    ok = row_ok[:, None] & (keys[None, :] < n_fixed)
    return tl.load(z_ptr + rows[:, None].to(tl.int64) * n_fixed + keys[None, :], mask=ok, other=0.0)


@triton.jit
def _logits_kernel(part_ptr, std_ptr, z_ptr, seed, key_lo, key_hi, chunk, n_rows, bias, n_fixed,
                  SIGMOID: tl.constexpr, FIXED: tl.constexpr, RB: tl.constexpr, GROUP: tl.constexpr):
    """Partial sums of rows ``RB * pid0 ..`` over keys ``[key_lo + pid1 * chunk, ..)`` (< key_hi).

    Logits ``x = std_r * z``; z from Philox (or, with FIXED, read from ``z_ptr`` (R, n_fixed)).
    Writes ``part[pid1, r, :] = (m, s0, s1, s2)`` in float32 (see :mod:`attncore.sweeps.fused`).
    """
    Q4: tl.constexpr = GROUP // 4
    pr = tl.program_id(0)
    pc = tl.program_id(1)
    rows = pr * RB + tl.arange(0, RB)
    row_ok = rows < n_rows
    std = tl.load(std_ptr + rows, mask=row_ok, other=0.0)[:, None]
    lo = key_lo + pc.to(tl.int64) * chunk
    hi = tl.minimum(lo + chunk, key_hi)
    p = tl.arange(0, Q4)
    m = tl.zeros([RB], tl.float32) - (0.0 if SIGMOID else 1.0e30)  # sigmoid: max weight >= 0
    s0 = tl.zeros([RB], tl.float32)
    s1 = tl.zeros([RB], tl.float32)
    s2 = tl.zeros([RB], tl.float32)
    for g in range(lo // GROUP, (hi + GROUP - 1) // GROUP):
        base = g * GROUP
        k1 = base + p
        k2 = k1 + Q4
        k3 = k2 + Q4
        k4 = k3 + Q4
        if FIXED:
            z1 = _load_z(z_ptr, rows, row_ok, k1, n_fixed)
            z2 = _load_z(z_ptr, rows, row_ok, k2, n_fixed)
            z3 = _load_z(z_ptr, rows, row_ok, k3, n_fixed)
            z4 = _load_z(z_ptr, rows, row_ok, k4, n_fixed)
        else:
            z1, z2, z3, z4 = _logit_z(seed, rows, g, Q4)
        x1 = z1 * std
        x2 = z2 * std
        x3 = z3 * std
        x4 = z4 * std
        ok1 = ((k1 >= lo) & (k1 < hi))[None, :]
        ok2 = ((k2 >= lo) & (k2 < hi))[None, :]
        ok3 = ((k3 >= lo) & (k3 < hi))[None, :]
        ok4 = ((k4 >= lo) & (k4 < hi))[None, :]
        if SIGMOID:
            m, s0, s1, s2 = _sigmoid_add(x1, ok1, bias, m, s0, s1, s2)
            m, s0, s1, s2 = _sigmoid_add(x2, ok2, bias, m, s0, s1, s2)
            m, s0, s1, s2 = _sigmoid_add(x3, ok3, bias, m, s0, s1, s2)
            m, s0, s1, s2 = _sigmoid_add(x4, ok4, bias, m, s0, s1, s2)
        else:
            mt = tl.maximum(tl.maximum(_masked_max(x1, ok1), _masked_max(x2, ok2)),
                            tl.maximum(_masked_max(x3, ok3), _masked_max(x4, ok4)))
            m, s0, s1, s2, _al = _softmax_update(m, s0, s1, s2, mt)
            s0, s1, s2 = _softmax_add(x1, ok1, m, s0, s1, s2)
            s0, s1, s2 = _softmax_add(x2, ok2, m, s0, s1, s2)
            s0, s1, s2 = _softmax_add(x3, ok3, m, s0, s1, s2)
            s0, s1, s2 = _softmax_add(x4, ok4, m, s0, s1, s2)
    out = part_ptr + (pc.to(tl.int64) * n_rows + rows) * 4
    tl.store(out, m, mask=row_ok)
    tl.store(out + 1, s0, mask=row_ok)
    tl.store(out + 2, s1, mask=row_ok)
    tl.store(out + 3, s2, mask=row_ok)


@triton.jit
def _logits_floor_kernel(out_ptr, std_ptr, seed, n_keys, chunk, n_rows, RB: tl.constexpr,
                         GROUP: tl.constexpr, FAST: tl.constexpr = False):
    """The floor: the same Philox draws and one exp per sample, summed (nothing else).

    ``FAST``: the vectors kernels' transform (see :func:`_box_muller`), for their floor.
    """
    Q4: tl.constexpr = GROUP // 4
    pr = tl.program_id(0)
    pc = tl.program_id(1)
    rows = pr * RB + tl.arange(0, RB)
    row_ok = rows < n_rows
    std = tl.load(std_ptr + rows, mask=row_ok, other=0.0)[:, None]
    lo = pc.to(tl.int64) * chunk
    hi = tl.minimum(lo + chunk, n_keys)
    acc = tl.zeros([RB, Q4], tl.float32)
    p = tl.arange(0, Q4)
    for g in range(lo // GROUP, (hi + GROUP - 1) // GROUP):
        z1, z2, z3, z4 = _normal4(seed, rows[:, None].to(tl.int64) * ROW_COUNTERS + g * Q4 + p[None, :], FAST)
        acc += tl.exp(z1 * std) + tl.exp(z2 * std) + tl.exp(z3 * std) + tl.exp(z4 * std)
    tl.store(out_ptr + pc.to(tl.int64) * n_rows + rows, tl.sum(acc, axis=1), mask=row_ok)


@triton.jit
def _draw_logits_kernel(z_ptr, seed, n_keys, n_rows, RB: tl.constexpr, GROUP: tl.constexpr):
    """Replay: write the z (R, n_keys) of the logits kernel (one key group per program)."""
    Q4: tl.constexpr = GROUP // 4
    pr = tl.program_id(0)
    g = tl.program_id(1)
    rows = pr * RB + tl.arange(0, RB)
    row_ok = rows[:, None] < n_rows
    z1, z2, z3, z4 = _logit_z(seed, rows, g, Q4)
    k1 = g * GROUP + tl.arange(0, Q4)
    base = z_ptr + rows[:, None].to(tl.int64) * n_keys
    tl.store(base + k1[None, :], z1, mask=row_ok & (k1[None, :] < n_keys))
    tl.store(base + (k1 + Q4)[None, :], z2, mask=row_ok & ((k1 + Q4)[None, :] < n_keys))
    tl.store(base + (k1 + 2 * Q4)[None, :], z3, mask=row_ok & ((k1 + 2 * Q4)[None, :] < n_keys))
    tl.store(base + (k1 + 3 * Q4)[None, :], z4, mask=row_ok & ((k1 + 3 * Q4)[None, :] < n_keys))


# --------------------------------------------------------------------------- vectors


@triton.jit
def _tf32(x):
    """``x`` rounded to the nearest tf32 number (10 mantissa bits, ties away from zero).

    A tf32 number times a tf32 number is exact in float32, so a tensor-core product of tf32
    operands with float32 accumulation is as accurate as a float32 dot product. The same bit
    operation on the host: :func:`attncore.sweeps.fused.tf32_round`.
    """
    b = x.to(tl.uint32, bitcast=True)
    return ((b + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def _key_tile(seed, keys, c, n_dch, DCH: tl.constexpr, FAST: tl.constexpr):
    """Keys ``keys`` (BN,), components ``DCH c .. DCH (c+1)``: a (BN, DCH) tile of tf32 numbers.

    Component ``DCH c + 4 p + 2 a + b`` of key ``j`` is output ``a + 2 b`` of counter
    ``(j n_dch + c) DCH/4 + p`` (see the module's index maps), rounded to tf32.
    """
    P4: tl.constexpr = DCH // 4
    p = tl.arange(0, P4)
    ctr = (keys[:, None].to(tl.int64) * n_dch + c) * P4 + p[None, :]
    n1, n2, n3, n4 = _normal4(seed, ctr, FAST)
    k = tl.join(tl.join(n1, n2), tl.join(n3, n4))  # (BN, P4, 2, 2): [j, p, a, b] = output a + 2 b
    return _tf32(tl.reshape(k, (keys.shape[0], DCH)))


@triton.jit
def _value_tile(seed, keys, DVP: tl.constexpr, FAST: tl.constexpr):
    """The (BN, DVP) value tile of ``keys`` (BN,) in tf32 numbers (see the index map)."""
    D4: tl.constexpr = DVP // 4
    u = tl.arange(0, D4)
    ctr = keys[:, None].to(tl.int64) * D4 + u[None, :]
    n1, n2, n3, n4 = _normal4(seed, ctr, FAST)
    v = tl.join(tl.join(n1, n2), tl.join(n3, n4))  # (BN, D4, 2, 2)
    return _tf32(tl.reshape(v, (keys.shape[0], DVP)))


@triton.jit
def _load_keys(k_ptr, keys, key_ok, col0, DP, DCH: tl.constexpr):
    """Fixed keys: the (BN, DCH) slice ``K[keys, col0:col0+DCH]`` of K (n, DP), rounded to tf32."""
    p = tl.arange(0, DCH)
    ptr = k_ptr + keys[:, None].to(tl.int64) * DP + col0 + p[None, :]
    return _tf32(tl.load(ptr, mask=key_ok[:, None], other=0.0))


@triton.jit
def _load_q(q_ptr, rows, row_ok, col0, DP, DCH: tl.constexpr):
    """The (BR, DCH) slice ``q[rows, col0:col0+DCH]`` of q (R, DP)."""
    p = tl.arange(0, DCH)
    return tl.load(q_ptr + rows[:, None] * DP + col0 + p[None, :], mask=row_ok[:, None], other=0.0)


@triton.jit
def _vectors_kernel(part_ptr, qhi_ptr, qlo_ptr, k_ptr, v_ptr, seed_k, seed_v, key_lo, key_hi, chunk, n_rows,
                   n_dch, dv, bias, n_fixed, SIGMOID: tl.constexpr, FIXED: tl.constexpr, BR: tl.constexpr,
                   BN: tl.constexpr, DCH: tl.constexpr, DVP: tl.constexpr, DOT_PREC: tl.constexpr,
                   FAST: tl.constexpr):
    """Partial sums of rows ``BR * pid0 ..`` over keys ``[key_lo + pid1 * chunk, ..)`` (< key_hi).

    ``q = qhi + qlo`` (R, DCH n_dch): the queries times the logit factor, zero-padded, split
    into two tf32 parts on the host. Each key tile (BN keys, all components) is drawn once,
    rounded to tf32 and shared by the BR rows through ``tl.dot``: ``qhi k + qlo k`` is a
    float32-accurate ``q . k`` from two tf32 tensor-core passes (the products are exact). The
    weights ``e`` meet the tf32 value tile the same way (``e = e_hi + e_lo``). With FIXED,
    keys (n_fixed, DCH n_dch) and values (n_fixed, DVP) are read from ``k_ptr`` / ``v_ptr``
    (and rounded to tf32 like the draws). Writes ``part[pid1, r, :] = (m, s0, s1, s2, o_0 ..
    o_{dv-1})`` in float32.

    The rows of a program are the M side of every product: with ``num_warps = BR / 16`` each
    warp owns 16 whole rows, so the row max and the three row sums stay inside a warp.
    """
    pr = tl.program_id(0)
    pc = tl.program_id(1)
    rows = pr * BR + tl.arange(0, BR)
    row_ok = rows < n_rows
    lo = key_lo + pc.to(tl.int64) * chunk
    hi = tl.minimum(lo + chunk, key_hi)
    DP = n_dch * DCH
    m = tl.zeros([BR], tl.float32) - (0.0 if SIGMOID else 1.0e30)  # sigmoid: max weight >= 0
    s0 = tl.zeros([BR], tl.float32)
    s1 = tl.zeros([BR], tl.float32)
    s2 = tl.zeros([BR], tl.float32)
    o = tl.zeros([BR, DVP], tl.float32)
    cols = tl.arange(0, DVP)
    for t0 in range(lo, hi, BN):
        keys = t0 + tl.arange(0, BN)
        key_ok = keys < hi
        s = tl.zeros([BR, BN], tl.float32)
        for c in range(0, n_dch):
            col = c * DCH
            if FIXED:
                k = _load_keys(k_ptr, keys, key_ok, col, DP, DCH)
            else:
                k = _key_tile(seed_k, keys, c, n_dch, DCH, FAST)
            kt = tl.trans(k)  # (DCH, BN)
            s = tl.dot(_load_q(qhi_ptr, rows, row_ok, col, DP, DCH), kt, s, input_precision=DOT_PREC)
            s = tl.dot(_load_q(qlo_ptr, rows, row_ok, col, DP, DCH), kt, s, input_precision=DOT_PREC)
        if FIXED:
            vptr = v_ptr + keys[:, None].to(tl.int64) * DVP + cols[None, :]
            v = _tf32(tl.load(vptr, mask=key_ok[:, None], other=0.0))
        else:
            v = _value_tile(seed_v, keys, DVP, FAST)
        ok = key_ok[None, :]
        if SIGMOID:
            w = tl.where(ok, tl.sigmoid(s + bias), 0.0)
            wlw = w * tl.log(tl.maximum(w, 1.0e-30))  # 0 log 0 = 0 (a normal float: FTZ flushes 1e-38)
            m = tl.maximum(m, tl.max(w, axis=1))
            s0 += tl.sum(w, axis=1)
            s1 += tl.sum(wlw, axis=1)
            s2 += tl.sum(w * w, axis=1)
            w_hi = _tf32(w)
            o = tl.dot(w_hi, v, o, input_precision=DOT_PREC)
            o = tl.dot(w - w_hi, v, o, input_precision=DOT_PREC)
        else:
            m, s0, s1, s2, al = _softmax_update(m, s0, s1, s2, _masked_max(s, ok))
            dx = s - m[:, None]
            e = tl.where(ok, tl.exp(dx), 0.0)
            s0 += tl.sum(e, axis=1)
            s1 += tl.sum(dx * e, axis=1)
            s2 += tl.sum(e * e, axis=1)
            e_hi = _tf32(e)
            o = tl.dot(e_hi, v, o * al[:, None], input_precision=DOT_PREC)
            o = tl.dot(e - e_hi, v, o, input_precision=DOT_PREC)
    W = 4 + dv
    out = part_ptr + (pc.to(tl.int64) * n_rows + rows) * W
    tl.store(out, m, mask=row_ok)
    tl.store(out + 1, s0, mask=row_ok)
    tl.store(out + 2, s1, mask=row_ok)
    tl.store(out + 3, s2, mask=row_ok)
    tl.store(out[:, None] + 4 + cols[None, :], o, mask=row_ok[:, None] & (cols[None, :] < dv))


@triton.jit
def _draw_vectors_kernel(k_ptr, v_ptr, seed_k, seed_v, n_keys, n_dch, BN: tl.constexpr, DCH: tl.constexpr,
                         DVP: tl.constexpr, FAST: tl.constexpr):
    """Replay: write the keys (n_keys, DCH n_dch) and values (n_keys, DVP) of the vectors kernel."""
    keys = tl.program_id(0) * BN + tl.arange(0, BN)
    key_ok = keys < n_keys
    DP = n_dch * DCH
    p = tl.arange(0, DCH)
    for c in range(0, n_dch):
        k = _key_tile(seed_k, keys, c, n_dch, DCH, FAST)
        tl.store(k_ptr + keys[:, None].to(tl.int64) * DP + c * DCH + p[None, :], k, mask=key_ok[:, None])
    cols = tl.arange(0, DVP)
    v = _value_tile(seed_v, keys, DVP, FAST)
    tl.store(v_ptr + keys[:, None].to(tl.int64) * DVP + cols[None, :], v, mask=key_ok[:, None])


@triton.jit
def _normals_kernel(out_ptr, seed, n, BLOCK: tl.constexpr, FAST: tl.constexpr):
    """4 n standard normals at counters 0 .. n-1 (the generator alone, for tests of its law)."""
    ctr = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = ctr < n
    n1, n2, n3, n4 = _normal4(seed, ctr, FAST)
    tl.store(out_ptr + ctr, n1, mask=ok)
    tl.store(out_ptr + n + ctr, n2, mask=ok)
    tl.store(out_ptr + 2 * n + ctr, n3, mask=ok)
    tl.store(out_ptr + 3 * n + ctr, n4, mask=ok)


@triton.jit
def _box_muller_kernel(w1_ptr, w2_ptr, out_ptr, n, BLOCK: tl.constexpr, FAST: tl.constexpr):
    """The transform alone on given uint32 words (as int64 in [0, 2^32)): out (2, n) (tests)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    w1 = tl.load(w1_ptr + i, mask=ok, other=0).to(tl.uint32)
    w2 = tl.load(w2_ptr + i, mask=ok, other=0).to(tl.uint32)
    a, b = _box_muller(w1, w2, FAST)
    tl.store(out_ptr + i, a, mask=ok)
    tl.store(out_ptr + n + i, b, mask=ok)


@triton.jit
def _tf32_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """The kernels' tf32 rounding alone on given float32 numbers (tests)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    tl.store(out_ptr + i, _tf32(tl.load(x_ptr + i, mask=ok, other=0.0)), mask=ok)


__all__ = ["ROW_COUNTERS"]  # the kernels are private: attncore.sweeps.fused launches them
