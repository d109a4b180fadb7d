"""liere inside PyTorch: liere's so(n) exponential and LieRE rotation tables as torch operators with autograd,
and a drop-in for the official LieRE position encoder (StanfordMIMI/LieRE models/rope_vit.py).

    import liere_torch
    R = liere_torch.so_exp(X)                        # X (..., b, b) skew-symmetric, float32/float64
    R = liere_torch.rotation_tables(bases, pos)      # bases (d, *S, b, b), pos (*P, d) -> (*P, *S, b, b)

    from liere_torch import LierePositionEncoder     # instead of: from models.rope_vit import LierePositionEncoder

Importing the package loads libliere_torch.so (see _load.py for where it is looked for) and checks that it was
compiled against the running torch's libtorch. docs/torch.md has the details.
"""

from __future__ import annotations

import torch

from . import _load

library_path = _load.load()


def so_exp(x: torch.Tensor) -> torch.Tensor:
    """exp(X) for skew-symmetric X (..., b, b): liere's exponential and its exact backward."""
    return torch.ops.liere.so_exp(x)


def rotation_tables(bases: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """exp(sum_i positions[..., i] * bases[i]): bases (d, *S, b, b) skew, positions (*P, d) -> (*P, *S, b, b)."""
    return torch.ops.liere.rotation_tables(bases, positions)


def set_float32_exp(mode: str) -> None:
    """How float32 exponentials are computed (process-wide): "float" (the default) runs liere's float kernels with
    the Newton-Schulz finish for b = 16, 32, 64 (orthogonal to 5e-7, values within about 8 u ||A|| of exp(A));
    "double" computes every float32 exponential in double and rounds once (slower at b = 64). docs/torch.md."""
    torch.ops.liere.set_float32_exp(mode)


def float32_exp() -> str:
    """The current float32 mode, "float" or "double" (set_float32_exp)."""
    return torch.ops.liere.float32_exp()


def torch_version() -> str:
    """The libtorch version the operator library was compiled against."""
    return torch.ops.liere.torch_version()


from .encoder import LierePositionEncoder, grid_positions  # noqa: E402

__all__ = ["so_exp", "rotation_tables", "set_float32_exp", "float32_exp", "torch_version", "LierePositionEncoder", "grid_positions", "library_path"]
