#!/usr/bin/python3
"""Tests of liere's PyTorch operators (python/, docs/torch.md): torch.ops.liere.so_exp, rotation_tables and the
drop-in LierePositionEncoder.

Run by CTest (test liere_torch) with PYTHONPATH=<repo>/python and LIERE_TORCH_LIBRARY=<the built library>; exits
77 (CTest: Skipped) when torch cannot be imported or the library was not built. Usable by hand:

    PYTHONPATH=python LIERE_TORCH_LIBRARY=build/python/liere_torch/libliere_torch.so /usr/bin/python3 \\
        tests/liere_torch_test.py [-v] [-k name]

What is checked:
  * values against torch.matrix_exp in float64 (1e-12 for ||A|| <= 10; 1e-12 * ||A|| beyond);
  * gradients two ways: torch.autograd.gradcheck in float64 (b = 2, 3, 4, 8, 16 full; b = 64 fast mode, the
    full Jacobian at b = 64 costing minutes) and against torch.matrix_exp's autograd gradient with a random
    cotangent (1e-10 relative), for both operators and for positions too;
  * float32 orthogonality max|R^T R - I| <= 1e-6 for generator norms 1 ... 1e4 (torch.matrix_exp's printed beside);
  * a state dict of the official encoder's layout (written here from the official formulas) loads unchanged into
    liere_torch.LierePositionEncoder, whose outputs and gradients match the official computation;
  * bad input: the operator's name and what was expected in a RuntimeError, never a crash; a library built for
    another libtorch version: ImportError at load.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SKIP = 77
try:
    import torch
    import torch.nn as nn
except ImportError as e:  # the core library's tests never need PyTorch
    print(f"skipped: PyTorch is not importable by {sys.executable}: {e}")
    sys.exit(SKIP)
if os.environ.get("LIERE_TORCH_LIBRARY") == "none":  # set by CMake when it built no library
    print("skipped: liere was configured without libtorch (LIERE_WITH_TORCH found no Torch or is OFF)")
    sys.exit(SKIP)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import liere_torch  # noqa: E402
from liere_torch import _load  # noqa: E402

F64 = torch.float64
BLOCKS = (2, 3, 4, 8, 16, 64)


def random_skew(*shape, b, norm=None, dtype=F64, gen=None):
    """Skew-symmetric (…, b, b); with norm: each matrix scaled to spectral norm `norm`."""
    w = torch.randn(*shape, b, b, dtype=F64, generator=gen)
    a = w - w.transpose(-1, -2)
    if norm is not None:
        a = a / torch.linalg.matrix_norm(a, ord=2)[..., None, None] * norm
    return a.to(dtype)


def exact_exp(a):
    """exp(A) of skew-symmetric float64 A from the eigendecomposition of the Hermitian matrix -iA (independent of
    matrix_exp: torch 1.13's float64 matrix_exp is off by up to 2e-10 near ||A|| = 0.05 and 2e-8 near 3)."""
    lam, v = torch.linalg.eigh(-1j * a.to(torch.complex128))
    return ((v * torch.exp(1j * lam).unsqueeze(-2)) @ v.mH).real


class Float32Exp:
    """with Float32Exp("double"): ...  runs the block with liere's float32 exponential mode set, then restores it."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        self.saved = liere_torch.float32_exp()
        liere_torch.set_float32_exp(self.mode)

    def __exit__(self, *exc):
        liere_torch.set_float32_exp(self.saved)


def orth_error(r):
    r = r.double()
    eye = torch.eye(r.shape[-1], dtype=F64)
    return (r.transpose(-1, -2) @ r - eye).abs().max().item()


# ---- the official encoder's computation (StanfordMIMI/LieRE models/rope_vit.py, restated from
#      /work/shared/reference/peers.md §2.1) -----------------------------------------------------------------

class OfficialLiereEncoder(nn.Module):
    """The official parametrisation and forward: W (D, L', m', b, b) ~ U[0, 2pi); U = triu(W, 1) - 0.5;
    G = U - U^T; A(p) = sum_a p_a G_a broadcast over (1, N, D, L', m', b, b) and summed over D; CLS zero generator
    prepended; R = matrix_exp per layer slice of A rounded to float32, then cast to dtype."""

    def __init__(self, image_size, patch_size, dim, heads, input_dimensionality, generator_dim, depth,
                 per_layer, per_head):
        super().__init__()
        self.patch = [patch_size] * input_dimensionality
        self.size = [image_size] * input_dimensionality
        self.expected = [s // p for s, p in zip(self.size, self.patch)]
        m = (dim // heads) // generator_dim * (heads if per_head else 1)
        layers = depth if per_layer else 1
        self.generator_raw_params = nn.Parameter(
            torch.rand(input_dimensionality, layers, m, generator_dim, generator_dim) * 2 * math.pi)
        self.generator_transform = nn.Identity()

    def positions(self, image_size):
        steps = [math.ceil(s / p) for s, p in zip(image_size, self.patch)]
        return torch.cartesian_prod(*(torch.linspace(0, n / e, n) for n, e in zip(steps, self.expected))).unsqueeze(0)

    def forward(self, image_sizes, dtype, round_to_float32=True, expm=torch.matrix_exp):
        pos = self.positions(image_sizes.tolist()[0])
        upper = self.generator_transform(torch.triu(self.generator_raw_params, diagonal=1)) - 0.5
        bases = upper - upper.transpose(-1, -2)
        a = (pos.reshape(list(pos.shape) + [1] * 4) * bases).sum(dim=-5)
        a = torch.cat((torch.zeros_like(a[:, 0]).unsqueeze(1), a), dim=1)
        out = []
        for i in range(a.shape[2]):
            ai = a[:, :, i:i + 1]
            ai = ai.to(torch.float32).contiguous().to(dtype) if round_to_float32 else ai.to(dtype).contiguous()
            out.append(expm(ai))
        return torch.cat(out, dim=2)


OFFICIAL_ARGS = dict(image_size=32, patch_size=8, dim=128, heads=2, input_dimensionality=2, depth=3)


def liere_encoder(generator_dim, per_layer=True, per_head=True):
    return liere_torch.LierePositionEncoder(
        OFFICIAL_ARGS["image_size"], OFFICIAL_ARGS["patch_size"], OFFICIAL_ARGS["dim"], "learned", "sequential",
        OFFICIAL_ARGS["heads"], OFFICIAL_ARGS["input_dimensionality"], generator_dim, OFFICIAL_ARGS["depth"],
        per_layer, per_head)


def official_encoder(generator_dim, per_layer=True, per_head=True):
    return OfficialLiereEncoder(OFFICIAL_ARGS["image_size"], OFFICIAL_ARGS["patch_size"], OFFICIAL_ARGS["dim"],
                                OFFICIAL_ARGS["heads"], OFFICIAL_ARGS["input_dimensionality"], generator_dim,
                                OFFICIAL_ARGS["depth"], per_layer, per_head)


# ---- tests ---------------------------------------------------------------------------------------------------

class SoExp(unittest.TestCase):
    def test_values_against_matrix_exp_float64(self):
        # liere against torch.matrix_exp to 1e-12 beyond matrix_exp's own error (measured against the
        # eigendecomposition), and against the eigendecomposition to 1e-12 (times ||A||/10 beyond 10)
        gen = torch.Generator().manual_seed(1)
        worst_torch = 0.0
        for b in (2, 3, 4, 5, 6, 7, 8, 12, 16, 17, 32, 64):
            for norm in (0.0, 1e-8, 1e-3, 0.03, 0.05, 0.3, 1.0, 2.5, 3.0, 10.0, 100.0):
                a = random_skew(4, b=b, norm=norm, gen=gen) if norm > 0 else torch.zeros(4, b, b, dtype=F64)
                r, ref = liere_torch.so_exp(a), exact_exp(a)
                err_exact = (r - ref).abs().max().item()
                err_torch = (torch.matrix_exp(a) - ref).abs().max().item()
                worst_torch = max(worst_torch, err_torch)
                err = (r - torch.matrix_exp(a)).abs().max().item()
                with self.subTest(b=b, norm=norm):
                    self.assertLessEqual(err_exact, 1e-12 * max(1.0, norm / 10), f"b={b} ||A||={norm}")
                    self.assertLessEqual(err, 1e-12 + err_torch, f"b={b} ||A||={norm}")
        print(f"\n  float64: torch.matrix_exp's own largest error against the eigendecomposition: {worst_torch:.1e}")

    def test_batch_shapes_and_layouts(self):
        a = random_skew(2, 3, b=5)
        r = liere_torch.so_exp(a)
        self.assertEqual(r.shape, (2, 3, 5, 5))
        self.assertTrue(torch.allclose(r, torch.matrix_exp(a), atol=1e-13, rtol=0))
        # a single matrix, a non-contiguous view, an empty batch
        self.assertTrue(torch.allclose(liere_torch.so_exp(a[1, 2]), torch.matrix_exp(a[1, 2]), atol=1e-13, rtol=0))
        at = a.transpose(0, 1)
        self.assertFalse(at.is_contiguous())
        self.assertTrue(torch.allclose(liere_torch.so_exp(at), torch.matrix_exp(at.contiguous()), atol=1e-13, rtol=0))
        self.assertEqual(liere_torch.so_exp(torch.zeros(0, 4, 4)).shape, (0, 4, 4))
        self.assertEqual(liere_torch.so_exp(a.float()).dtype, torch.float32)

    def test_non_finite_gives_nan_not_a_crash(self):
        a = torch.zeros(2, 4, 4, dtype=F64)
        a[0, 0, 1], a[0, 1, 0] = float("nan"), float("nan")
        r = liere_torch.so_exp(a)
        self.assertTrue(torch.isnan(r[0]).all())
        self.assertTrue(torch.equal(r[1], torch.eye(4, dtype=F64)))
        # b = 64 takes the spectral path (the Schur form): a non-finite matrix falls back to the polynomial one,
        # NaN forward and backward; the finite one beside it is unaffected.
        for dt in (F64, torch.float32):
            a = random_skew(2, b=64, norm=3.0).to(dt)
            a[0, 3, 5], a[0, 5, 3] = float("inf"), float("-inf")
            a.requires_grad_(True)
            r = liere_torch.so_exp(a)
            (g,) = torch.autograd.grad((r * torch.ones_like(r)).sum(), a)
            self.assertTrue(torch.isnan(r[0]).all())
            self.assertTrue(torch.isnan(g[0]).any())
            self.assertTrue(torch.isfinite(r[1]).all() and torch.isfinite(g[1]).all())
            self.assertLessEqual(orth_error(r[1].detach()), 1e-6)

    def test_gradcheck_float64(self):
        gen = torch.Generator().manual_seed(2)
        for b in BLOCKS:
            # W -> so_exp(W - W^T): gradcheck's one-entry perturbations keep the input skew-symmetric
            w = torch.randn(2 if b < 64 else 1, b, b, dtype=F64, generator=gen).requires_grad_(True)
            with self.subTest(b=b):
                self.assertTrue(torch.autograd.gradcheck(lambda w: liere_torch.so_exp(w - w.transpose(-1, -2)),
                                                         (w,), fast_mode=(b == 64)))

    def test_gradient_against_matrix_exp_autograd(self):
        gen = torch.Generator().manual_seed(3)
        for b in BLOCKS:
            for norm in (0.5, 5.0, 50.0):
                w = (torch.randn(3, b, b, dtype=F64, generator=gen) * norm / b).requires_grad_(True)
                c = torch.randn(3, b, b, dtype=F64, generator=gen)
                (gl,) = torch.autograd.grad((liere_torch.so_exp(w - w.mT) * c).sum(), w)
                (gt,) = torch.autograd.grad((torch.matrix_exp(w - w.mT) * c).sum(), w)
                err = ((gl - gt).abs().max() / gt.abs().max()).item()
                with self.subTest(b=b, norm=norm):
                    self.assertLess(err, 1e-10)
        # on a raw skew input the gradient is the skew part of matrix_exp's (the map is read on so(n))
        a = random_skew(2, b=6).requires_grad_(True)
        c = torch.randn(2, 6, 6, dtype=F64)
        (gl,) = torch.autograd.grad((liere_torch.so_exp(a) * c).sum(), a)
        (gt,) = torch.autograd.grad((torch.matrix_exp(a) * c).sum(), a)
        self.assertLess((gl - 0.5 * (gt - gt.mT)).abs().max().item(), 1e-12)

    def test_float32_orthogonality_to_norm_1e4(self):
        gen = torch.Generator().manual_seed(4)
        print("\n  float32 max|R^T R - I|:    b   ||A||_2    liere (float)  liere (double)  torch.matrix_exp")
        for b in (*BLOCKS, 32):
            for norm in (1.0, 10.0, 100.0, 1e3, 1e4):
                a = random_skew(16, b=b, norm=norm, gen=gen).float()
                ours = orth_error(liere_torch.so_exp(a))  # the default mode, "float"
                with Float32Exp("double"):
                    ours_double = orth_error(liere_torch.so_exp(a))
                theirs = orth_error(torch.matrix_exp(a))
                print(f"  {b:28d}   {norm:7.0e}   {ours:.1e}        {ours_double:.1e}         {theirs:.1e}")
                with self.subTest(b=b, norm=norm):
                    self.assertLessEqual(ours, 1e-6)
                    self.assertLessEqual(ours_double, 1e-6)

    def test_float32_gradient_against_float64(self):
        # The float32 backward (at b = 32 and 64 the spectral adjoint, four float products with the forward's
        # Schur form; liere::exp_backward in float below) against the float64 gradient of the same float32-rounded input. Its error is that of float
        # scaling and squaring: about 2^s * u relative (s squarings, u = 6e-8), s <= log2(||A||_2 / 3) + 1, so
        # the bound below is 8 * u * max(1, ||A||_2) relative to the largest gradient entry.
        gen = torch.Generator().manual_seed(11)
        print("\n  float32 gradient, max |g32 - g64| / max |g64|:    b   ||A||_2   error   bound")
        for b in (4, 8, 16, 32, 64):
            for norm in (1.0, 10.0, 100.0):
                a = random_skew(4, b=b, norm=norm, gen=gen).float()
                c = torch.randn(4, b, b, generator=gen)
                a32, a64 = a.clone().requires_grad_(True), a.double().requires_grad_(True)
                (g32,) = torch.autograd.grad((liere_torch.so_exp(a32) * c).sum(), a32)
                (g64,) = torch.autograd.grad((liere_torch.so_exp(a64) * c.double()).sum(), a64)
                err = ((g32.double() - g64).abs().max() / g64.abs().max()).item()
                bound = 8 * 2.0**-24 * max(1.0, norm)
                print(f"  {b:50d}   {norm:7.0e}   {err:.1e}   {bound:.1e}")
                with self.subTest(b=b, norm=norm):
                    self.assertLessEqual(err, bound)


class RotationTables(unittest.TestCase):
    @staticmethod
    def reference(bases, pos, expm=torch.matrix_exp):
        d = bases.shape[0]
        s = bases.shape[1:]
        p = pos.reshape(-1, d)
        a = (p.reshape(p.shape[0], d, *([1] * len(s))) * bases.unsqueeze(0)).sum(1)
        return expm(a.contiguous()).reshape(*pos.shape[:-1], *s)

    def test_values_against_matrix_exp_float64(self):
        gen = torch.Generator().manual_seed(5)
        for b in BLOCKS + (5, 32):
            bases = random_skew(2, 3, 2, b=b, gen=gen)
            pos = torch.rand(4, 5, 2, dtype=F64, generator=gen) * 2 - 0.5
            r = liere_torch.rotation_tables(bases, pos)
            self.assertEqual(r.shape, (4, 5, 3, 2, b, b))
            ref = self.reference(bases, pos, exact_exp)
            err_torch = (self.reference(bases, pos) - ref).abs().max().item()
            with self.subTest(b=b):
                self.assertLessEqual((r - ref).abs().max().item(), 1e-12)
                self.assertLessEqual((r - self.reference(bases, pos)).abs().max().item(), 1e-12 + err_torch)
        # d = 3 axes, no set dimension, a single position of shape (d,)
        bases = random_skew(3, b=4, gen=gen)
        pos = torch.tensor([0.3, -1.0, 2.0], dtype=F64)
        r = liere_torch.rotation_tables(bases, pos)
        self.assertEqual(r.shape, (4, 4))
        self.assertLessEqual((r - torch.matrix_exp((pos[:, None, None] * bases).sum(0))).abs().max().item(), 1e-13)

    def test_gradcheck_float64(self):
        gen = torch.Generator().manual_seed(6)
        for b in BLOCKS:
            sets, npos = (2, 3) if b <= 8 else (1, 2)
            w = torch.randn(2, sets, b, b, dtype=F64, generator=gen).requires_grad_(True)
            pos = (torch.rand(npos, 2, dtype=F64, generator=gen) * 2 - 1).requires_grad_(True)
            with self.subTest(b=b):
                self.assertTrue(torch.autograd.gradcheck(
                    lambda w, p: liere_torch.rotation_tables(w - w.transpose(-1, -2), p), (w, pos),
                    fast_mode=(b == 64)))

    def test_gradient_against_matrix_exp_autograd(self):
        gen = torch.Generator().manual_seed(7)
        for b in BLOCKS:
            w = torch.randn(2, 4, b, b, dtype=F64, generator=gen).requires_grad_(True)
            pos = (torch.rand(6, 2, dtype=F64, generator=gen) * 3).requires_grad_(True)
            c = torch.randn(6, 4, b, b, dtype=F64, generator=gen)
            gl = torch.autograd.grad((liere_torch.rotation_tables(w - w.mT, pos) * c).sum(), (w, pos))
            gt = torch.autograd.grad((self.reference(w - w.mT, pos) * c).sum(), (w, pos))
            for name, x, y in (("bases", gl[0], gt[0]), ("positions", gl[1], gt[1])):
                err = ((x - y).abs().max() / y.abs().max()).item()
                with self.subTest(b=b, grad=name):
                    self.assertLess(err, 1e-10)
        # only one input requiring a gradient
        w = random_skew(2, 3, b=4).requires_grad_(True)
        pos = torch.rand(5, 2, dtype=F64)
        (g,) = torch.autograd.grad(liere_torch.rotation_tables(w, pos).sum(), w)
        self.assertEqual(g.shape, w.shape)

    def test_float32_gradient_against_float64(self):
        # as SoExp's: the float32 backward (the spectral adjoint at b = 64) against float64 on the same float32 inputs,
        # relative to the largest entry, within 8 u max(1, max ||A(p)||_2); the positions' gradients are float
        # dot products of length n = sets * b^2 on top (a float reduction: + sqrt(n) u; main's float backward
        # measured 5.5e-7 at b = 64, ||A|| = 1, above the bases' bound 4.8e-7)
        gen = torch.Generator().manual_seed(12)
        for b in (4, 16, 64):
            for norm in (1.0, 30.0):
                bases = random_skew(2, 3, b=b, gen=gen)
                pos = torch.rand(5, 2, dtype=F64, generator=gen)
                a_norm = torch.linalg.matrix_norm((pos[:, :, None, None, None] * bases).sum(1), ord=2).max().item()
                bases = (bases * (norm / a_norm)).float()
                pos = pos.float()
                c = torch.randn(5, 3, b, b, generator=gen)
                g = {}
                for dt in (torch.float32, F64):
                    bb, pp = bases.to(dt).requires_grad_(True), pos.to(dt).requires_grad_(True)
                    g[dt] = torch.autograd.grad((liere_torch.rotation_tables(bb, pp) * c.to(dt)).sum(), (bb, pp))
                bound = 8 * 2.0**-24 * max(1.0, norm)
                for i, name in enumerate(("bases", "positions")):
                    err = ((g[torch.float32][i].double() - g[F64][i]).abs().max() / g[F64][i].abs().max()).item()
                    if name == "positions":
                        bound += math.sqrt(3 * b * b) * 2.0**-24
                    with self.subTest(b=b, norm=norm, grad=name):
                        self.assertLessEqual(err, bound)

    def test_positions_sharing_a_direction(self):
        # A CLS token at the origin and a 5 x 5 grid in [0, 1]: 26 positions in 14 classes of exact positive multiples,
        # which share one decomposition at b >= 32 (backend/position_classes.hpp). Values and both gradients as for
        # positions in general (against the eigendecomposition and matrix_exp's autograd); float32 the rounding of
        # float64 on the same inputs; the origin's tables exactly I.
        gen = torch.Generator().manual_seed(13)
        g = torch.linspace(0, 1, 5, dtype=F64)
        pos = torch.cat([torch.zeros(1, 2, dtype=F64), torch.cartesian_prod(g, g)])
        for b in (32, 64):
            for scale in (0.1, 3.0):
                w = (torch.randn(2, 3, b, b, dtype=F64, generator=gen) * scale).requires_grad_(True)
                p = pos.clone().requires_grad_(True)
                c = torch.randn(26, 3, b, b, dtype=F64, generator=gen)
                bases = w - w.mT
                r = liere_torch.rotation_tables(bases, p)
                with self.subTest(b=b, scale=scale):
                    self.assertLessEqual((r - self.reference(bases, p, exact_exp)).abs().max().item(),
                                         1e-12 * max(1.0, 20 * scale))
                    self.assertTrue(torch.equal(r[0].detach(), torch.eye(b, dtype=F64).expand(3, b, b)))
                    gl = torch.autograd.grad((r * c).sum(), (w, p))
                    gt = torch.autograd.grad((self.reference(w - w.mT, p) * c).sum(), (w, p))
                    for name, x, y in (("bases", gl[0], gt[0]), ("positions", gl[1], gt[1])):
                        err = ((x - y).abs().max() / y.abs().max()).item()
                        self.assertLess(err, 1e-10, name)
                    r32 = liere_torch.rotation_tables(bases.detach().float(), pos.float())
                    r64 = liere_torch.rotation_tables(bases.detach().float().double(), pos.float().double())
                    self.assertLessEqual((r32.double() - r64).abs().max().item(), 2.0**-24)

    def test_float32_orthogonality_to_norm_1e4(self):
        gen = torch.Generator().manual_seed(8)
        for b in BLOCKS:
            bases = random_skew(2, 4, b=b, gen=gen).float()
            pos = torch.rand(16, 2, generator=gen)
            a = (pos[:, :, None, None, None] * bases).sum(1)
            scale = 1e4 / torch.linalg.matrix_norm(a.double(), ord=2).max().item()
            r = liere_torch.rotation_tables(bases * scale, pos)
            with self.subTest(b=b):
                self.assertLessEqual(orth_error(r), 1e-6)


class Encoder(unittest.TestCase):
    def test_official_state_dict_loads_and_outputs_match(self):
        for b, per_layer, per_head in ((8, True, True), (64, True, True), (2, False, True), (4, True, False)):
            torch.manual_seed(10 + b)
            official = official_encoder(b, per_layer, per_head)
            buf = io.BytesIO()
            torch.save(official.state_dict(), buf)
            buf.seek(0)
            ours = liere_encoder(b, per_layer, per_head)
            self.assertEqual(list(ours.state_dict().keys()), ["generator_raw_params"])
            ours.load_state_dict(torch.load(buf))  # strict: same keys, same shapes
            self.assertTrue(torch.equal(ours.generator_raw_params, official.generator_raw_params))
            sizes = torch.tensor([[32, 32]])
            with self.subTest(b=b, per_layer=per_layer, per_head=per_head):
                # float32 (the official default): both against the float64 exponential of the same float32 A
                r_ours, r_off = ours(sizes, torch.float32), official(sizes, torch.float32)
                r_true = official(sizes, F64)
                self.assertEqual(r_ours.shape, r_off.shape)
                self.assertEqual(r_ours.dtype, torch.float32)
                err_ours = (r_ours.double() - r_true).abs().max().item()
                err_off = (r_off.double() - r_true).abs().max().item()
                with Float32Exp("double"):
                    err_double = (ours(sizes, torch.float32).double() - r_true).abs().max().item()
                norm = torch.linalg.matrix_norm(official(sizes, F64, expm=lambda x: x), ord=2).max().item()  # A
                print(f"\n  encoder b={b}: float32 max error vs float64 exp (max ||A||_2 {norm:.0f}): liere {err_ours:.1e}"
                      f" (mode 'double' {err_double:.1e}), official (torch.matrix_exp) {err_off:.1e}")
                # mode "double": the rounding of the exact rotation
                self.assertLessEqual(err_double, 1e-6)
                # mode "float" (the default): a float computation, within 8 u ||A||_2 (the angle's rounding)
                self.assertLessEqual(err_ours, 8 * 2.0**-24 * max(1.0, norm))
                self.assertLessEqual(orth_error(r_ours), 1e-6)
                # float64 parameters, gradients of the official computation (without its float32 rounding of A)
                ours64, off64 = ours.double(), official.double()
                c = torch.randn(r_off.shape, dtype=F64)
                (g_ours,) = torch.autograd.grad((ours64(sizes, F64) * c).sum(), ours64.generator_raw_params)
                (g_off,) = torch.autograd.grad((off64(sizes, F64, round_to_float32=False) * c).sum(),
                                               off64.generator_raw_params)
                self.assertLess(((g_ours - g_off).abs().max() / g_off.abs().max()).item(), 1e-10)
                exact = off64(sizes, F64, round_to_float32=False, expm=exact_exp)
                self.assertLess((ours64(sizes, F64) - exact).abs().max().item(), 1e-12)
                # and the saved dict of ours loads back into the official layout
                official.load_state_dict(ours.state_dict())

    def test_positions_argument_and_cls(self):
        enc = liere_encoder(8)
        pos = torch.rand(1, 10, 2)
        r = enc(None, torch.float32, positions=pos)
        self.assertEqual(r.shape, (1, 11, 3, 16, 8, 8))
        self.assertTrue(torch.equal(r[:, 0], torch.eye(8).expand(1, 3, 16, 8, 8)))
        with self.assertRaises(ValueError):
            enc(torch.tensor([[32, 32]]), torch.float32, positions=pos)
        with self.assertRaisesRegex(NotImplementedError, "phase_type 'even'"):
            liere_torch.LierePositionEncoder(32, 8, 128, "even", "sequential", 2, 2, 8, 3, True, True)


class BadInput(unittest.TestCase):
    def expect(self, pattern, fn, *args):
        with self.assertRaisesRegex(RuntimeError, pattern):
            fn(*args)

    def test_set_float32_exp(self):
        self.expect(r"liere\.set_float32_exp: mode is 'half'; expected 'float' .* or 'double'",
                    liere_torch.set_float32_exp, "half")
        self.assertEqual(liere_torch.float32_exp(), "float")

    def test_so_exp(self):
        so_exp = torch.ops.liere.so_exp
        self.expect(r"liere\.so_exp: X has shape \[3, 4\]; expected square matrices", so_exp, torch.zeros(3, 4))
        self.expect(r"liere\.so_exp: X has shape \[4\]; expected \(\.\.\., b, b\)", so_exp, torch.zeros(4))
        self.expect(r"liere\.so_exp: X has dtype Int; expected float32 or float64", so_exp,
                    torch.zeros(2, 2, dtype=torch.int32))
        self.expect(r"liere\.so_exp: X has dtype Half", so_exp, torch.zeros(2, 2, dtype=torch.float16))
        self.expect(r"liere\.so_exp: X is on device meta; expected a CPU tensor", so_exp,
                    torch.zeros(2, 2, device="meta"))
        self.expect(r"liere\.so_exp: X has layout Sparse", so_exp, torch.zeros(2, 2).to_sparse())
        a = torch.zeros(2, 3, 4, 4, dtype=F64)
        a[1, 2, 0, 1] = 0.25  # a(1,0) stays 0: |X + X^T| = 0.25 at batch index [1, 2]
        self.expect(r"liere\.so_exp: X is not skew-symmetric: max \|X \+ X\^T\| = 0\.25 \(worst at index \[1, 2\]\)"
                    r" exceeds the tolerance 1e-10", so_exp, a)
        # within the stated tolerance: accepted and read through its skew part
        s = random_skew(b=4)
        s[0, 1] += 1e-11
        self.assertLess((so_exp(s) - torch.matrix_exp(0.5 * (s - s.mT))).abs().max().item(), 1e-13)
        if torch.cuda.is_available():
            self.expect(r"liere\.so_exp: X is a CUDA tensor", so_exp, torch.zeros(2, 2, device="cuda"))

    def test_rotation_tables(self):
        rt = torch.ops.liere.rotation_tables
        bases, pos = random_skew(2, 3, b=4), torch.rand(5, 2, dtype=F64)
        self.expect(r"liere\.rotation_tables: positions has shape \[5, 3\] but bases has shape \[2, 3, 4, 4\]; "
                    r"expected positions \(\*P, d\) with d = bases\.size\(0\) = 2", rt, bases, torch.rand(5, 3,
                                                                                                    dtype=F64))
        self.expect(r"liere\.rotation_tables: bases is Double but positions is Float", rt, bases, pos.float())
        self.expect(r"liere\.rotation_tables: bases has shape \[4, 4\]; expected \(d, \*S, b, b\), at least three",
                    rt, bases[0, 0], pos)
        self.expect(r"liere\.rotation_tables: bases has shape \[2, 3, 4, 3\]; expected square", rt,
                    bases[..., :3], pos)
        self.expect(r"liere\.rotation_tables: positions has dtype Long", rt, bases, torch.zeros(5, 2,
                                                                                              dtype=torch.long))
        self.expect(r"liere\.rotation_tables: bases is not skew-symmetric", rt, bases + 1.0, pos)
        self.expect(r"liere\.rotation_tables: positions is a scalar", rt, bases, torch.tensor(1.0, dtype=F64))

    def test_version_mismatch_is_a_clear_import_error(self):
        with self.assertRaisesRegex(ImportError, r"compiled against libtorch 2\.1\.0, but this Python runs torch"):
            _load.check_versions("2.1.0", torch.__version__, "libliere_torch.so")
        _load.check_versions(liere_torch.torch_version(), torch.__version__, "libliere_torch.so")
        self.assertEqual(_load.version_tuple("1.13.0a0"), (1, 13, 0))
        self.assertEqual(_load.version_tuple("2.1.2+cpu"), (2, 1, 2))
        # a fresh process loading a library whose build says it was compiled against another libtorch
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(liere_torch.library_path, tmp)
            with open(os.path.join(tmp, _load.VERSION_FILE), "w") as f:
                f.write("0.4.1\n")
            env = dict(os.environ, LIERE_TORCH_LIBRARY=os.path.join(tmp, _load.LIBRARY_NAME))
            res = subprocess.run([sys.executable, "-c", "import liere_torch"], env=env, capture_output=True,
                                 text=True, cwd=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                             "python"))
            self.assertNotEqual(res.returncode, 0)
            self.assertIn("ImportError: liere_torch:", res.stderr)
            self.assertIn("was compiled against libtorch 0.4.1, but this Python runs torch", res.stderr)


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("LIERE_TORCH_TEST_THREADS", "1")))
    unittest.main()
