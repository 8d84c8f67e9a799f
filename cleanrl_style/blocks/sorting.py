"""Sorting along the last dimension, differentiable, at numpy's speed on the CPU.

``torch.sort`` on the CPU sorts each row with a scalar comparison sort: for Symphony's 384 x 384
critic nodes it took close to a tenth of the whole gradient update. numpy's ``argsort`` uses
SIMD sorting networks (AVX-512 or AVX2) and is several times faster on the same rows
(``benchmarks/sort_rows.py`` measures both). :func:`sort_rows` takes the order from numpy on the
CPU and from ``torch.argsort`` elsewhere, and gathers the values with torch, so gradients flow
as through ``torch.sort(...).values``.
"""

from __future__ import annotations

import numpy as np
import torch


@torch.library.custom_op("cleanrl_style::argsort_rows", mutates_args=())
def argsort_rows(x: torch.Tensor) -> torch.Tensor:
    """Indices that sort each row of ``x`` (last dimension) ascending; opaque to ``torch.compile``."""
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        order = np.argsort(x.detach().contiguous().numpy(), axis=-1)
        return torch.from_numpy(order.astype(np.int64, copy=False))
    return torch.argsort(x, dim=-1)


@argsort_rows.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, dtype=torch.long)


def sort_rows(x: torch.Tensor) -> torch.Tensor:
    """``torch.sort(x, dim=-1).values``, the same values and gradient (tied values may swap)."""
    return x.gather(-1, argsort_rows(x.detach()))
