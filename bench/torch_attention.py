#!/usr/bin/python3
"""PyTorch peer of the "Every position encoding behind one interface" benchmark: one attention layer + its PE.

Workload (float32): B = 128, T = 65 tokens (CLS + an 8x8 patch grid), dim 192, 3 heads, head dim 64.
  x (B, T, 192) -> qkv = Linear(192 -> 576, bias) -> q, k, v (B, H, T, 64)   [reshape (B,T,3,H,64), permute]
  -> rotate q and k with the encoding (the CLS token, token 0, is never rotated)
  -> softmax(q k^T / sqrt(64)) v -> merge heads (B, T, 192) -> proj = Linear(192 -> 192, bias).
The encoding's tables (cis / rotation matrices) are recomputed inside every forward from its learnable
parameters, as rope-vit (RoPE-Mixed) and the official LieRE code do.
  fwd      : forward under torch.no_grad()
  fwd(grad): forward with autograd recording
  fwd+bwd  : forward, loss = (out * C).sum() with a fixed C ~ N(0,1), backward to x, both Linear layers' weights
             and biases and the encoding's parameters.
Median and min over --reps after --warmup; one child process per encoding so that the peak RSS is its own.

Encodings (--enc, comma-separated; default: none,rope-mixed,liere8,liere64,liere64-dense-official):
  none                    no rotation.
  rope-mixed              rope-vit (naver-ai/rope-vit deit/models_v2_rope.py): freqs Parameter (2, H, 32)
                          (stored as rope-vit's (2, depth, H*32)), init_random_2d_freqs with theta = 10
                          (mag_k = 10^(-4k/64), k = 0..15, a random direction alpha ~ U[0, 2pi) per head, pairs
                          0..15 along alpha and 16..31 along alpha + pi/2); integer grid t_x = t mod 8,
                          t_y = t div 8; angle of pair j = f_x[j] t_x + f_y[j] t_y; dims (2j, 2j+1) rotated as a
                          complex number (torch.polar, view_as_complex); CLS excluded by slicing + torch.cat.
  liere8                  LieRE, blocks of 8 (official init and positions, see torch_rotation.py): W (2, H*8, 8, 8),
                          R (T, H, 8, 8, 8) = matrix_exp, CLS generator 0 -> R = I; applied blockwise with one
                          einsum 'thkij,bhtkj->bhtki' on q viewed as (B, H, T, 8, 8) (a bmm over (t, h, k)).
  liere64                 LieRE, one dense 64x64 rotation per head and token: W (2, H, 64, 64), R (T, H, 64, 64),
                          applied batched: einsum 'thij,bhtj->bhti' (a bmm over (t, h) of (64x64) @ (64 x B)).
  liere64-dense-official  the official code's application path (StanfordMIMI/LieRE models/rope_vit.py,
                          FlexibleAttention.apply_transforms): R viewed (1, T, H, m, b, b), transposed to
                          (1, H, T, m, b, b), q reshaped to (B, H, T, m, b, 1) and torch.matmul(R, q): a
                          broadcasting matmul, i.e. B*H*T matrix-VECTOR products with R expanded over the batch;
                          then flatten and torch.cat with the (empty) unrotated dims. Same parameters and R as
                          liere64.
  liere8-official         (extra, not in the default set) the same official path with b = 8.

Example:
  /usr/bin/python3 bench/torch_attention.py --reps 10 --json build/bench/torch.jsonl
  /usr/bin/python3 bench/torch_attention.py --selftest
"""

from __future__ import annotations

import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as tc  # noqa: E402

DEFAULT_ENCODINGS = ["none", "rope-mixed", "liere8", "liere64", "liere64-dense-official"]
ALL_ENCODINGS = DEFAULT_ENCODINGS + ["liere8-official"]


# --------------------------------------------------------------------------------------------------------------
# RoPE-Mixed, rope-vit's formulation
# --------------------------------------------------------------------------------------------------------------


