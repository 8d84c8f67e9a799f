"""sort_rows: torch.sort's values and gradients along the last dimension, eager and compiled."""

import pytest
import torch

from cleanrl_style.blocks.sorting import argsort_rows, sort_rows


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_values_and_gradients_equal_torch_sort(dtype):
    torch.manual_seed(0)
    x = torch.randn(3, 5, 40, dtype=dtype).requires_grad_()
    weights = torch.rand(40, dtype=dtype)
    ours = sort_rows(x)
    (grad_ours,) = torch.autograd.grad((ours * weights).sum(), x)
    reference = x.sort(dim=-1).values
    (grad_reference,) = torch.autograd.grad((reference * weights).sum(), x)
    assert torch.equal(ours, reference)
    assert torch.equal(grad_ours, grad_reference)  # each element gets the weight of its rank


def test_by_hand_with_a_non_contiguous_input():
    x = torch.tensor([[3.0, -1.0, 2.0], [0.5, 0.25, -4.0]]).t()  # columns become rows: (3, 2)
    assert argsort_rows(x).tolist() == [[1, 0], [0, 1], [1, 0]]
    assert sort_rows(x).tolist() == [[0.5, 3.0], [-1.0, 0.25], [-4.0, 2.0]]


def test_compiled_equals_eager():
    torch.manual_seed(0)
    x = torch.randn(64, 96, requires_grad=True)
    weights = torch.rand(96)
    target = torch.compile(lambda t: (sort_rows(t) * weights).sum(-1), dynamic=False)
    out = target(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    (grad_eager,) = torch.autograd.grad((x.sort(dim=-1).values * weights).sum(), x)
    assert torch.allclose(out, (x.sort(dim=-1).values * weights).sum(-1), atol=1e-5)
    assert torch.equal(grad, grad_eager)
