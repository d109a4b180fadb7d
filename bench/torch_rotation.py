#!/usr/bin/python3
"""PyTorch peer of the "Foundation" benchmark: LieRE rotation tables for one ViT-B attention layer.

Workload (float32, as the official LieRE code, StanfordMIMI/LieRE models/rope_vit.py LierePositionEncoder):
  * 12 heads, head dim 64, block size b in {2, 8, 64}: m = 64/b blocks per head, N = 12*m blocks in all.
  * T = 64 positions on an 8x8 grid in [0, 1]: per axis linspace(0, 1, 8), torch.cartesian_prod, first
    axis outermost (token t = (row/7, col/7) with t = 8*row + col). Dim = 2 position axes. No CLS token here.
  * Parameters W of shape (2, N, b, b), W ~ U[0, 2*pi) (official init).
  * Skew basis G = triu(W, 1) - 0.5, G <- G - G^T (the -0.5 cancels: G_ij = W_ij above the diagonal).
  * A(p) = sum_a p_a G_a, the official broadcast-multiply-and-sum, shape (64, N, b, b).
  * R = torch.matrix_exp(A) in float32, one batched call on (64, N, b, b) (the official one-shot path).

Timed:
  fwd       : build G, A, R from W under torch.no_grad()  (pure forward)
  fwd(grad) : the same with autograd recording (what a training forward pays)
  fwd+bwd   : forward, loss = (R * C).sum() with a fixed random C ~ N(0,1) of R's shape, loss.backward() to W
Median and min over --reps after --warmup.

Accuracy (float32 R):
  orth_unit : max |R^T R - I| over all tokens and blocks, positions on the unit grid above
  orth_int  : the same with integer positions (grid 0..7 per axis)
  orth_1e4  : the same with the generators scaled so that max over tokens/blocks of ||A(p)||_2 = 1e4
  err_*     : max |R_f32 - R_f64| against matrix_exp of the same A in float64 (context for orth_*)
  normA_*   : max spectral norm ||A(p)||_2 over tokens/blocks for the unit and the integer grid

Example:
  /usr/bin/python3 bench/torch_rotation.py --reps 20 --json build/bench/torch.jsonl
  /usr/bin/python3 bench/torch_rotation.py --selftest
"""

from __future__ import annotations

import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as tc  # noqa: E402

HEADS = 12
HEAD_DIM = 64
SIDE = 8
BLOCKS = (2, 8, 64)


