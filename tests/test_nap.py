import pytest
import torch
from torch import nn

from cleanrl_style import NormProjector, mlp


def _linear_norms(model):
    return {name: m.weight.norm().item() for name, m in model.named_modules() if isinstance(m, nn.Linear)}


def test_projection_keeps_every_layer_at_its_initial_norm_while_the_loss_decreases():
    torch.manual_seed(0)
    model = mlp(8, [32, 32], 1, layer_norm=True)
    projector = NormProjector(model, output_layers=[model[-1]], project_output=True)
    init = _linear_norms(model)
    x = torch.randn(256, 8)
    y = torch.sin(x.sum(-1, keepdim=True))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(300):
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        projector.project()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    for name, norm in _linear_norms(model).items():
        assert norm == pytest.approx(init[name], rel=1e-5)
    ln = model[1]
    assert torch.cat([ln.weight, ln.bias]).norm().item() == pytest.approx(32**0.5, rel=1e-5)


def test_without_projection_the_norms_grow():
    torch.manual_seed(0)
    model = mlp(8, [32, 32], 1)
    init = _linear_norms(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(256, 8), torch.randn(256, 1)
    for _ in range(200):
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert _linear_norms(model)["0"] > 1.05 * init["0"]


def test_output_layer_and_biases_follow_the_options():
    model = mlp(4, [8], 2)
    free_output = NormProjector(model, output_layers=[model[-1]])
    assert [g.name for g in free_output.groups] == ["0", "1"]  # hidden linear, LayerNorm
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    free_output.project()
    assert model[0].weight.norm().item() == pytest.approx(free_output.groups[0].init_norm, rel=1e-5)
    assert model[0].bias.abs().sum() == 0  # orthogonal init zeroes biases; 3 * 0 stays 0

    model = mlp(4, [8], 2, layer_norm=False)
    torch.nn.init.constant_(model[0].bias, 1.0)
    joint = NormProjector(model, output_layers=[model[-1]], project_output=True, biases="joint")
    expected = torch.cat([model[0].weight.flatten(), model[0].bias]).norm().item()
    with torch.no_grad():
        model[0].bias.mul_(10)
    joint.project()
    assert torch.cat([model[0].weight.flatten(), model[0].bias]).norm().item() == pytest.approx(expected, rel=1e-5)


def test_layer_stats_report_norm_and_adam_effective_learning_rate():
    model = mlp(4, [8], 2)
    stats = NormProjector(model).layer_stats(lr=1e-3)
    norm = model[0].weight.norm().item()
    assert stats["nap/norm/0"] == pytest.approx(norm)
    assert stats["nap/eff_lr/0"] == pytest.approx(1e-3 / norm)
    assert set(stats) == {"nap/norm/0", "nap/eff_lr/0", "nap/norm/3", "nap/eff_lr/3"}


def test_bad_option_is_rejected():
    with pytest.raises(ValueError, match="layer_norm must be"):
        NormProjector(mlp(2, [2], 1), layer_norm="sometimes")
