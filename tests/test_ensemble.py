"""Critic ensembles: one batched call, the same function as the members, per-member views."""

import copy

import pytest
import torch
from torch import nn

from cleanrl_style import NormProjector, SimbaEncoder, mlp
from cleanrl_style.ensemble import Ensemble


class Scaled(nn.Module):
    """A custom elementwise-parameter layer, like Symphony's ReSine."""

    ensemble_broadcast = True

    def __init__(self, dim):
        super().__init__()
        self.p = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * torch.sigmoid(self.p)


MEMBERS = {
    "mlp": lambda: mlp(4, (16, 16), 2, nn.ReLU),
    "simba": lambda: nn.Sequential(SimbaEncoder(4, 8, 2), nn.Linear(8, 1)),
    "custom": lambda: nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), Scaled(8), nn.Linear(8, 3)),
}


def paired(make, size=3):
    torch.manual_seed(0)
    batched = Ensemble(make, size)
    torch.manual_seed(0)
    vmapped = Ensemble(make, size, batched=False)
    with torch.no_grad():  # move LayerNorm / custom parameters off their init so they matter
        for (_name, a), (_, b) in zip(sorted(batched.stacked_params().items()), sorted(vmapped.stacked_params().items())):
            noise = 0.1 * torch.randn_like(a)
            a.add_(noise)
            b.add_(noise)
    return batched, vmapped


@pytest.mark.parametrize("kind", list(MEMBERS))
def test_batched_layers_compute_what_vmap_computes(kind):
    batched, vmapped = paired(MEMBERS[kind])
    assert batched.batched is not None and vmapped.batched is None
    x = torch.randn(5, 4)
    assert torch.allclose(batched(x), vmapped(x), atol=1e-5)


@pytest.mark.parametrize("kind", list(MEMBERS))
def test_members_are_views_that_compute_each_members_output(kind):
    ensemble, _ = paired(MEMBERS[kind])
    x = torch.randn(5, 4)
    members = ensemble.members()
    assert torch.allclose(torch.stack([m(x) for m in members]), ensemble(x), atol=1e-5)
    optimizer = torch.optim.SGD(ensemble.parameters(), lr=0.1)
    ensemble(x).square().sum().backward()
    optimizer.step()  # in place on the stacked parameters: the views follow
    assert torch.allclose(torch.stack([m(x) for m in members]), ensemble(x), atol=1e-5)


def test_members_are_initialized_independently():
    ensemble = Ensemble(MEMBERS["mlp"], 2)
    out = ensemble(torch.randn(5, 4))
    assert not torch.allclose(out[0], out[1])


def test_detached_parameters_pass_gradients_to_the_inputs_only():
    ensemble = Ensemble(MEMBERS["mlp"], 2)
    x = torch.randn(5, 4, requires_grad=True)
    ensemble(x, detach_params=True).sum().backward()
    assert x.grad is not None and all(p.grad is None for p in ensemble.parameters())
    assert all(p.requires_grad for p in ensemble.parameters())


def test_nap_projects_each_member_to_its_own_initial_norm():
    ensemble = Ensemble(MEMBERS["mlp"], 2)
    members = ensemble.members()
    projector = NormProjector(members, [m[-1] for m in members])
    before = [m[0].weight.norm().item() for m in members]
    with torch.no_grad():
        ensemble.stacked_params()["0.weight"].mul_(3.0)
    projector.project()
    assert [m[0].weight.norm().item() for m in members] == pytest.approx(before, rel=1e-6)
    assert ensemble.stacked_params()["0.weight"][1].norm().item() == pytest.approx(before[1], rel=1e-6)


def test_a_deep_copy_is_an_independent_target_network():
    ensemble = Ensemble(MEMBERS["mlp"], 2)
    target = copy.deepcopy(ensemble)
    x = torch.randn(3, 4)
    assert torch.equal(target(x), ensemble(x))
    with torch.no_grad():
        ensemble.stacked_params()["0.bias"].add_(1.0)
    assert not torch.equal(target(x), ensemble(x))
