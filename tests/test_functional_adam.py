"""adam_step_ is torch.optim.Adam's step, on the optimizer's own state; project_spans_ is NaP's projection."""

import copy

import pytest
import torch
from torch import nn

from cleanrl_style import (
    Ensemble,
    FlatParameters,
    NormProjector,
    adam_hyperparameters,
    adam_state,
    adam_step_,
    adam_tensors,
    every_tensor,
    mlp,
)
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
    with pytest.raises(TypeError, match="^adam_state needs a torch.optim.Adam or AdamW, got SGD$"):
        adam_state(torch.optim.SGD([p], lr=0.1), p)
    with pytest.raises(
        ValueError, match=r"^adam_state: Adam's weight_decay not supported; use optimizer.step\(\) \(eager\) instead$"
    ):
        adam_state(torch.optim.Adam([p], weight_decay=0.1), p)
    with pytest.raises(ValueError, match="^adam_state: amsgrad, maximize not supported"):
        adam_state(torch.optim.Adam([p], amsgrad=True, maximize=True), p)
    with pytest.raises(
        ValueError, match=r"^adam_state: the optimizer must hold exactly one parameter tensor \(see FlatParameters\)$"
    ):
        adam_state(torch.optim.Adam([p, torch.nn.Parameter(torch.zeros(2))]), p)
    with pytest.raises(ValueError, match="^adam_state: param is not the tensor this optimizer updates$"):
        adam_state(torch.optim.Adam([p]), torch.nn.Parameter(torch.zeros(3)))


def test_adam_tensors_gathers_each_optimizers_own_state_and_every_tensor_lists_them_all():
    a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
    opt_a, opt_b = torch.optim.Adam([a], betas=(0.7, 0.8), eps=1e-4), torch.optim.AdamW([b], weight_decay=0.3)
    tensors, hyper = adam_tensors({"a": (a, opt_a), "b": (b, opt_b)})
    assert tensors["a"] is a and tensors["b"] is b
    assert tensors["a_adam"] == tuple(opt_a.state[a][k] for k in ("step", "exp_avg", "exp_avg_sq"))
    assert tensors["b_adam"][1] is opt_b.state[b]["exp_avg"]
    assert hyper == {"a": (0.7, 0.8, 1e-4, 0.0), "b": (0.9, 0.999, 1e-8, 0.3)}
    listed = every_tensor({**tensors, "lr": torch.tensor(1.0)})
    assert len(listed) == 9 and listed[0] is a and listed[-1].item() == 1.0


def test_adam_with_decoupled_weight_decay_is_stepped_as_adamw():
    """torch's Adam(decoupled_weight_decay=True) is AdamW without being an AdamW instance; plain
    Adam's (coupled) decay is never taken for AdamW's."""
    torch.manual_seed(0)
    reference = torch.nn.Parameter(torch.randn(20))
    ours = torch.nn.Parameter(reference.detach().clone())
    ref_opt = torch.optim.AdamW([reference], lr=1e-2, weight_decay=0.5)
    opt = torch.optim.Adam([ours], lr=1e-2, weight_decay=0.5, decoupled_weight_decay=True)
    assert adam_hyperparameters(opt)[3] == 0.5
    state = adam_state(opt, ours)
    for _ in range(3):
        grad = torch.randn(20)
        reference.grad = grad.clone()
        ref_opt.step()
        adam_step_(ours, grad, state, 1e-2, adam_hyperparameters(opt))
    torch.testing.assert_close(ours.detach(), reference.detach(), rtol=1e-5, atol=1e-6)
    assert adam_hyperparameters(torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], weight_decay=0.1))[3] == 0.0


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


def test_project_spans_scales_only_its_spans_by_hand():
    # Group 0: one span [1, 3) to norm 1; group 1: spans [4, 5) and [5, 6) together to norm 2.
    # Elements 0 and 3 lie outside every span and keep their values exactly.
    flat = torch.tensor([1.0, 2.0, 3.0, 4.0, 3.0, 4.0, 7.0])
    project_spans_(flat, [(((1, 2),), 1.0), (((4, 1), (5, 1)), 2.0)])
    s13 = 13**0.5
    torch.testing.assert_close(flat, torch.tensor([1.0, 2 / s13, 3 / s13, 4.0, 1.2, 1.6, 7.0]))


def test_project_spans_refuses_overlapping_spans():
    with pytest.raises(ValueError, match="overlaps"):
        project_spans_(torch.ones(6), [(((0, 3),), 1.0), (((2, 2),), 1.0)])
