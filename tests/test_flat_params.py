"""FlatParameters: one contiguous tensor for a model's parameters gives the per-parameter results."""

import copy

import pytest
import torch
from torch import nn

from cleanrl_style import FlatParameters, NormProjector, mlp


def _model_and_data(seed=0):
    torch.manual_seed(seed)
    model = mlp(6, [16, 16], 3, layer_norm=True)
    x, y = torch.randn(64, 6), torch.randn(64, 3)
    return model, x, y


def test_gradients_clipping_and_adam_match_the_per_parameter_versions():
    reference, x, y = _model_and_data()
    model = copy.deepcopy(reference)
    flat = FlatParameters(model)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-5)
    opt = torch.optim.Adam([flat.param], lr=1e-2, eps=1e-5)
    for _ in range(20):
        ref_opt.zero_grad()
        ((reference(x) - y) ** 2).mean().backward()
        ref_norm = nn.utils.clip_grad_norm_(reference.parameters(), 0.1)
        ref_opt.step()

        flat.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        # autograd wrote into the views: the flat gradient is every gradient, in parameter order
        assert torch.equal(flat.param.grad, torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        norm = flat.clip_grad_norm_(0.1)
        opt.step()
        assert norm.item() == pytest.approx(ref_norm.item(), rel=1e-5)
        assert ref_norm > 0.1  # the clipping branch was exercised
    for p_ref, p in zip(reference.parameters(), model.parameters()):
        torch.testing.assert_close(p, p_ref, rtol=1e-5, atol=1e-6)
    # the parameters really are views into the flat tensor
    first = next(model.parameters())
    assert first.untyped_storage().data_ptr() == flat.param.untyped_storage().data_ptr()


def test_state_dict_round_trip_writes_into_the_flat_tensor():
    model, _, _ = _model_and_data(0)
    other, _, _ = _model_and_data(1)
    flat = FlatParameters(model)
    model.load_state_dict(other.state_dict())
    assert torch.equal(flat.param, torch.cat([p.detach().reshape(-1) for p in other.parameters()]))
    assert list(model.state_dict()) == list(other.state_dict())


def test_optimizer_zero_grad_is_caught():
    model, x, y = _model_and_data()
    flat = FlatParameters(model)
    opt = torch.optim.Adam([flat.param])
    opt.zero_grad()  # sets flat.param.grad to None: the views autograd fills are orphaned
    with pytest.raises(RuntimeError, match="FlatParameters.zero_grad"):
        flat.zero_grad()


def test_bad_modules_are_rejected():
    with pytest.raises(ValueError, match="no trainable parameters"):
        FlatParameters(nn.Tanh())
    mixed = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).double())
    with pytest.raises(ValueError, match="one device and dtype"):
        FlatParameters(mixed)


def test_nap_projection_on_flat_parameters_matches_the_general_path():
    reference, _, _ = _model_and_data()
    model = copy.deepcopy(reference)
    ref_proj = NormProjector(reference, [reference[-1]])
    proj = NormProjector(model, [model[-1]])
    FlatParameters(model)  # after the projector: it must notice the parameters moved
    with torch.no_grad():
        for p_ref, p in zip(reference.parameters(), model.parameters()):
            noise = torch.randn_like(p) * 0.3
            p_ref.add_(noise).mul_(1.7)
            p.add_(noise).mul_(1.7)
    ref_proj.project()
    proj.project()
    assert ref_proj._spans is None and proj._spans is not None  # the two paths were taken
    for p_ref, p in zip(reference.parameters(), model.parameters()):
        torch.testing.assert_close(p, p_ref, rtol=1e-6, atol=1e-7)
    ln = model[1]
    assert torch.cat([ln.weight, ln.bias]).norm().item() == pytest.approx(16**0.5, rel=1e-5)


def test_module_zero_grad_is_caught():
    model, _, _ = _model_and_data()
    flat = FlatParameters(model)
    model.zero_grad()  # sets every p.grad to None
    with pytest.raises(RuntimeError, match="FlatParameters.zero_grad"):
        flat.zero_grad()
