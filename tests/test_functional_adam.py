"""adam_step_ is torch.optim.Adam's step, on the optimizer's own state; project_spans_ is NaP's projection."""

import copy

import pytest
import torch
from torch import nn

from cleanrl_style import Ensemble, FlatParameters, NormProjector, adam_hyperparameters, adam_state, adam_step_, mlp
from cleanrl_style.blocks.nap import project_spans_


@pytest.mark.parametrize("kind", ["Adam", "AdamW"])
@pytest.mark.parametrize("fused", [True, False])
def test_adam_step_follows_torch_adam_step_by_step(fused, kind):
    torch.manual_seed(0)
    reference = torch.nn.Parameter(torch.randn(50))
    ours = torch.nn.Parameter(reference.detach().clone())
    settings = dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-6, fused=fused, **({"weight_decay": 0.5} if kind == "AdamW" else {}))
    ref_opt = getattr(torch.optim, kind)([reference], **settings)
    opt = getattr(torch.optim, kind)([ours], **settings)
    state = adam_state(opt, ours)
    lr = torch.tensor(1e-2)
    for step in range(1, 8):
        grad = torch.randn(50) * step  # changing scale: the bias corrections and eps matter
        frac = 1.0 - step / 10  # a schedule: lr changes every step, in both
        ref_opt.param_groups[0]["lr"] = frac * 1e-2
        lr.fill_(frac * 1e-2)
        reference.grad = grad.clone()
        ref_opt.step()
        adam_step_(ours, grad, state, lr, adam_hyperparameters(opt))
        torch.testing.assert_close(ours.detach(), reference.detach(), rtol=1e-6, atol=1e-7)
    # The state is the optimizer's own: a later optimizer.step() continues from it.
    assert float(opt.state[ours]["step"]) == 7
    torch.testing.assert_close(opt.state[ours]["exp_avg_sq"], ref_opt.state[reference]["exp_avg_sq"])


def test_adam_state_refuses_what_it_does_not_compute():
    p = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(TypeError, match="torch.optim.Adam or AdamW"):
        adam_state(torch.optim.SGD([p], lr=0.1), p)
    with pytest.raises(ValueError, match="weight_decay"):
        adam_state(torch.optim.Adam([p], weight_decay=0.1), p)
    with pytest.raises(ValueError, match="exactly one parameter tensor"):
        adam_state(torch.optim.Adam([p, torch.nn.Parameter(torch.zeros(2))]), p)
    with pytest.raises(ValueError, match="not the tensor"):
        adam_state(torch.optim.Adam([p]), torch.nn.Parameter(torch.zeros(3)))


def test_project_spans_equals_the_projector_on_an_ensemble():
    # An ensemble stacks each parameter over its members, so one member's LayerNorm gamma and beta
    # are two spans apart: the case where a group is more than one span.
    torch.manual_seed(0)
    critic = Ensemble(lambda: mlp(5, [8, 8], 1, nn.ReLU, layer_norm=True), 2)
    reference = copy.deepcopy(critic)
    flat = FlatParameters(critic)
    members, ref_members = critic.members(), reference.members()
    projector = NormProjector(members, [m[-1] for m in members])
    ref_projector = NormProjector(ref_members, [m[-1] for m in ref_members])
    groups = projector.flat_spans(flat)
    assert any(len(spans) > 1 for spans, _ in groups)
    noise = torch.randn(flat.param.numel())
    with torch.no_grad():
        flat.param.add_(noise)
        offset = 0
        for p in reference.parameters():  # in place: the members are views of these
            p.add_(noise[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
    before = flat.param.detach().clone()
    ref_projector.project()
    project_spans_(flat.param.detach(), groups)
    for ours, ref in zip(critic.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(flat.param, before)  # the noise took the groups off their norms