def rope_mixed_init(head_dim: int, heads: int, theta: float = 10.0, generator=None) -> torch.Tensor:
    """rope-vit init_random_2d_freqs: (2, heads, head_dim/2) = (f_x, f_y), restated."""
    mag = 1.0 / (theta ** (torch.arange(0, head_dim, 4)[: head_dim // 4].float() / head_dim))
    fx, fy = [], []
    for _ in range(heads):
        alpha = torch.rand(1, generator=generator) * 2 * math.pi
        fx.append(torch.cat([mag * torch.cos(alpha), mag * torch.cos(alpha + math.pi / 2)]))
        fy.append(torch.cat([mag * torch.sin(alpha), mag * torch.sin(alpha + math.pi / 2)]))
    return torch.stack([torch.stack(fx), torch.stack(fy)])


def rope_mixed_cis(freqs: torch.Tensor, t_x: torch.Tensor, t_y: torch.Tensor, heads: int) -> torch.Tensor:
    """rope-vit compute_mixed_cis: freqs (2, L, H*hd/2), t_x, t_y (N,) -> complex (L, H, N, hd/2)."""
    n = t_x.shape[0]
    depth = freqs.shape[1]
    fx = (t_x.unsqueeze(-1) @ freqs[0].unsqueeze(-2)).view(depth, n, heads, -1).permute(0, 2, 1, 3)
    fy = (t_y.unsqueeze(-1) @ freqs[1].unsqueeze(-2)).view(depth, n, heads, -1).permute(0, 2, 1, 3)
    return torch.polar(torch.ones_like(fx), fx + fy)


def rope_apply_complex(x: torch.Tensor, cis: torch.Tensor) -> torch.Tensor:
    """rope-vit apply_rotary_emb on (B, H, N, hd) with cis (H, N, hd/2): pairs (2j, 2j+1) as complex numbers."""
    xf = x if x.dtype == torch.float64 else x.float()  # rope-vit upcasts to float32 (float64 kept for selftest)
    xc = torch.view_as_complex(xf.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * cis.unsqueeze(0)).flatten(3).type_as(x)


# --------------------------------------------------------------------------------------------------------------
# One interface for every encoding: tables() once per forward, apply(table_of_layer, x) for q and for k
# --------------------------------------------------------------------------------------------------------------


class PositionEncoding(nn.Module):
    """kind in none | abs | rope-mixed | liere<b> | liere<b>-official | liere64-dense-official.

    tables() returns per-layer tables (leading dim = layers) computed from the parameters (once per forward);
    apply(table, x) rotates x (B, H, T, hd), T = 1 + side^2, leaving the CLS token (index 0) unchanged.
    "abs" rotates nothing; the model adds `self.table` (1, T, dim) to its tokens.
    """

    def __init__(self, kind: str, heads: int, head_dim: int, side: int, layers: int = 1, dim: int | None = None,
                 generator=None):
        super().__init__()
        self.kind, self.heads, self.head_dim, self.side, self.layers = kind, heads, head_dim, side, layers
        self.official = kind.endswith("-official")
        if kind == "none":
            pass
        elif kind == "abs":
            # Learned absolute table added to the tokens (official ViT: randn(1, N + 1, dim), std 1).
            self.table = nn.Parameter(torch.randn(1, side * side + 1, dim, generator=generator))
        elif kind == "rope-mixed":
            f = torch.stack([rope_mixed_init(head_dim, heads, generator=generator) for _ in range(layers)], dim=1)
            self.freqs = nn.Parameter(f.reshape(2, layers, heads * head_dim // 2))  # rope-vit layout
            t = tc.grid_positions(side, integer=True)  # t = 8*row + col; rope-vit: t_x = t mod W, t_y = t div W
            self.register_buffer("t_x", t[:, 1].contiguous())
            self.register_buffer("t_y", t[:, 0].contiguous())
        elif kind.startswith("liere"):
            b = int(kind[len("liere"):].split("-")[0])
            self.block = b
            self.m = head_dim // b
            # Official parameter shape (D, L', m', b, b) with per-layer and per-head rotations.
            self.w = nn.Parameter(tc.liere_init(2, layers, heads * self.m, block=b, generator=generator))
            self.register_buffer("pos", tc.grid_positions(side))
        else:
            raise ValueError(f"unknown encoding {kind}")

    def tables(self):
        if self.kind in ("none", "abs"):
            return None
        if self.kind == "rope-mixed":
            # rope-vit computes the table with autocast disabled ("No float 16 for this range"); under bf16
            # autocast the products would be bf16, which torch.polar refuses
            with torch.autocast(self.freqs.device.type, enabled=False):
                return rope_mixed_cis(self.freqs, self.t_x, self.t_y, self.heads)  # (L, H, N, hd/2) complex
        g = tc.skew_from_raw(self.w)                        # (2, L, H*m, b, b)
        a = tc.with_cls_identity(tc.generators_at(self.pos, g))  # (T, L, H*m, b, b), token 0 = CLS = 0
        # official: one-shot matrix_exp in float32 (float64 is kept for the selftest)
        r = torch.matrix_exp(a.to(torch.promote_types(a.dtype, torch.float32)))
        return r.transpose(0, 1)                            # (L, T, H*m, b, b) (a view)

    def apply(self, table, x: torch.Tensor) -> torch.Tensor:
        if table is None:
            return x
        if self.kind == "rope-mixed":
            return torch.cat((x[:, :, :1], rope_apply_complex(x[:, :, 1:], table)), dim=2)
        bsz, h, t, d = x.shape
        m, b = self.m, self.block
        if self.official:
            # FlexibleAttention.apply_transforms: R (1, T, H, m, b, b) -> (1, H, T, m, b, b); q -> (B, H, T, m, b, 1)
            rotatable, unrotatable = x[..., : m * b], x[..., m * b:]
            states = rotatable.reshape(bsz, h, t, m, b, 1)
            r = table.reshape(1, t, h, m, b, b).transpose(1, 2)
            rotated = torch.matmul(r, states)
            return torch.cat([rotated.flatten(start_dim=-3), unrotatable], dim=-1)
        r = table.reshape(t, h, m, b, b)
        return torch.einsum("thkij,bhtkj->bhtki", r, x.reshape(bsz, h, t, m, b)).reshape(bsz, h, t, d)


class AttentionLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.proj = nn.Linear(dim, dim, bias=True)

    def forward(self, x: torch.Tensor, enc: PositionEncoding, table) -> torch.Tensor:
        bsz, t, c = x.shape
        q, k, v = self.qkv(x).reshape(bsz, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = enc.apply(table, q), enc.apply(table, k)
        attn = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(bsz, t, c)
        return self.proj(out)


class Workload(nn.Module):
    """The timed module: encoding tables for one layer + that layer."""

    def __init__(self, kind: str, dim=192, heads=3, side=8, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed + 1)
        self.layer = AttentionLayer(dim, heads)
        self.enc = PositionEncoding(kind, heads, dim // heads, side, layers=1, generator=gen)

    def forward(self, x):
        tables = self.enc.tables()
        return self.layer(x, self.enc, None if tables is None else tables[0])


# --------------------------------------------------------------------------------------------------------------
# Benchmark
# --------------------------------------------------------------------------------------------------------------


B, T, DIM, HEADS, SIDE = 128, 65, 192, 3, 8


def bench_encoding(args, env: dict, kind: str) -> dict:
    model = Workload(kind, DIM, HEADS, SIDE, seed=args.seed)
    gen = torch.Generator().manual_seed(args.seed + 7)
    x = torch.randn(B, T, DIM, generator=gen).requires_grad_(True)
    c = torch.randn(B, T, DIM, generator=gen)
    params = list(model.parameters())

    def fwd():
        with torch.no_grad():
            model(x)

    def fwd_grad():
        model(x)

    def fwdbwd():
        x.grad = None
        for p_ in params:
            p_.grad = None
        (model(x) * c).sum().backward()

    t_f = tc.time_fn(fwd, args.reps, args.warmup)
    t_fg = tc.time_fn(fwd_grad, args.reps, args.warmup)
    t_fb = tc.time_fn(fwdbwd, args.reps, args.warmup)
    return {
        "bench": "attention_layer", "impl": "torch", "enc": kind, "B": B, "T": T, "dim": DIM, "heads": HEADS,
        "fwd_ms": t_f["median_ms"], "fwd_min_ms": t_f["min_ms"],
        "fwd_grad_ms": t_fg["median_ms"], "fwd_grad_min_ms": t_fg["min_ms"],
        "fwdbwd_ms": t_fb["median_ms"], "fwdbwd_min_ms": t_fb["min_ms"], "fwdbwd_cpu_ms": t_fb["cpu_median_ms"],
        "fwd_cpu_ms": t_f["cpu_median_ms"],
        "enc_params": sum(p_.numel() for p_ in model.enc.parameters()),
        "threads": env.get("threads"), "peak_rss_mib": tc.peak_rss_mib(),
    }


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
    dt = torch.float64
    bsz = 2
    x = torch.randn(bsz, HEADS, T, 64, dtype=dt)
    def make(kind, seed):
        enc = PositionEncoding(kind, HEADS, 64, SIDE, generator=torch.Generator().manual_seed(seed)).to(dt)
        if kind.startswith("liere"):
            enc.pos = tc.grid_positions(SIDE, dtype=dt)  # exact float64 grid for the relative-position test
        return enc

    encs = {k: make(k, 3) for k in ALL_ENCODINGS}

    # rope-vit init: magnitudes 10^(-4k/64); f_x^2 + f_y^2 = mag^2 for every pair; second half at alpha + pi/2.
    f = encs["rope-mixed"].freqs.detach().reshape(2, HEADS, 32)
    mag = 10.0 ** (-4.0 * torch.arange(16, dtype=dt) / 64)
    check("rope-mixed init: |(f_x, f_y)| == 10^(-4k/64)",
          torch.allclose((f[0] ** 2 + f[1] ** 2).sqrt(), torch.cat([mag, mag]).expand(HEADS, 32), atol=1e-6))
    check("rope-mixed init: second half orthogonal in direction",
          torch.allclose(f[0, :, :16] * f[0, :, 16:] + f[1, :, :16] * f[1, :, 16:],
                         torch.zeros(HEADS, 16, dtype=dt), atol=1e-6))

    # rope-mixed: complex multiply == explicit 2x2 rotation of pairs (2j, 2j+1) by f_x[j] t_x + f_y[j] t_y.
    e = encs["rope-mixed"]
    y = e.apply(e.tables()[0], x)
    ang = (e.t_x.to(dt)[None, :, None] * f[0][:, None, :] + e.t_y.to(dt)[None, :, None] * f[1][:, None, :])  # H,N,32
    x0, x1 = x[:, :, 1:, 0::2], x[:, :, 1:, 1::2]
    ref = torch.stack([x0 * ang.cos() - x1 * ang.sin(), x0 * ang.sin() + x1 * ang.cos()], dim=-1).flatten(-2)
    check("rope-mixed == explicit pair rotation", torch.allclose(y[:, :, 1:], ref, atol=1e-12))
    check("rope-mixed grid: t_x = t mod 8, t_y = t div 8",
          torch.equal(e.t_x, torch.arange(64.) % 8) and torch.equal(e.t_y, torch.div(torch.arange(64.), 8,
                                                                                       rounding_mode="floor")))

    # Relative-position property of rope-mixed at arbitrary real positions: <R(p)q, R(p')k> = f(p' - p).
    q1, k1 = torch.randn(1, HEADS, 1, 64, dtype=dt), torch.randn(1, HEADS, 1, 64, dtype=dt)

    def rot_at(v, px, py):
        cis = rope_mixed_cis(e.freqs, torch.tensor([px], dtype=dt), torch.tensor([py], dtype=dt), HEADS)[0]
        return rope_apply_complex(v, cis)

    d1 = (rot_at(q1, 1.0, 2.0) * rot_at(k1, 4.5, -1.0)).sum(-1)
    d2 = (rot_at(q1, 7.25, -3.0) * rot_at(k1, 10.75, -6.0)).sum(-1)
    d3 = (q1 * rot_at(k1, 3.5, -3.0)).sum(-1)
    check("rope-mixed: <R(p)q, R(p')k> depends only on p' - p", torch.allclose(d1, d2, atol=1e-10)
          and torch.allclose(d1, d3, atol=1e-10), f"(max diff {(d1 - d2).abs().max().item():.1e})")

    # On the grid through the real layer path (tokens (1,1),(2,3) vs (4,4),(5,6)): same dot products.
    xq = torch.randn(1, HEADS, 1, 64, dtype=dt).expand(1, HEADS, T, 64)
    xk = torch.randn(1, HEADS, 1, 64, dtype=dt).expand(1, HEADS, T, 64)
    tok = lambda r_, c_: 1 + 8 * r_ + c_
    for kind in ("rope-mixed", "liere2", "liere8"):
        enc = encs[kind] if kind in encs else make(kind, 5)
        tab = enc.tables()[0]
        rq, rk = enc.apply(tab, xq), enc.apply(tab, xk)
        a_ = (rq[:, :, tok(1, 1)] * rk[:, :, tok(2, 3)]).sum(-1)
        b_ = (rq[:, :, tok(4, 4)] * rk[:, :, tok(5, 6)]).sum(-1)
        err = (a_ - b_).abs().max().item()
        if kind == "liere8":
            check(f"{kind}: non-commuting, NOT relative on the grid (expected)", err > 1e-3, f"(diff {err:.2e})")
        else:
            check(f"{kind}: relative on the grid", err < 1e-9, f"(diff {err:.1e})")

    # Every encoding: CLS unchanged, norms preserved per token and per head.
    for kind, enc in encs.items():
        tab = enc.tables()
        y = enc.apply(None if tab is None else tab[0], x)
        check(f"{kind}: CLS token unchanged", torch.equal(y[:, :, 0], x[:, :, 0]))
        check(f"{kind}: |Rq| == |q| per token", torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-10))

    # LieRE: the blockwise einsum, the official broadcasting matmul and an explicit block-diagonal 64x64 agree.
    for b in (8, 64):
        e_ein = encs[f"liere{b}"]
        e_off = encs["liere64-dense-official" if b == 64 else "liere8-official"]
        e_off.w.data.copy_(e_ein.w.data)
        tab = e_ein.tables()[0]                               # (T, H*m, b, b)
        y_ein, y_off = e_ein.apply(tab, x), e_off.apply(e_off.tables()[0], x)
        m = 64 // b
        dense = torch.zeros(T, HEADS, 64, 64, dtype=dt)
        rr = tab.reshape(T, HEADS, m, b, b)
        for kk in range(m):
            dense[:, :, kk * b:(kk + 1) * b, kk * b:(kk + 1) * b] = rr[:, :, kk]
        y_ref = torch.einsum("thij,bhtj->bhti", dense, x)
        check(f"liere{b}: einsum == official broadcasting matmul == block-diagonal 64x64",
              torch.allclose(y_ein, y_off, atol=1e-12) and torch.allclose(y_ein, y_ref, atol=1e-12))
    check("liere64: CLS rotation is the identity",
          torch.allclose(encs["liere64"].tables()[0][0], torch.eye(64, dtype=dt).expand(HEADS, 64, 64)))

    # Gradients of the whole layer (x, weights, encoding params): directional finite differences in float64.
    for kind in ALL_ENCODINGS:
        model = Workload(kind, seed=11).to(dt)
        xx = torch.randn(2, T, DIM, dtype=dt, requires_grad=True)
        cc = torch.randn(2, T, DIM, dtype=dt)
        leaves = [xx] + list(model.parameters())
        loss = (model(xx) * cc).sum()
        grads = torch.autograd.grad(loss, leaves)
        dirs = [torch.randn_like(l_) for l_ in leaves]
        analytic = sum((g_ * d_).sum() for g_, d_ in zip(grads, dirs)).item()
        eps = 1e-6
        with torch.no_grad():
            for l_, d_ in zip(leaves, dirs):
                l_.add_(eps * d_)
            fp = (model(xx) * cc).sum().item()
            for l_, d_ in zip(leaves, dirs):
                l_.sub_(2 * eps * d_)
            fm = (model(xx) * cc).sum().item()
        numeric = (fp - fm) / (2 * eps)
        rel = abs(analytic - numeric) / max(1.0, abs(analytic), abs(numeric))
        check(f"{kind}: directional derivative (x, weights, PE params) vs central difference", rel < 1e-6,
              f"(rel err {rel:.1e})")
    return ok


def main() -> int:
    p = tc.make_parser(__doc__, reps=10, warmup=2, isolate=True)
    p.add_argument("--enc", default=",".join(DEFAULT_ENCODINGS),
                   help=f"comma-separated encodings among {', '.join(ALL_ENCODINGS)}")
    args = p.parse_args()
    tc.quick_overrides(args, reps=2, warmup=1)
    encs = [e for e in args.enc.split(",") if e]
    for e in encs:
        if e not in ALL_ENCODINGS:
            p.error(f"unknown encoding {e}")
    env = tc.setup(args, f"attention layer + PE (B={B}, T={T}, dim {DIM}, {HEADS} heads of 64)")
    if args.selftest:
        ok = selftest()
        print("selftest:", "PASSED" if ok else "FAILED")
        return 0 if ok else 1
    if args._child is None and len(encs) > 1 and not args.no_isolate:
        rows = tc.run_children(args, env, "--enc", encs)
    else:
        rows = []
        for e in encs:
            rec = bench_encoding(args, env, e)
            rows.append(rec)
            print(f"   {e}: fwd {rec['fwd_ms']:.1f} ms, fwd+bwd {rec['fwdbwd_ms']:.1f} ms", flush=True)
        if args._child is not None:
            tc.child_return(args, rows)
            return 0
    for r in rows:
        tc.emit_json(args, env, r)
        r["fwd_s"] = f"{r['fwd_ms']:.1f} [{r['fwd_min_ms']:.1f}]"
        r["fwdg_s"] = f"{r['fwd_grad_ms']:.1f} [{r['fwd_grad_min_ms']:.1f}]"
        r["fb_s"] = f"{r['fwdbwd_ms']:.1f} [{r['fwdbwd_min_ms']:.1f}]"
    print(f"\n  reps={args.reps}, warmup={args.warmup}; median [min] ms; float32; peak RSS per encoding"
          + (" (accumulated: --no-isolate)" if args.no_isolate else ""))
    tc.print_table(rows, [("enc", "encoding", "{}"), ("fwd_s", "fwd ms", "{}"), ("fwdg_s", "fwd(grad) ms", "{}"),
                          ("fb_s", "fwd+bwd ms", "{}"), ("fwdbwd_cpu_ms", "fwd+bwd CPU ms", "{:.0f}"),
                          ("enc_params", "PE params", "{}"),
                          ("peak_rss_mib", "peak RSS MiB", "{:.0f}")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
