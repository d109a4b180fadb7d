#!/usr/bin/python3
"""PyTorch peer of the ViT-Tiny training-step benchmark (images per second).

Model (float32, dropout 0): images 32x32x3, patch 4 -> 64 patches (patch vector in (p1 p2 c) order, as
einops "b c (h p1) (w p2) -> b (h w) (p1 p2 c)") -> Linear(48 -> 192); a learned CLS token is prepended
(token 0); depth 12 pre-norm blocks x = x + Attn(LN(x)); x = x + MLP(LN(x)), MLP = Linear(192 -> 768), GELU
(exact erf), Linear(768 -> 192); 3 heads of 64, qkv Linear(192 -> 576, bias), proj Linear(192 -> 192);
CLS pooling; head LayerNorm(192) + Linear(192 -> 100).

Encodings (--enc, comma-separated; default abs,rope-mixed,liere8,liere64), see torch_attention.py:
  abs         learned table (1, 65, 192) added to the tokens after the CLS concat (official ViT init randn, std 1).
  rope-mixed  rope-vit RoPE-Mixed, freqs (2, depth, heads*32) (per layer x head), integer grid, CLS not rotated;
              the cis table of all layers is computed once per forward (as rope-vit's forward_features).
  liere8      LieRE, blocks of 8, W (2, depth, heads*8, 8, 8), per layer x head, official init U[0, 2pi),
              positions linspace(0,1,8)^2, CLS identity; R of all layers by one matrix_exp per forward
              (the official one-shot path); applied blockwise with einsum.
  liere64     the same with one dense 64x64 block per head, W (2, depth, heads, 64, 64), applied batched
              with einsum.
  (extra, not default: liere64-dense-official, liere8-official: the official broadcasting-matmul application.)
  Layer i uses its own rotations. (The official code's Transformer.forward collapses per-layer rotations to
  layer 0 -- peers.md section 3.1 -- but computes all of them anyway, so the cost is the same.)

Step: Adam(lr 1e-4, betas (0.9, 0.999), eps 1e-8, no weight decay), cross-entropy on random data:
  opt.zero_grad(set_to_none=True); loss = CE(model(x), y); loss.backward(); opt.step()
on one fixed batch B = 128 of x ~ N(0, 1), y ~ U{0..99} (data loading is not timed).
After --warmup steps, --steps steps are timed one by one; images/s = B * steps / total time. Peak RSS per
encoding (one child process per encoding).

Example:
  /usr/bin/python3 bench/torch_vit_step.py --steps 10 --json build/bench/torch.jsonl
  /usr/bin/python3 bench/torch_vit_step.py --selftest
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as tc  # noqa: E402
from torch_attention import ALL_ENCODINGS, AttentionLayer, PositionEncoding  # noqa: E402

DEFAULT_ENCODINGS = ["abs", "rope-mixed", "liere8", "liere64"]
VIT_ENCODINGS = ["abs", "none"] + [e for e in ALL_ENCODINGS if e != "none"]


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = AttentionLayer(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x, enc, table):
        x = x + self.attn(self.norm1(x), enc, table)
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, enc: str, image=32, patch=4, channels=3, dim=192, depth=12, heads=3, mlp=768,
                 classes=100, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.patch = patch
        side = image // patch
        self.patch_embed = nn.Linear(patch * patch * channels, dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.enc = PositionEncoding(enc, heads, dim // heads, side, layers=depth, dim=dim,
                                    generator=torch.Generator().manual_seed(seed + 1))
        self.blocks = nn.ModuleList([Block(dim, heads, mlp) for _ in range(depth)])
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, classes))

    def forward(self, img):
        b, c, h, w = img.shape
        p = self.patch
        # "b c (h p1) (w p2) -> b (h w) (p1 p2 c)"
        x = img.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), -1)
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(b, -1, -1), x), dim=1)
        if self.enc.kind == "abs":
            x = x + self.enc.table
        tables = self.enc.tables()  # all layers at once, once per forward
        for i, blk in enumerate(self.blocks):
            x = blk(x, self.enc, None if tables is None else tables[i])
        return self.head(x[:, 0])


B, CLASSES = 128, 100


def make_step(model, x, y, autocast_dtype=None):
    """One training step. autocast_dtype (torch.bfloat16 or torch.float16): the forward and the loss under
    torch.autocast on x's device, the backward and the optimizer outside it, as PyTorch's mixed-precision recipe
    (fp32 weights; bf16 needs no GradScaler, float16 gets torch.cuda.amp.GradScaler: dynamic loss scaling, as
    liere's --precision fp16)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    scaler = torch.cuda.amp.GradScaler() if autocast_dtype == torch.float16 else None

    def step():
        opt.zero_grad(set_to_none=True)
        if autocast_dtype is None:
            loss = F.cross_entropy(model(x), y)
        else:
            with torch.autocast(x.device.type, dtype=autocast_dtype):
                loss = F.cross_entropy(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    return step


def bench_encoding(args, env: dict, kind: str) -> dict:
    model = ViT(kind, seed=args.seed)
    gen = torch.Generator().manual_seed(args.seed + 7)
    x = torch.randn(B, 3, 32, 32, generator=gen)
    y = torch.randint(0, CLASSES, (B,), generator=gen)
    step = make_step(model, x, y)
    for _ in range(args.warmup):
        step()
    times, cpu = [], []
    loss = None
    for _ in range(args.steps):
        c0 = time.process_time()
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    total = sum(times)
    return {
        "bench": "vit_tiny_step", "impl": "torch", "enc": kind, "B": B, "steps": args.steps, "warmup": args.warmup,
        "img_per_s": B * args.steps / total, "img_per_s_best": B / min(times), "step_ms": 1e3 * total / args.steps,
        "step_median_ms": 1e3 * statistics.median(times), "step_min_ms": 1e3 * min(times),
        "step_cpu_ms": 1e3 * statistics.median(cpu),
        "params": sum(p.numel() for p in model.parameters()),
        "enc_params": sum(p.numel() for p in model.enc.parameters()),
        "final_loss": float(loss) if loss is not None else None,
        "threads": env.get("threads"), "peak_rss_mib": tc.peak_rss_mib(),
    }


def selftest() -> bool:
    ok = True

    def check(name, cond, detail=""):
        nonlocal ok
        ok &= bool(cond)
        print(f"  [{'ok' if cond else 'FAIL'}] {name} {detail}")

    # Patch order: token 1 + 8*row + col holds pixels [4row:4row+4, 4col:4col+4], flattened (p1 p2 c).
    img = torch.randn(2, 3, 32, 32)
    m = ViT("none", depth=1)
    b, c, h, w = img.shape
    x = img.reshape(b, c, 8, 4, 8, 4).permute(0, 2, 4, 3, 5, 1).reshape(b, 64, -1)
    ref = img[1, :, 8:12, 20:24].permute(1, 2, 0).reshape(-1)  # row 2, col 5
    check("patchify: token (2,5) = pixels [8:12, 20:24] in (p1 p2 c) order", torch.equal(x[1, 2 * 8 + 5], ref))

    # Shapes and parameter counts.
    for kind in DEFAULT_ENCODINGS:
        m = ViT(kind, depth=2)
        out = m(torch.randn(3, 3, 32, 32))
        check(f"{kind}: logits shape (3, 100)", tuple(out.shape) == (3, 100))
    m = ViT("liere64")
    check("liere64: W is (2, depth, heads, 64, 64) = per layer x head", tuple(m.enc.w.shape) == (2, 12, 3, 64, 64))
    m = ViT("rope-mixed")
    check("rope-mixed: freqs (2, depth, heads*32)", tuple(m.enc.freqs.shape) == (2, 12, 96))
    n_abs = sum(p.numel() for p in ViT("abs").parameters())
    per_block = 2 * 2 * 192 + (192 * 576 + 576) + (192 * 192 + 192) + (192 * 768 + 768) + (768 * 192 + 192)
    expect = (48 * 192 + 192) + 192 + 65 * 192 + 12 * per_block + (2 * 192 + 192 * 100 + 100)
    check("abs ViT-Tiny parameter count", n_abs == expect, f"({n_abs} == {expect})")

    # Every layer's rotations get a gradient (no per-layer collapse).
    for kind in ("liere8", "rope-mixed"):
        m = ViT(kind, depth=2)
        xx = torch.randn(4, 3, 32, 32)
        F.cross_entropy(m(xx), torch.tensor([1, 2, 3, 4])).backward()
        g = m.enc.w.grad if kind.startswith("liere") else m.enc.freqs.grad
        per_layer = g.abs().flatten(2).sum(-1).sum(0) if kind.startswith("liere") else g.abs().sum(-1).sum(0)
        check(f"{kind}: every layer's PE parameters get a gradient", bool((per_layer > 0).all()),
              f"({[f'{v:.1e}' for v in per_layer.tolist()]})")

    # A few Adam steps on one small fixed batch lower the loss.
    for kind in DEFAULT_ENCODINGS:
        torch.manual_seed(0)
        m = ViT(kind, depth=1)
        xx = torch.randn(8, 3, 32, 32)
        yy = torch.randint(0, 100, (8,))
        step = make_step(m, xx, yy)
        l0 = float(step())
        for _ in range(7):
            l1 = float(step())
        check(f"{kind}: 8 Adam steps on a fixed batch lower the loss", l1 < l0, f"({l0:.3f} -> {l1:.3f})")
    return ok


def main() -> int:
    p = tc.make_parser(__doc__, reps=None, warmup=2, isolate=True)
    p.add_argument("--steps", type=int, default=10, help="timed training steps (default 10)")
    p.add_argument("--enc", default=",".join(DEFAULT_ENCODINGS),
                   help=f"comma-separated encodings among {', '.join(VIT_ENCODINGS)}")
    args = p.parse_args()
    if args.quick:
        args.steps = min(args.steps, 2)
        args.warmup = min(args.warmup, 1)
    args.reps = args.steps
    encs = [e for e in args.enc.split(",") if e]
    for e in encs:
        if e not in VIT_ENCODINGS:
            p.error(f"unknown encoding {e}")
    env = tc.setup(args, f"ViT-Tiny training step (B={B}, 32x32, patch 4, dim 192, depth 12, 3 heads, MLP 768)")
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
            print(f"   {e}: {rec['img_per_s']:.1f} img/s ({rec['step_ms']:.0f} ms/step), "
                  f"peak RSS {rec['peak_rss_mib']:.0f} MiB", flush=True)
        if args._child is not None:
            tc.child_return(args, rows)
            return 0
    for r in rows:
        tc.emit_json(args, env, r)
    print(f"\n  steps={args.steps} after warmup={args.warmup}; float32; peak RSS per encoding"
          + (" (accumulated: --no-isolate)" if args.no_isolate else ""))
    tc.print_table(rows, [("enc", "encoding", "{}"), ("img_per_s", "img/s", "{:.1f}"),
                          ("img_per_s_best", "img/s (best step)", "{:.1f}"),
                          ("step_ms", "mean step ms", "{:.0f}"), ("step_min_ms", "min step ms", "{:.0f}"),
                          ("step_cpu_ms", "step CPU ms", "{:.0f}"), ("params", "params", "{}"),
                          ("enc_params", "PE params", "{}"), ("peak_rss_mib", "peak RSS MiB", "{:.0f}")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
