"""Replay storage: what is stored, in which order, and how often each age is sampled."""

import math

import pytest
import torch

import envs
from cleanrl_style.blocks.replay import FadingReplayBuffer, ReplayBuffer, buffer_checkpoint, fading_tanh, restore_buffer


def fill(buffer, n, num_envs=1):
    """Add ``n`` transitions whose reward is their insertion number, ``num_envs`` per call."""
    for start in range(0, n, num_envs):
        k = torch.arange(start, start + num_envs, dtype=torch.float32)
        buffer.add(
            k[:, None].repeat(1, 3),
            k[:, None],
            k,
            k[:, None].repeat(1, 3) + 0.5,
            torch.zeros(num_envs, dtype=torch.bool),
            torch.zeros(num_envs, dtype=torch.bool),
        )


def test_fading_weight_matches_hand_values():
    u = torch.tensor([0.0, 0.2, 0.3, 0.4, 0.9], dtype=torch.float64)
    expected = [math.tanh((math.pi * x) ** math.e) for x in u.tolist()]
    assert fading_tanh(u).tolist() == pytest.approx(expected, abs=1e-12)
    # The values docs/algorithms.md#symphony quotes: the oldest ~40% fade, the rest is nearly uniform.
    assert expected[1:4] == pytest.approx([0.27, 0.69, 0.95], abs=0.01)
    assert expected[0] == 0.0 and expected[4] > 0.999


def test_fading_probabilities_are_weights_over_relative_age():
    buffer = FadingReplayBuffer(100, (3,), (1,))
    fill(buffer, 10)
    w = [math.tanh((math.pi * i / 10) ** math.e) for i in range(10)]
    assert buffer.probabilities().tolist() == pytest.approx([x / sum(w) for x in w], abs=1e-9)


def test_fading_sampling_frequencies_follow_the_weights():
    torch.manual_seed(0)
    buffer = FadingReplayBuffer(10, (3,), (1,))
    fill(buffer, 10)
    draws = torch.cat([buffer.sample(10_000).rewards for _ in range(20)]).long()
    freq = torch.bincount(draws, minlength=10).double() / draws.numel()
    expected = buffer.probabilities()
    assert freq[0] == 0  # weight 0 at u = 0: the oldest transition is never drawn
    assert torch.allclose(freq, expected, atol=0.005)


def test_fading_sampling_follows_age_not_storage_slot_after_wraparound():
    torch.manual_seed(0)
    buffer = FadingReplayBuffer(8, (3,), (1,))
    fill(buffer, 13)  # transitions 5..12 remain; 5 is the oldest, stored in slot 5
    draws = torch.cat([buffer.sample(10_000).rewards for _ in range(10)]).long()
    freq = torch.bincount(draws - 5, minlength=8).double() / draws.numel()
    assert torch.allclose(freq, buffer.probabilities(), atol=0.006)
    assert freq[0] == 0 and freq[-1] > freq[1]


def test_newest_share_by_hand():
    uniform = FadingReplayBuffer(10, (3,), (1,), weight_fn=torch.ones_like)
    assert [uniform.newest_share(k) for k in (0, 3, 10, 25, -4)] == pytest.approx([0, 0.3, 1, 1, 0])
    fading = FadingReplayBuffer(5, (3,), (1,))
    w = [math.tanh((math.pi * i / 5) ** math.e) for i in range(5)]
    assert fading.newest_share(2) == pytest.approx((w[3] + w[4]) / sum(w), abs=1e-12)
    # The oldest 40% fade: the newest 60% of a full buffer draw about 80% of the batches.
    assert FadingReplayBuffer(1000, (3,), (1,)).newest_share(600) == pytest.approx(0.80, abs=0.005)


def test_fading_weight_function_is_pluggable():
    torch.manual_seed(0)
    bell = lambda u: torch.exp(-(((u - 0.5) / 0.1) ** 2))
    buffer = FadingReplayBuffer(100, (3,), (1,), weight_fn=bell)
    fill(buffer, 100)
    ages = buffer.sample(20_000).rewards
    assert abs(ages.mean().item() - 49.5) < 1.0 and ages.std().item() < 10


