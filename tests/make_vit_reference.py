#!/usr/bin/python3
"""Writes tests/data/vit_reference.safetensors: a tiny ViT with LieRE (block 8, sharing layer-head), computed in
float64 by plain PyTorch exactly as liere's C++ ViT computes it, with fixed weights and inputs: the reference
that the C++ ViT test checks the forward (logits, loss) and the backward (every parameter gradient) against.

    /usr/bin/python3 tests/make_vit_reference.py            (Debian's torch 1.13, CPU)
    /usr/bin/python3 tests/make_vit_reference.py --check    also gradcheck / finite differences / a float32 run

The model (timm VisionTransformer conventions, pre-norm, no dropout, no absolute pos_embed):
    images (B, 3, 16, 16) -> Conv2d patch 4 -> tokens (B, 16, 32) row-major over (h, w) -> [CLS] + tokens (B, 17, 32)
    per block l:  x += proj(attn_l(norm1(x)));  x += fc2(gelu(fc1(norm2(x))))     LayerNorm eps 1e-6, exact GELU
    norm(x)[:, 0] -> head -> logits (B, 10);  loss = mean cross-entropy
Attention: qkv Linear -> (B, T, 3, H, D), H = 2, D = 16. q and k of head h in layer l are rotated by parameter set
s = l*H + h (sharing layer-head): q^ = R_s(p_t) q (q a column of D values), likewise k; v is not rotated;
scores = q^ k^T / sqrt(D), softmax over keys, heads concatenated in head order, then proj.
LieRE (include/liere/pe/liere.hpp): pe.generators (sets, 2 axes, D/8 blocks, 28) holds, per block, the strict upper
triangle row-major (0,1),(0,2),...,(0,7),(1,2),...,(6,7) of an 8x8 skew matrix A: A[r][c] = w, A[c][r] = -w (r < c).
R_s(p) = block_diag_k expm(p_0 A_{s,0,k} + p_1 A_{s,1,k}). Patch n = t - 1 sits at grid (i, j) = (n // 4, n % 4) and
position p = (i/3, j/3) (axis 0 = row; the training grid spans [0, 1]); the CLS token (t = 0) at 0: the identity.

File (safetensors, little-endian, header JSON padded with spaces to a multiple of 8, every tensor F64):
    <parameter name>       every parameter (timm state_dict names, plus pe.generators)
    input.images (4, 3, 16, 16), input.labels (4) (integers in [0, 10) stored as F64)
    ref.logits (4, 10), ref.loss (1)
    grad.<parameter name>  d loss / d parameter
"""
import argparse
import json
import math
import os
import struct
from collections import OrderedDict

import torch
import torch.nn.functional as F

CFG = OrderedDict(
    batch=4, channels=3, image=16, patch=4, dim=32, depth=2, heads=2, mlp_hidden=128, classes=10, block=8,
    ln_eps=1e-6, seed=0,
)


def so_dim(n):
    return n * (n - 1) // 2


