"""LierePositionEncoder: the official LieRE encoder's interface on liere's operators.

Same constructor arguments, attributes, parameter (`generator_raw_params`, shape (D, L', m', b, b)), state-dict
keys and output as the official code's LierePositionEncoder (StanfordMIMI/LieRE models/rope_vit.py), so that

    from liere_torch import LierePositionEncoder

replaces the official class and a state dict saved from it loads unchanged. The computation is the official one
(docs/torch.md; /work/shared/reference/peers.md §2.1):

    U = triu(W, 1) - 0.5;  G = U - U^T                       (the -0.5 cancels: G_ij = W_ij for i < j)
    A(p) = sum_a p_a G_a;  R(p) = exp(A(p))                  one rotation per token, layer set and block
    CLS (token 0): R = I

with exp and its backward liere's (torch.ops.liere.rotation_tables): no (tokens x layers x blocks x b x b)
generator tensor is kept for the backward, and float32 rotations are orthogonal to ~1e-7.

Deliberate differences: the official code rounds A(p) to float32 before the exponential even when asked for
float64 rotations; here a float64 encoder with dtype=torch.float64 computes in float64 throughout (every other
dtype: float32 inputs, as the official code). Only the phase types with learned generators ("learned", "naver")
are supported: the official code's "even" path reads bases it never builds in the layout of this class.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn as nn


def grid_positions(image_size, patch_size, expected_steps_per_axis, device=None) -> torch.Tensor:
    """Official patch positions (PositionEncoderBase.forward): per axis n = ceil(S/P) steps on
    linspace(0, n/E, n) with E = the training steps of that axis; cartesian product, first axis outermost.
    Returns (1, tokens, D) float32."""
    steps = [math.ceil(s / p) for s, p in zip(image_size, patch_size)]
    axes = [torch.linspace(0, n / e, n, device=device) for n, e in zip(steps, expected_steps_per_axis)]
    pos = torch.cartesian_prod(*axes) if len(axes) > 1 else axes[0]
    return pos.reshape(1, -1, len(axes))


class LierePositionEncoder(nn.Module):
    def __init__(self, image_size, patch_size, dim: int, phase_type: str, position_sequencing_type: str, heads: int,
                 input_dimensionality: int, generator_dim: int, depth: int, rotary_embedding_per_layer: bool,
                 rotary_embedding_per_head: bool, cls_token=True):
        super().__init__()
        if phase_type not in ("learned", "naver"):
            raise NotImplementedError(f"liere_torch.LierePositionEncoder: phase_type {phase_type!r} is not "
                                      f"supported; expected 'learned' or 'naver' (learned generators)")
        if position_sequencing_type != "sequential":
            raise NotImplementedError(f"liere_torch.LierePositionEncoder: position_sequencing_type "
                                      f"{position_sequencing_type!r}; only 'sequential' is supported (as officially)")
        self.patch_size = patch_size
        self.image_size = image_size
        if not isinstance(self.patch_size, Iterable):
            self.patch_size = [self.patch_size] * input_dimensionality
        if not isinstance(self.image_size, Iterable):
            self.image_size = [self.image_size] * input_dimensionality
        self.expected_steps_per_axis = tuple(s // p for s, p in zip(self.image_size, self.patch_size))
        self.position_sequencing_type = position_sequencing_type
        self.cls_token = cls_token
        self.input_dimensionality = input_dimensionality
        self.head_dim = dim // heads
        self.phase_type = phase_type
        self.generator_dim = generator_dim
        if generator_dim < 1 or self.head_dim % generator_dim != 0:
            raise ValueError(f"liere_torch.LierePositionEncoder: generator_dim {generator_dim} must divide the head "
                             f"dimension dim // heads = {self.head_dim}")
        self.num_generators = self.head_dim // generator_dim
        self.rotary_embedding_per_layer = rotary_embedding_per_layer
        self.rotary_embedding_per_head = rotary_embedding_per_head
        self.initialization_factor = 2 * math.pi
        layers = depth if rotary_embedding_per_layer else 1
        if rotary_embedding_per_head:
            self.num_generators *= heads
        # (D, L', m', b, b), U[0, 2*pi): the official initialisation
        init = torch.rand(input_dimensionality, layers, self.num_generators, generator_dim, generator_dim)
        self.generator_raw_params = nn.Parameter(init * self.initialization_factor, requires_grad=True)
        self.generator_transform = nn.Identity()

    def bases(self) -> torch.Tensor:
        """The skew generators G (D, L', m', b, b) from the raw parameters, as the official code builds them."""
        upper = self.generator_transform(torch.triu(self.generator_raw_params, diagonal=1)) - 0.5
        return upper - upper.transpose(-1, -2)

    def positions(self, image_sizes: torch.Tensor) -> torch.Tensor:
        assert image_sizes.shape[0] == 1, "only one image size per batch (as the official encoder)"
        return grid_positions(image_sizes.tolist()[0], self.patch_size, self.expected_steps_per_axis,
                              device=image_sizes.device)

    def forward(self, image_sizes: torch.Tensor | None, dtype, positions=None) -> torch.Tensor:
        """Rotations (batch, tokens [+1 for CLS], L', m', b, b) in dtype; positions (batch, tokens, D) if given."""
        if (image_sizes is None) == (positions is None):
            raise ValueError("liere_torch.LierePositionEncoder: give exactly one of image_sizes and positions")
        if positions is None:
            positions = self.positions(image_sizes)
        params = self.generator_raw_params
        work = torch.float64 if (dtype == torch.float64 and params.dtype == torch.float64) else torch.float32
        rot = torch.ops.liere.rotation_tables(self.bases().to(work), positions.to(work))
        if self.cls_token:
            eye = torch.eye(self.generator_dim, dtype=work, device=rot.device)
            cls = eye.expand(rot.shape[0], 1, *rot.shape[2:])
            rot = torch.cat((cls, rot), dim=1)
        return rot.to(dtype)