def test_uniform_sampling_is_uniform_over_stored_transitions():
    torch.manual_seed(0)
    buffer = ReplayBuffer(20, (3,), (1,))
    fill(buffer, 10)
    draws = buffer.sample(50_000).rewards.long()
    freq = torch.bincount(draws, minlength=10).double() / draws.numel()
    assert draws.max() == 9 and torch.allclose(freq, torch.full((10,), 0.1, dtype=torch.float64), atol=0.01)


def test_vector_steps_are_stored_in_order_and_wrap_around():
    buffer = ReplayBuffer(10, (3,), (1,))
    fill(buffer, 14, num_envs=2)
    assert len(buffer) == 10
    assert buffer.rewards[buffer.chronological()].tolist() == list(range(4, 14))


def test_termination_and_truncation_are_stored_separately():
    buffer = ReplayBuffer(4, (1,), (1,))
    z = torch.zeros(2, 1)
    buffer.add(z, z, torch.zeros(2), z, torch.tensor([True, False]), torch.tensor([False, True]))
    assert buffer.terminated[:2].tolist() == [1.0, 0.0]
    assert buffer.truncated[:2].tolist() == [0.0, 1.0]


def test_final_obs_of_an_autoreset_env_is_stored_as_next_obs():
    """Pendulum truncates at 200 steps; the stored next_obs is the last observation, not the reset one."""
    vec = envs.make("Pendulum", num_envs=2, backend="gymnasium", seed=0)
    buffer = ReplayBuffer(500, (3,), (1,))
    obs, _ = vec.reset()
    for _ in range(200):
        action = torch.zeros(2, 1)
        next_obs, reward, terminated, truncated, info = vec.step(action)
        buffer.add(obs, action, reward, info["final_obs"], terminated, truncated)
        last_obs, obs = obs, next_obs
    vec.close()
    assert truncated.all() and not terminated.any()
    assert torch.equal(buffer.next_obs[398:400], info["final_obs"])
    assert not torch.equal(buffer.next_obs[398:400], next_obs)  # next_obs starts the next episode
    # the stored next_obs continues the stored obs (Pendulum is smooth: a small change)
    assert (buffer.next_obs[398:400] - last_obs).abs().max() < 1.0
    assert buffer.truncated[398:400].tolist() == [1.0, 1.0]


def test_state_dict_round_trip_keeps_transitions_and_their_order():
    buffer = FadingReplayBuffer(8, (3,), (1,))
    fill(buffer, 13)
    restored = FadingReplayBuffer(8, (3,), (1,))
    restored.load_state_dict(buffer.state_dict())
    assert len(restored) == 8
    assert restored.rewards[restored.chronological()].tolist() == list(range(5, 13))
    assert torch.allclose(restored.probabilities(), buffer.probabilities())
    fill(restored, 1)  # the next write overwrites the oldest
    assert restored.rewards[restored.chronological()].tolist() == list(range(6, 13)) + [0.0]


def test_fill_by_repeating_replicates_the_exploration_data_in_order():
    buffer = FadingReplayBuffer(10, (3,), (1,))
    fill(buffer, 4)
    buffer.fill_by_repeating()
    assert len(buffer) == 10
    assert buffer.rewards[buffer.chronological()].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    fill(buffer, 1)
    assert buffer.rewards[buffer.chronological()].tolist()[-1] == 0.0 and len(buffer) == 10


@pytest.mark.parametrize("cls", [ReplayBuffer, FadingReplayBuffer])
def test_every_tensor_lives_on_the_buffer_device(cls):
    # The meta device stands in for an accelerator: a tensor left on the CPU would show.
    buffer = cls(8, (3,), (1,), device="meta")
    assert buffer.device == torch.device("meta")
    assert {getattr(buffer, name).device.type for name in ReplayBuffer.FIELDS} == {"meta"}
    z = torch.zeros(2, 3, device="meta")
    buffer.add(z, torch.zeros(2, 1, device="meta"), torch.zeros(2, device="meta"), z, z[:, 0], z[:, 0])
    assert buffer.chronological().device.type == "meta"
    batch = buffer.sample(4)
    assert {getattr(batch, name).device.type for name in ReplayBuffer.FIELDS} == {"meta"}
    if cls is FadingReplayBuffer:
        assert buffer.weights().device.type == "meta"