def rotations(w: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """R(p) for every token and block: (T, N, b, b) from W (2, N, b, b)."""
    g = tc.skew_from_raw(w)
    a = tc.generators_at(positions, g)
    return torch.matrix_exp(a)


def orth_error(r: torch.Tensor) -> float:
    eye = torch.eye(r.shape[-1], dtype=r.dtype)
    return (r.transpose(-1, -2) @ r - eye).abs().max().item()


def spectral_max(a: torch.Tensor) -> float:
    return torch.linalg.matrix_norm(a.double(), ord=2).max().item()


def accuracy(w: torch.Tensor) -> dict:
    """Orthogonality of float32 R on the unit grid, the integer grid and generators scaled to ||A||_2 = 1e4."""
    out = {}
    with torch.no_grad():
        g = tc.skew_from_raw(w)
        for name, pos in (("unit", tc.grid_positions(SIDE)), ("int", tc.grid_positions(SIDE, integer=True))):
            a = tc.generators_at(pos, g)
            r = torch.matrix_exp(a)
            out[f"orth_{name}"] = orth_error(r)
            out[f"err_{name}"] = (r.double() - torch.matrix_exp(a.double())).abs().max().item()
            out[f"normA_{name}"] = spectral_max(a)
        a = tc.generators_at(tc.grid_positions(SIDE), g)
        scale = 1e4 / out["normA_unit"]
        a = a * scale
        r = torch.matrix_exp(a)
        out["orth_1e4"] = orth_error(r)
        out["err_1e4"] = (r.double() - torch.matrix_exp(a.double())).abs().max().item()
        out["normA_1e4"] = spectral_max(a)
    return out


def bench_block(args, env: dict, block: int) -> dict:
    m = HEAD_DIM // block
    n = HEADS * m
    gen = torch.Generator().manual_seed(args.seed + block)
    w = tc.liere_init(2, n, block=block, generator=gen).requires_grad_(True)
    pos = tc.grid_positions(SIDE)
    c = torch.randn(pos.shape[0], n, block, block, generator=gen)

    def fwd():
        with torch.no_grad():
            rotations(w, pos)

    def fwd_grad():
        rotations(w, pos)

    def fwdbwd():
        w.grad = None
        loss = (rotations(w, pos) * c).sum()
        loss.backward()

    t_f = tc.time_fn(fwd, args.reps, args.warmup)
    t_fg = tc.time_fn(fwd_grad, args.reps, args.warmup)
    t_fb = tc.time_fn(fwdbwd, args.reps, args.warmup)
    rec = {
        "bench": "rotation_tables", "impl": "torch", "block": block, "heads": HEADS, "tokens": pos.shape[0],
        "blocks_total": n,
        "fwd_ms": t_f["median_ms"], "fwd_min_ms": t_f["min_ms"],
        "fwd_grad_ms": t_fg["median_ms"], "fwd_grad_min_ms": t_fg["min_ms"],
        "fwdbwd_ms": t_fb["median_ms"], "fwdbwd_min_ms": t_fb["min_ms"],
        "fwd_cpu_ms": t_f["cpu_median_ms"], "fwdbwd_cpu_ms": t_fb["cpu_median_ms"],
    }
    rec.update(accuracy(w.detach()))
    rec["threads"] = env.get("threads")
    rec["peak_rss_mib"] = tc.peak_rss_mib()
    return rec


# --------------------------------------------------------------------------------------------------------------
# Self-test
# --------------------------------------------------------------------------------------------------------------


def selftest() -> bool:
    ok = True

    def check(name, cond, detail=""):
        nonlocal ok
        ok &= bool(cond)
        print(f"  [{'ok' if cond else 'FAIL'}] {name} {detail}")

    torch.manual_seed(0)
    # Positions: the official test (64x64 image, 16x16 patches) expects {0, 1/3, 2/3, 1}^2, first axis outermost.
    p4 = tc.grid_positions(4)
    expect = torch.tensor([[i / 3, j / 3] for i in range(4) for j in range(4)])
    check("positions 4x4 == {0,1/3,2/3,1}^2, first axis outermost", torch.allclose(p4, expect, atol=1e-7))
    p8 = tc.grid_positions(SIDE)
    check("positions 8x8: token 9 == (1/7, 1/7), token 15 == (1/7, 1)",
          torch.allclose(p8[9], torch.tensor([1 / 7, 1 / 7])) and torch.allclose(p8[15], torch.tensor([1 / 7, 1.0])))
    pi = tc.grid_positions(SIDE, integer=True)
    check("integer grid: token 13 == (1, 5)", torch.equal(pi[13], torch.tensor([1.0, 5.0])))

    # Skew basis: G = -G^T, G_ij = W_ij above the diagonal (the official -0.5 cancels).
    w = tc.liere_init(2, 5, block=8).double()
    g = tc.skew_from_raw(w)
    iu = torch.triu_indices(8, 8, 1)
    check("G skew", (g + g.transpose(-1, -2)).abs().max().item() == 0.0)
    check("G_ij == W_ij (i<j), diag 0",
          torch.equal(g[..., iu[0], iu[1]], w[..., iu[0], iu[1]]) and g.diagonal(dim1=-2, dim2=-1).abs().max() == 0)

    # A(p) = sum_a p_a G_a equals the einsum form.
    a = tc.generators_at(p8.double(), g)
    check("A(p) broadcast-sum == einsum", torch.allclose(a, torch.einsum("ta,anij->tnij", p8.double(), g)))

    # R orthogonal, det 1 (float64), and float32 close to float64 for the unit grid.
    for b in BLOCKS:
        w = tc.liere_init(2, HEADS * HEAD_DIM // b, block=b).double()
        r = rotations(w, p8.double())
        det = torch.linalg.det(r)
        check(f"b={b}: R^T R == I (f64)", orth_error(r) < 1e-10, f"max err {orth_error(r):.2e}")
        check(f"b={b}: det R == 1", (det - 1).abs().max().item() < 1e-8)
        r32 = rotations(w.float(), p8)
        e = (r32.double() - r).abs().max().item()
        check(f"b={b}: f32 vs f64 matrix_exp", e < 1e-3, f"max err {e:.2e}")

    # b = 2: closed form. G = [[0, w],[-w, 0]] -> exp(theta G) = [[cos, sin], [-sin, cos]] with theta = p.w.
    w = tc.liere_init(2, 3, block=2).double()
    r = rotations(w, p8.double())
    theta = torch.einsum("ta,an->tn", p8.double(), w[:, :, 0, 1])
    closed = torch.stack([torch.stack([theta.cos(), theta.sin()], -1), torch.stack([-theta.sin(), theta.cos()], -1)], -2)
    check("b=2: matrix_exp == closed-form plane rotation", torch.allclose(r, closed, atol=1e-12))

    # Relative-position identity R(p)^T R(q) == R(q - p): exact for commuting generators (b=2), not for b=8.
    def rel_err(b):
        w = tc.liere_init(2, 4, block=b).double()
        g = tc.skew_from_raw(w)
        pp, qq = p8.double()[10:11], p8.double()[50:51]
        rp = torch.matrix_exp(tc.generators_at(pp, g))
        rq = torch.matrix_exp(tc.generators_at(qq, g))
        rd = torch.matrix_exp(tc.generators_at(qq - pp, g))
        return (rp.transpose(-1, -2) @ rq - rd).abs().max().item()

    check("b=2: R(p)^T R(q) == R(q-p)", rel_err(2) < 1e-12, f"({rel_err(2):.1e})")
    e8 = rel_err(8)
    check("b=8: non-commuting generators are not relative (expected large deviation)", e8 > 1e-3, f"({e8:.2e})")

    # Gradient of (R*C).sum() wrt W: torch.autograd.gradcheck in float64 on a small table.
    w = tc.liere_init(2, 2, block=4).double().requires_grad_(True)
    c = torch.randn(5, 2, 4, 4, dtype=torch.float64)
    pos = p8.double()[:5] * 0.3
    f = lambda w_: (rotations(w_, pos) * c).sum()
    check("gradcheck d loss / d W (f64, b=4)", torch.autograd.gradcheck(f, (w,), eps=1e-6, atol=1e-6))
    return ok


def main() -> int:
    p = tc.make_parser(__doc__, reps=20, warmup=3)
    p.add_argument("--blocks", default=",".join(map(str, BLOCKS)), help="comma-separated block sizes (default 2,8,64)")
    args = p.parse_args()
    tc.quick_overrides(args, reps=3, warmup=1)
    env = tc.setup(args, "rotation tables, one ViT-B layer (12 heads x 64 tokens, head dim 64)")
    if args.selftest:
        ok = selftest()
        print("selftest:", "PASSED" if ok else "FAILED")
        return 0 if ok else 1
    rows = []
    for b in [int(x) for x in args.blocks.split(",")]:
        rec = bench_block(args, env, b)
        rows.append(rec)
        tc.emit_json(args, env, rec)
    print(f"\n  reps={args.reps}, warmup={args.warmup}; times are medians [min] in ms; float32")
    for r in rows:
        r["fwd_s"] = f"{r['fwd_ms']:.2f} [{r['fwd_min_ms']:.2f}]"
        r["fwdg_s"] = f"{r['fwd_grad_ms']:.2f} [{r['fwd_grad_min_ms']:.2f}]"
        r["fb_s"] = f"{r['fwdbwd_ms']:.2f} [{r['fwdbwd_min_ms']:.2f}]"
    tc.print_table(rows, [
        ("block", "block", "{}"), ("blocks_total", "N", "{}"),
        ("fwd_s", "fwd ms", "{}"), ("fwdg_s", "fwd(grad) ms", "{}"), ("fb_s", "fwd+bwd ms", "{}"),
        ("fwdbwd_cpu_ms", "fwd+bwd CPU ms", "{:.0f}"),
        ("orth_unit", "orth unit", "{:.1e}"), ("orth_int", "orth int", "{:.1e}"), ("orth_1e4", "orth 1e4", "{:.1e}"),
        ("err_unit", "err unit", "{:.1e}"), ("err_int", "err int", "{:.1e}"), ("err_1e4", "err 1e4", "{:.1e}"),
        ("normA_unit", "|A| unit", "{:.3g}"), ("normA_int", "|A| int", "{:.3g}"),
    ])
    print(f"  peak RSS {tc.peak_rss_mib():.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
