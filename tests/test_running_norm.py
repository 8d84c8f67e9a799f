import numpy as np
import pytest
import torch

from cleanrl_style import RewardScaler, RunningNorm


def test_running_norm_matches_numpy_over_random_batches():
    rng = np.random.default_rng(0)
    stream = rng.normal(loc=[3.0, -2.0, 0.5], scale=[10.0, 0.1, 1.0], size=(5000, 3))
    norm = RunningNorm(3)
    start = 0
    while start < len(stream):
        size = int(rng.integers(1, 300))
        norm.update(torch.as_tensor(stream[start : start + size]))
        start += size
    # The statistics start from (m=0, v=1, n=1e-4): a prior worth 1e-4 samples.
    prior_n = 1e-4
    n = len(stream) + prior_n
    mean = stream.sum(0) / n
    var = (stream.var(0) * len(stream) + prior_n * 1.0 + (stream.mean(0) ** 2) * len(stream) * prior_n / n) / n
    np.testing.assert_allclose(norm.mean.numpy(), mean, rtol=1e-9)
    np.testing.assert_allclose(norm.var.numpy(), var, rtol=1e-9)
    x = torch.as_tensor(stream[:10], dtype=torch.float32)
    expected = (stream[:10] - mean) / np.sqrt(var + 1e-8)
    np.testing.assert_allclose(norm(x).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_single_batch_follows_the_chan_formula_by_hand():
    norm = RunningNorm(1)
    norm.update(torch.tensor([[1.0], [3.0]]))  # mb = 2, vb = 1, nb = 2 merged into (0, 1, 1e-4)
    n = 1e-4 + 2
    assert torch.allclose(norm.mean, torch.tensor([2 * 2 / n], dtype=torch.float64))
    assert torch.allclose(norm.var, torch.tensor([(1 * 1e-4 + 1 * 2 + 4 * 1e-4 * 2 / n) / n], dtype=torch.float64))
    assert float(norm.count) == n


def test_statistics_freeze_in_eval_mode_and_clip():
    norm = RunningNorm(2, clip=1.0)
    norm.update(torch.randn(100, 2))
    before = norm.state_dict()
    norm.eval()
    norm.update(torch.randn(100, 2) * 50)
    for key, value in norm.state_dict().items():
        assert torch.equal(value, before[key])
    assert norm(torch.full((1, 2), 1e6)).max() == 1.0


def test_statistics_are_saved_and_restored_with_the_module():
    norm = RunningNorm(4)
    norm.update(torch.randn(64, 4) * 3 + 2)
    restored = RunningNorm(4)
    restored.load_state_dict(norm.state_dict())
    x = torch.randn(5, 4)
    assert torch.equal(norm(x), restored(x))


def test_reward_scaler_divides_by_return_std_and_resets_at_done():
    scaler = RewardScaler(num_envs=2, gamma=0.5, clip=None)
    scaler(torch.tensor([1.0, 2.0]), torch.tensor([False, True]))
    # env 0 keeps its return (1.0), env 1 restarts from 0 after its episode ended
    assert torch.allclose(scaler.discounted_return, torch.tensor([1.0, 0.0], dtype=torch.float64))
    out = scaler(torch.tensor([1.0, 1.0]), torch.tensor([False, False]))
    # returns fed so far: [1, 2] then [1.5, 1]
    stats = RunningNorm(())
    stats.update(torch.tensor([1.0, 2.0]))
    stats.update(torch.tensor([1.5, 1.0]))
    assert torch.allclose(out, torch.tensor([1.0, 1.0]) / torch.sqrt(stats.var + 1e-8).float())


def test_output_keeps_the_input_dtype():
    norm = RunningNorm(2)
    norm.update(torch.randn(50, 2, dtype=torch.float64) * 3 + 1)
    assert norm(torch.randn(4, 2)).dtype == torch.float32
    assert norm(torch.randn(4, 2, dtype=torch.float64)).dtype == torch.float64


def test_eps_is_added_to_the_variance():
    # Hand computation with var = 0: (x - m) / sqrt(0 + eps).
    norm = RunningNorm(1, eps=0.25)
    norm.var.zero_()
    norm.mean.fill_(1.0)
    assert norm(torch.tensor([[2.0], [0.0]])).tolist() == [[2.0], [-2.0]]


def test_clip_bounds_both_signs():
    norm = RunningNorm(2, clip=3.0)
    out = norm(torch.tensor([[-1e6, 1e6], [-2.0, 2.0]]))
    assert out.tolist() == [[-3.0, 3.0], [pytest.approx(-2.0), pytest.approx(2.0)]]


def test_reward_scaler_clips_to_ten_by_default():
    scaler = RewardScaler(num_envs=3, gamma=0.99).eval()  # eval: the return statistics stay frozen
    scaler.return_stats.var.fill_(0.01**2 - 1e-8)  # std(G) = 0.01
    out = scaler(torch.tensor([1.0, -1.0, 0.05]), torch.tensor([False, False, False]))
    assert out.tolist() == [10.0, -10.0, pytest.approx(5.0)]