@pytest.mark.parametrize("cls", [ReplayBuffer, FadingReplayBuffer])
def test_storage_dtypes_do_not_follow_the_default_dtype(cls):
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        buffer = cls(4, (2,), (1,))
        pixels = cls(4, (2,), (1,), obs_dtype=torch.uint8)
    finally:
        torch.set_default_dtype(default)
    assert [getattr(buffer, name).dtype for name in ReplayBuffer.FIELDS] == [torch.float32] * 6
    assert pixels.obs.dtype == pixels.next_obs.dtype == torch.uint8 and pixels.actions.dtype == torch.float32


@pytest.mark.parametrize("cls", [ReplayBuffer, FadingReplayBuffer])
def test_a_one_transition_buffer_stores_and_samples_its_transition(cls):
    buffer = cls(1, (3,), (1,))
    with pytest.raises(RuntimeError, match="^cannot sample from an empty replay buffer$"):
        buffer.sample(2)
    fill(buffer, 3)  # each write replaces the only slot
    assert len(buffer) == 1 and buffer.sample(5).rewards.tolist() == [2.0] * 5


def test_capacity_below_one_is_rejected():
    with pytest.raises(ValueError, match="^capacity must be >= 1, got 0$"):
        ReplayBuffer(0, (3,), (1,))


def test_state_dict_records_the_capacity():
    buffer = ReplayBuffer(8, (3,), (1,))
    fill(buffer, 3)
    state = buffer.state_dict()
    assert state["capacity"] == 8 and state["rewards"].tolist() == [0.0, 1.0, 2.0]


def test_buffer_checkpoint_and_restore_buffer():
    buffer = FadingReplayBuffer(8, (3,), (1,))
    fill(buffer, 5)
    assert buffer_checkpoint(buffer, save=False) == {}
    entry = buffer_checkpoint(buffer, save=True)
    assert set(entry) == {"buffer"} and entry["buffer"]["rewards"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    restored = FadingReplayBuffer(8, (3,), (1,))
    assert restore_buffer(None, restored) is False and len(restored) == 0
    assert restore_buffer({"agent": {}}, restored) is False and len(restored) == 0
    assert restore_buffer({"agent": {}, **entry}, restored) is True
    assert restored.rewards[restored.chronological()].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_fading_sampling_is_the_inverse_cdf_of_float64_uniform_draws():
    # P(rank <= k) = cdf[k]: rank k is drawn for u in [cdf[k-1], cdf[k]), with u ~ U[0, 1) in float64.
    buffer = FadingReplayBuffer(16, (3,), (1,))
    fill(buffer, 11)
    w = torch.tensor([math.tanh((math.pi * i / 11) ** math.e) for i in range(11)], dtype=torch.float64)
    cdf = torch.cumsum(w, 0) / w.sum()
    torch.manual_seed(3)
    u = torch.rand(4096, dtype=torch.float64)
    expected = (cdf[None, :] <= u[:, None]).sum(1)
    torch.manual_seed(3)
    assert torch.equal(buffer.sample(4096).rewards.long(), expected)


def test_fading_draw_on_a_cdf_step_takes_the_next_transition(monkeypatch):
    # u = 0 lies on the step of the zero-weight oldest transition: it must not be drawn. u equal to
    # cdf[k] belongs to transition k + 1 (the interval [cdf[k], cdf[k + 1]) ).
    buffer = FadingReplayBuffer(4, (3,), (1,), weight_fn=lambda u: (u > 0).double())
    fill(buffer, 4)  # weights 0, 1, 1, 1: cdf 0, 1/3, 2/3, 1
    draws = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64) / 3.0  # cdf[0], cdf[1], cdf[2] exactly
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: draws.clone())
    assert buffer.sample(3).rewards.tolist() == [1.0, 2.0, 3.0]