def param_shapes(c):
    C, hid, d = c["dim"], c["mlp_hidden"], c["dim"] // c["heads"]
    s = OrderedDict()
    s["patch_embed.proj.weight"] = (C, c["channels"], c["patch"], c["patch"])
    s["patch_embed.proj.bias"] = (C,)
    s["cls_token"] = (1, 1, C)
    s["pe.generators"] = (c["depth"] * c["heads"], 2, d // c["block"], so_dim(c["block"]))
    for l in range(c["depth"]):
        b = "blocks.%d." % l
        s[b + "norm1.weight"] = (C,)
        s[b + "norm1.bias"] = (C,)
        s[b + "attn.qkv.weight"] = (3 * C, C)
        s[b + "attn.qkv.bias"] = (3 * C,)
        s[b + "attn.proj.weight"] = (C, C)
        s[b + "attn.proj.bias"] = (C,)
        s[b + "norm2.weight"] = (C,)
        s[b + "norm2.bias"] = (C,)
        s[b + "mlp.fc1.weight"] = (hid, C)
        s[b + "mlp.fc1.bias"] = (hid,)
        s[b + "mlp.fc2.weight"] = (C, hid)
        s[b + "mlp.fc2.bias"] = (C,)
    s["norm.weight"] = (C,)
    s["norm.bias"] = (C,)
    s["head.weight"] = (c["classes"], C)
    s["head.bias"] = (c["classes"],)
    return s


def make_values(c):
    """Parameters and inputs, drawn in a fixed order from one seeded generator (float64)."""
    gen = torch.Generator().manual_seed(c["seed"])
    params = OrderedDict()
    for name, shape in param_shapes(c).items():
        if name == "pe.generators":
            v = torch.rand(shape, generator=gen, dtype=torch.float64) * (2 * math.pi)  # U[0, 2pi), the paper's init
        elif "norm" in name and name.endswith(".weight"):
            v = 1 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith(".bias"):
            v = 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:
            v = 0.2 * torch.randn(shape, generator=gen, dtype=torch.float64)
        params[name] = v
    images = torch.randn((c["batch"], c["channels"], c["image"], c["image"]), generator=gen, dtype=torch.float64)
    labels = torch.randint(0, c["classes"], (c["batch"],), generator=gen)
    return params, images, labels


def hat_index(b):
    """(rows, cols) of the strict upper triangle, row-major: include/liere/lie/hat.hpp."""
    rows, cols = [], []
    for r in range(b):
        for cc in range(r + 1, b):
            rows.append(r)
            cols.append(cc)
    return torch.tensor(rows), torch.tensor(cols)


def positions(c, dtype):
    """(T, 2): CLS at 0, then patch n at (n // g, n % g) / (g - 1) (include/liere/pe/positions.hpp, unit range)."""
    g = c["image"] // c["patch"]
    pos = [(0.0, 0.0)] + [((n // g) / (g - 1), (n % g) / (g - 1)) for n in range(g * g)]
    return torch.tensor(pos, dtype=dtype)


def rotations(w, pos, b):
    """w (sets, 2, nb, b(b-1)/2), pos (T, 2) -> R (sets, T, nb, b, b) = expm(sum_a p_a A_a) per block."""
    sets, dim, nb, _ = w.shape
    r, cidx = hat_index(b)
    a = torch.zeros(sets, dim, nb, b, b, dtype=w.dtype)
    a[..., r, cidx] = w
    a[..., cidx, r] = -w
    gen = torch.einsum("ta,sakrc->stkrc", pos, a)
    return torch.matrix_exp(gen.contiguous())


def forward(c, p, images, labels):
    B, C, H = images.shape[0], c["dim"], c["heads"]
    D = C // H
    b = c["block"]
    nb = D // b
    x = F.conv2d(images, p["patch_embed.proj.weight"], p["patch_embed.proj.bias"], stride=c["patch"])
    x = x.flatten(2).transpose(1, 2)  # (B, N, C), row-major over (h, w)
    x = torch.cat([p["cls_token"].expand(B, -1, -1), x], dim=1)
    T = x.shape[1]
    rot = rotations(p["pe.generators"], positions(c, x.dtype), b)  # (sets, T, nb, b, b)
    for l in range(c["depth"]):
        pre = "blocks.%d." % l
        h = F.layer_norm(x, (C,), p[pre + "norm1.weight"], p[pre + "norm1.bias"], c["ln_eps"])
        qkv = F.linear(h, p[pre + "attn.qkv.weight"], p[pre + "attn.qkv.bias"]).reshape(B, T, 3, H, D)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (B, T, H, D)
        rl = rot[l * H:(l + 1) * H]  # (H, T, nb, b, b): set s = l*H + h
        q = torch.einsum("htkrc,bthkc->bthkr", rl, q.reshape(B, T, H, nb, b)).reshape(B, T, H, D)
        k = torch.einsum("htkrc,bthkc->bthkr", rl, k.reshape(B, T, H, nb, b)).reshape(B, T, H, D)
        scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D)
        probs = scores.softmax(dim=-1)
        out = torch.einsum("bhts,bshd->bthd", probs, v).reshape(B, T, C)
        x = x + F.linear(out, p[pre + "attn.proj.weight"], p[pre + "attn.proj.bias"])
        h = F.layer_norm(x, (C,), p[pre + "norm2.weight"], p[pre + "norm2.bias"], c["ln_eps"])
        h = F.gelu(F.linear(h, p[pre + "mlp.fc1.weight"], p[pre + "mlp.fc1.bias"]))
        x = x + F.linear(h, p[pre + "mlp.fc2.weight"], p[pre + "mlp.fc2.bias"])
    x = F.layer_norm(x, (C,), p["norm.weight"], p["norm.bias"], c["ln_eps"])
    logits = F.linear(x[:, 0], p["head.weight"], p["head.bias"])
    return logits, F.cross_entropy(logits, labels)


def run(c, params, images, labels, dtype=torch.float64):
    p = OrderedDict((n, v.to(dtype).clone().requires_grad_(True)) for n, v in params.items())
    logits, loss = forward(c, p, images.to(dtype), labels)
    loss.backward()
    return logits.detach(), loss.detach(), OrderedDict((n, v.grad) for n, v in p.items())


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = OrderedDict(), [], 0
    header["__metadata__"] = metadata
    for name, t in tensors.items():
        data = t.detach().to(torch.float64).contiguous().numpy().astype("<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode("ascii")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for d in blobs:
            f.write(d)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


def check(c, params, images, labels, logits, loss, grads):
    # 1. torch.autograd.gradcheck of the whole loss w.r.t. a few parameter tensors (the others fixed)
    for name in ["pe.generators", "cls_token", "blocks.1.attn.qkv.bias", "blocks.0.norm1.weight"]:
        def f(t, name=name):
            p = OrderedDict(params)
            p[name] = t
            return forward(c, p, images, labels)[1]
        ok = torch.autograd.gradcheck(f, (params[name].clone().requires_grad_(True),), eps=1e-6, atol=1e-8, rtol=1e-6)
        print("gradcheck %-28s %s" % (name, ok))
    # 2. central finite differences along a random direction, for every parameter
    gen = torch.Generator().manual_seed(1)
    eps, worst = 1e-5, 0.0
    for name, v in params.items():
        d = torch.randn(v.shape, generator=gen, dtype=torch.float64)
        pp, pm = OrderedDict(params), OrderedDict(params)
        pp[name], pm[name] = v + eps * d, v - eps * d
        fd = (forward(c, pp, images, labels)[1] - forward(c, pm, images, labels)[1]).item() / (2 * eps)
        an = (grads[name] * d).sum().item()
        err = abs(fd - an) / max(abs(an), 1e-12)
        worst = max(worst, err)
        print("fd  %-28s analytic % .10e  finite-diff % .10e  rel %.1e" % (name, an, fd, err))
    print("finite differences: max relative difference %.2e" % worst)
    # 3. the same model in float32
    l32, s32, g32 = run(c, params, images, labels, torch.float32)
    print("float32 vs float64: logits rel %.2e  loss rel %.2e  grads max rel %.2e" % (
        rel(l32.double(), logits), rel(s32.double().reshape(1), loss.reshape(1)),
        max(rel(g32[n].double(), grads[n]) for n in grads)))
    # 4. the rotations: orthogonal, the identity for CLS, R(p)R(-p) = I
    rot = rotations(params["pe.generators"], positions(c, torch.float64), c["block"])
    eye = torch.eye(c["block"], dtype=torch.float64)
    print("rotations: |R R^T - I| %.1e  |R(cls) - I| %.1e" % (
        (rot @ rot.transpose(-1, -2) - eye).abs().max().item(), (rot[:, 0] - eye).abs().max().item()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="gradcheck, finite differences and a float32 run")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                                                  "vit_reference.safetensors"))
    args = ap.parse_args()
    c = CFG
    params, images, labels = make_values(c)
    logits, loss, grads = run(c, params, images, labels)

    tensors = OrderedDict(params)
    tensors["input.images"] = images
    tensors["input.labels"] = labels.to(torch.float64)
    tensors["ref.logits"] = logits
    tensors["ref.loss"] = loss.reshape(1)
    for n, g in grads.items():
        tensors["grad." + n] = g
    meta = OrderedDict()
    meta["format"] = "liere-vit-reference-1"
    meta["description"] = ("tiny pre-norm ViT (timm conventions, no pos_embed) with LieRE block %d, sharing "
                           "layer-head (set = layer*heads + head), positions (i/(g-1), j/(g-1)), CLS at 0 (identity); "
                           "float64 forward and backward of mean cross-entropy; written by tests/make_vit_reference.py"
                           % c["block"])
    meta["torch"] = torch.__version__
    for k, v in c.items():
        meta["cfg." + k] = repr(v)
    meta["init"] = ("weights N(0, 0.2^2), LayerNorm weights 1 + N(0, 0.1^2), biases N(0, 0.1^2), pe.generators "
                    "U[0, 2pi), images N(0, 1), labels uniform in [0, classes)")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    write_safetensors(args.out, tensors, meta)

    print("wrote %s (%d bytes, %d tensors, torch %s)" % (args.out, os.path.getsize(args.out), len(tensors),
                                                         torch.__version__))
    print("loss %.17g  labels %s" % (loss.item(), labels.tolist()))
    for n, g in grads.items():
        print("|grad %-28s| = %.6e" % (n, g.norm().item()))
    if args.check:
        check(c, params, images, labels, logits, loss, grads)


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
