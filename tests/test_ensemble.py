"""Critic ensembles: one batched call, the same function as the members, per-member views."""

import copy

import pytest
import torch
from torch import nn

from cleanrl_style import NormProjector, SimbaEncoder, mlp
from cleanrl_style.blocks.ensemble import Ensemble


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


class Unflagged(nn.Module):
    """Own parameters without ``ensemble_broadcast``: the ensemble must fall back to vmap."""

    def __init__(self, dim):
        super().__init__()
        self.p = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * self.p


class RootScaled(nn.Module):
    """A member whose root module holds a parameter of its own beside a child layer."""

    ensemble_broadcast = True

    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.randn(3))
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x) * self.p


class Shifted(nn.Module):
    """A buffer per member (like a running normalization): the ensemble runs it under vmap."""

    def __init__(self):
        super().__init__()
        self.register_buffer("shift", torch.randn(4))
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x - self.shift)


def recorded(make, size, batched=True):
    """The ensemble and the members ``make`` built for it, in order."""
    made = []

    def make_and_keep():
        made.append(make())
        return made[-1]

    torch.manual_seed(0)
    return Ensemble(make_and_keep, size, batched=batched), made


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.Sequential(nn.Linear(4, 8, bias=False), nn.ReLU(), nn.Linear(8, 2, bias=False)),
        lambda: nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8, elementwise_affine=False), nn.Linear(8, 2)),
        lambda: nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8, eps=0.5), nn.Linear(8, 2)),
        lambda: nn.Sequential(nn.Sequential(nn.Linear(4, 1)), nn.Linear(1, 2)),
        RootScaled,
    ],
    ids=["no_bias", "no_affine", "large_eps", "nested_one_output", "root_parameter"],
)
def test_batched_layers_compute_each_members_function(make):
    ensemble, made = recorded(make, 3)
    assert ensemble.batched is not None
    x = torch.randn(5, 4)
    assert torch.allclose(ensemble(x), torch.stack([m(x) for m in made]), atol=1e-6)
    member_params = dict(made[0].named_parameters())
    assert {name: p.shape for name, p in ensemble.stacked_params().items()} == {
        name: (3, *p.shape) for name, p in member_params.items()
    }


@pytest.mark.parametrize(
    "make",
    [lambda: nn.Linear(4, 2), lambda: nn.Sequential(nn.Linear(4, 3), Unflagged(3)), Shifted, lambda: nn.Sequential(Shifted())],
    ids=["bare_linear", "unflagged_parameter", "buffer", "nested_buffer"],
)
def test_members_that_cannot_be_batched_run_under_vmap(make):
    ensemble, made = recorded(make, 3)
    assert ensemble.batched is None
    x = torch.randn(5, 4)
    assert torch.allclose(ensemble(x), torch.stack([m(x) for m in made]), atol=1e-6)
    assert torch.allclose(ensemble(x, detach_params=True), ensemble(x))
    views = ensemble.members()
    assert torch.allclose(torch.stack([m(x) for m in views]), ensemble(x), atol=1e-6)
    assert all(not p.requires_grad for p in views.parameters())


@pytest.mark.parametrize("nested", [False, True])
def test_member_buffers_are_stacked_and_viewed_per_member(nested):
    ensemble, made = recorded((lambda: nn.Sequential(Shifted())) if nested else Shifted, 3)
    name = "0.shift" if nested else "shift"
    shifted = (lambda m: m[0]) if nested else (lambda m: m)
    assert ensemble.buffer_names == [name]
    assert torch.equal(ensemble.stacked_buffers()[name], torch.stack([shifted(m).shift for m in made]))
    views = ensemble.members()
    assert [torch.equal(shifted(v).shift, shifted(m).shift) for v, m in zip(views, made)] == [True] * 3
    with torch.no_grad():
        ensemble.stacked_buffers()[name][1].add_(1.0)  # the views share the stacked memory
    assert torch.equal(shifted(views[1]).shift, shifted(made[1]).shift + 1.0)


def test_vmap_detached_parameters_pass_gradients_to_the_inputs_only():
    ensemble = Ensemble(MEMBERS["mlp"], 2, batched=False)
    x = torch.randn(5, 4, requires_grad=True)
    ensemble(x, detach_params=True).sum().backward()
    assert x.grad is not None and all(p.grad is None for p in ensemble.parameters())


def test_vmap_members_draw_different_random_numbers():
    torch.manual_seed(0)
    ensemble = Ensemble(lambda: nn.Sequential(nn.Linear(4, 64), nn.Dropout(0.5)), 2, batched=False)
    out = ensemble(torch.randn(3, 4))
    assert not torch.equal(out[0] == 0, out[1] == 0)


def test_a_one_member_ensemble_is_its_member():
    ensemble, made = recorded(MEMBERS["mlp"], 1)
    x = torch.randn(5, 4)
    assert ensemble(x).shape == (1, 5, 2) and torch.allclose(ensemble(x)[0], made[0](x), atol=1e-6)
    with pytest.raises(ValueError, match="^ensemble size must be >= 1, got 0$"):
        Ensemble(MEMBERS["mlp"], 0)


def test_the_template_holds_no_parameter_memory():
    ensemble = Ensemble(MEMBERS["mlp"], 2)
    assert all(p.is_meta for p in ensemble.template.parameters())