def s3_reference_adds(start, stream):
    """The official S3 buffer's add, as written there, over records ``(reward, terminal)``.

    S3 keeps one slot more than it can use: the last slot holds the transition dropped by the
    previous add until this add overwrites it. Given ``start`` (oldest first) plus that slot, it
    writes into the last slot, then rolls by 2 if the oldest is terminal, else by 1. Returns the
    usable contents after each add, oldest first.
    """
    slots = list(start) + [None]
    states = []
    for record in stream:
        slots[-1] = record
        shift = 2 if slots[0][1] else 1
        slots = slots[shift:] + slots[:shift]
        states.append(slots[:-1])
    return states


def test_keep_terminals_matches_the_official_s3_buffer_add_by_add():
    capacity = 6
    start = [(float(k), k in (0, 2, 3)) for k in range(capacity)]  # terminals among the oldest, one pair adjacent
    stream = [(float(k), k % 4 == 0) for k in range(10, 40)]
    buffer = FadingReplayBuffer(capacity, (1,), (1,), keep_terminals=True)
    for reward, terminal in start:
        z = torch.zeros(1, 1)
        buffer.add(z, z, torch.tensor([reward]), z, torch.tensor([terminal]), torch.tensor([False]))
    for (reward, terminal), expected in zip(stream, s3_reference_adds(start, stream), strict=True):
        z = torch.zeros(1, 1)
        buffer.add(z, z, torch.tensor([reward]), z, torch.tensor([terminal]), torch.tensor([False]))
        order = buffer.chronological()
        stored = list(zip(buffer.rewards[order].tolist(), (buffer.terminated[order] > 0).tolist(), strict=True))
        assert stored == expected
    # the terminal transitions pile up: 3 of the 6 stored, where dropping the oldest keeps 1 (36)
    assert int(buffer.terminated.sum()) == 3


def test_keep_terminals_by_hand_and_off_by_default():
    """Capacity 4, oldest first [0 (terminal), 1, 2, 3]; adding 4 drops 1 and puts 0 behind 4."""

    def stored_after(keep):
        buffer = FadingReplayBuffer(4, (1,), (1,), keep_terminals=keep)
        z = torch.zeros(1, 1)
        for k in range(5):
            buffer.add(z, z, torch.tensor([float(k)]), z, torch.tensor([k == 0]), torch.tensor([False]))
        return buffer.rewards[buffer.chronological()].tolist()

    assert stored_after(True) == [2.0, 3.0, 4.0, 0.0]
    assert stored_after(False) == [1.0, 2.0, 3.0, 4.0]


def test_keep_terminals_stores_vector_steps_one_transition_at_a_time():
    buffer = FadingReplayBuffer(4, (1,), (1,), keep_terminals=True)
    z = torch.zeros(2, 1)
    buffer.add(z, z, torch.tensor([0.0, 1.0]), z, torch.tensor([True, False]), torch.zeros(2, dtype=torch.bool))
    buffer.add(z, z, torch.tensor([2.0, 3.0]), z, torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool))
    buffer.add(z, z, torch.tensor([4.0, 5.0]), z, torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool))
    # 4 drops 1 and recycles 0 behind it: [2, 3, 4, 0]; 5 drops 2: [3, 4, 0, 5]
    assert buffer.rewards[buffer.chronological()].tolist() == [3.0, 4.0, 0.0, 5.0]


def test_keep_terminals_refuses_a_one_transition_buffer_and_takes_two():
    with pytest.raises(ValueError, match="capacity of 2 or more"):
        FadingReplayBuffer(1, (1,), (1,), keep_terminals=True)
    buffer = FadingReplayBuffer(2, (1,), (1,), keep_terminals=True)
    z = torch.zeros(1, 1)
    for k in range(3):  # [0 (terminal), 1] + 2: 1 is dropped, 0 moves behind 2
        buffer.add(z, z, torch.tensor([float(k)]), z, torch.tensor([k == 0]), torch.tensor([False]))
    assert buffer.rewards[buffer.chronological()].tolist() == [2.0, 0.0]
