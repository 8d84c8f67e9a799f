import math

import torch
from torch import nn

from cleanrl_style import SimbaBlock, SimbaEncoder, mlp


def test_mlp_puts_layer_norm_between_linear_and_nonlinearity():
    model = mlp(3, [16, 8], 2, activation=nn.ReLU)
    kinds = [type(m) for m in model]
    assert kinds == [nn.Linear, nn.LayerNorm, nn.ReLU, nn.Linear, nn.LayerNorm, nn.ReLU, nn.Linear]
    assert model(torch.randn(5, 3)).shape == (5, 2)
    assert nn.LayerNorm not in [type(m) for m in mlp(3, [16], 2, layer_norm=False)]


def test_simba_block_is_residual_with_4x_expansion():
    block = SimbaBlock(32)
    assert block.fc1.weight.shape == (128, 32) and block.fc2.weight.shape == (32, 128)
    h = torch.randn(7, 32)
    expected = h + block.fc2(torch.relu(block.fc1(block.norm(h))))
    assert torch.allclose(block(h), expected)
    with torch.no_grad():
        block.fc2.weight.zero_()
    assert torch.allclose(block(h), h)  # a zeroed branch leaves the identity


def test_simba_encoder_shapes_and_final_layer_norm():
    encoder = SimbaEncoder(in_dim=11, hidden_dim=64, num_blocks=2)
    out = encoder(torch.randn(9, 11) * 100)
    assert out.shape == (9, 64) and len(encoder.blocks) == 2
    # the final LayerNorm output has zero mean and unit variance per sample (default affine init)
    assert torch.allclose(out.mean(-1), torch.zeros(9), atol=1e-5)
    assert torch.allclose(out.var(-1, unbiased=False), torch.ones(9), atol=1e-3)
    # He-normal init of the block weights: std sqrt(2 / fan_in)
    std = encoder.blocks[0].fc1.weight.std().item()
    assert abs(std - math.sqrt(2 / 64)) < 0.02
