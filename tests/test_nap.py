import pytest
import torch
from torch import nn

from cleanrl_style import FlatParameters, NormProjector, mlp
from cleanrl_style.blocks.nap import _contiguous_span


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


def test_bad_biases_option_is_rejected_with_its_name():
    with pytest.raises(ValueError, match="biases must be 'joint' or 'none', got 'always'"):
        NormProjector(mlp(2, [2], 1), biases="always")


def test_layer_norm_none_leaves_the_layer_norms_free():
    model = mlp(4, [8], 2)
    projector = NormProjector(model, output_layers=[model[-1]], layer_norm="none")
    assert [g.name for g in projector.groups] == ["0"]
    with torch.no_grad():
        model[1].weight.mul_(3.0)
    projector.project()
    assert model[1].weight.norm().item() == pytest.approx(3.0 * 8**0.5, rel=1e-6)


def test_a_zero_initialized_layer_is_not_projected():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    nn.init.zeros_(model[1].weight)
    projector = NormProjector(model, biases="none")
    assert [g.name for g in projector.groups] == ["0"]
    with torch.no_grad():
        model[1].weight.fill_(1.0)
    projector.project()
    assert torch.equal(model[1].weight, torch.ones(2, 4))


def test_projection_scales_each_group_by_its_initial_over_current_norm():
    # Hand computation: W <- W * ||W_init|| / ||W||, per group, every group on its own.
    model = nn.Sequential(nn.Linear(2, 2, bias=False), nn.LayerNorm(2), nn.Linear(2, 1, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[3.0, 0.0], [0.0, 4.0]]))  # norm 5
        model[2].weight.copy_(torch.tensor([[1.0, 0.0]]))  # norm 1
    projector = NormProjector(model, output_layers=[model[2]], project_output=True)
    assert [(g.name, g.init_norm) for g in projector.groups] == [("0", 5.0), ("1", pytest.approx(2**0.5)), ("2", 1.0)]
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[6.0, 8.0], [0.0, 0.0]]))  # norm 10: halved
        model[1].weight.copy_(torch.tensor([1.0, 1.0]))
        model[1].bias.copy_(torch.tensor([1.0, 1.0]))  # joint norm 2: times 1/sqrt(2)
        model[2].weight.copy_(torch.tensor([[0.0, 0.25]]))  # norm 0.25: times 4
    projector.project()
    assert torch.allclose(model[0].weight, torch.tensor([[3.0, 4.0], [0.0, 0.0]]))
    assert torch.allclose(model[1].weight, torch.full((2,), 2**-0.5))
    assert torch.allclose(model[1].bias, torch.full((2,), 2**-0.5))
    assert torch.allclose(model[2].weight, torch.tensor([[0.0, 1.0]]))


def test_projection_on_flat_parameters_matches_projection_on_separate_tensors():
    # Under FlatParameters every group (a LayerNorm's gamma and beta too) is one span of memory,
    # projected as one tensor; the parameters also moved after the projector was built.
    torch.manual_seed(0)
    separate = mlp(4, [8, 8], 2)
    flat_model = mlp(4, [8, 8], 2)
    flat_model.load_state_dict(separate.state_dict())
    projectors = [NormProjector(m, output_layers=[m[-1]]) for m in (separate, flat_model)]
    projectors[1].project()  # caches the layout of the parameters before they move
    FlatParameters(flat_model)
    for model, projector in zip((separate, flat_model), projectors):
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                p.mul_(1.0 + 0.5 * i).add_(0.1)
        projector.project()
        projector.project()  # a second projection changes nothing
    for (name, a), b in zip(separate.named_parameters(), flat_model.parameters()):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7), name
    for group in projectors[1].groups:
        norm = torch.cat([p.detach().flatten() for p in group.params]).norm().item()
        assert norm == pytest.approx(group.init_norm, rel=1e-6)


def test_a_non_contiguous_weight_is_projected():
    layer = nn.Linear(3, 4, bias=False)
    layer.weight = nn.Parameter(torch.randn(3, 4).t())  # a transposed view: not contiguous
    assert not layer.weight.is_contiguous()
    projector = NormProjector(layer)
    init = layer.weight.norm().item()
    with torch.no_grad():
        layer.weight.mul_(2.0)
    projector.project()
    assert layer.weight.norm().item() == pytest.approx(init, rel=1e-6)


def test_contiguous_span_is_one_view_over_parameters_laid_back_to_back():
    storage = torch.arange(20.0)
    a, b = storage[0:6].view(2, 3), storage[6:10]
    span = _contiguous_span([a, b])
    assert span is not None and span.shape == (10,) and span.data_ptr() == a.data_ptr()
    assert torch.equal(span, torch.arange(10.0))
    span.mul_(2.0)  # the span shares memory with the parameters
    assert torch.equal(b, 2.0 * torch.arange(6.0, 10.0))
    single = _contiguous_span([storage[12:16].view(2, 2)])
    assert single is not None and single.shape == (4,) and torch.equal(single, storage[12:16])


@pytest.mark.parametrize(
    "layout",
    ["gap", "reversed", "other_storage", "other_storage_same_offset", "non_contiguous", "non_contiguous_second"],
)
def test_contiguous_span_is_none_unless_the_parameters_are_back_to_back(layout):
    storage = torch.arange(20.0)
    params = {
        "gap": [storage[0:6], storage[7:10]],
        "reversed": [storage[6:10], storage[0:6]],
        "other_storage": [storage[0:6], torch.zeros(4)],
        "other_storage_same_offset": [storage[0:6], torch.zeros(20)[6:10]],
        "non_contiguous": [torch.zeros(3, 4).t()],
        "non_contiguous_second": [storage[0:6], storage[6:12].view(2, 3).t()],
    }[layout]
    assert _contiguous_span(params) is None


def test_state_dict_round_trip_sets_the_norms_projected_to():
    model = mlp(4, [8], 2)
    projector = NormProjector(model, output_layers=[model[-1]])
    state = projector.state_dict()
    assert state == {g.name: g.init_norm for g in projector.groups} and set(state) == {"0", "1"}
    projector.project()  # caches the initial norms before they are replaced
    projector.load_state_dict({name: 2.0 * norm for name, norm in state.items()})
    assert projector.state_dict() == {name: 2.0 * norm for name, norm in state.items()}
    projector.project()
    assert model[0].weight.norm().item() == pytest.approx(2.0 * state["0"], rel=1e-6)
    with pytest.raises(ValueError, match=r"NaP state has groups \['0'\], this model has \['0', '1'\]"):
        projector.load_state_dict({"0": 1.0})
