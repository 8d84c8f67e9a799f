"""SAC with SimBa: the paper's networks and defaults, the log-std map, the target, learning, resuming."""

import copy
import math

import pytest
import torch
from agent_runs import resume_agent, run_agent, run_until_first_checkpoint_then_kill

from cleanrl_style import SimbaBlock
from cleanrl_style.blocks.replay import ReplayBuffer
from cleanrl_style.runs.checkpoint import load_checkpoint
from cleanrl_style.runs.cli import UsageError
from cleanrl_style.runs.evaluate import evaluate_run, import_agent
from cleanrl_style.runs.logger import read_progress

simba = import_agent("agents/sac_simba.py")


def make_agent(act_dim=2, **overrides):
    args = simba.Args(**{"gamma": 0.99, **overrides})
    agent = simba.SimbaSAC(5, act_dim, -torch.ones(act_dim), torch.ones(act_dim), args)
    return agent, args


def test_default_networks_have_the_papers_widths_and_blocks():
    agent, _ = make_agent()
    actor = agent.actor.encoder
    assert actor.embed.weight.shape == (128, 5) and len(actor.blocks) == 1
    assert actor.blocks[0].fc1.weight.shape == (512, 128) and actor.blocks[0].fc2.weight.shape == (128, 512)
    assert isinstance(actor.final_norm, torch.nn.LayerNorm) and actor.final_norm.normalized_shape == (128,)
    critic = agent.critic.stacked_params()  # two critics, stacked
    assert critic["encoder.embed.weight"].shape == (2, 512, 7)  # input concat(obs, action)
    assert critic["encoder.blocks.0.fc1.weight"].shape == (2, 2048, 512)
    assert critic["encoder.blocks.1.fc2.weight"].shape == (2, 512, 2048)
    assert "encoder.blocks.2.fc1.weight" not in critic and critic["head.weight"].shape == (2, 1, 512)


def test_the_mlp_baseline_has_the_same_linear_layers_and_neither_norm_nor_residual_path():
    simba_agent, _ = make_agent()
    mlp_agent, _ = make_agent(encoder="mlp")
    for net in ("actor", "critic"):  # every parameter of SimBa's networks but the LayerNorms', same shapes
        simba_params = dict(getattr(simba_agent, net).named_parameters())
        mlp_params = dict(getattr(mlp_agent, net).named_parameters())
        assert sorted(tuple(p.shape) for n, p in simba_params.items() if "norm" not in n) == sorted(
            tuple(p.shape) for p in mlp_params.values()
        )
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in mlp_agent.modules())
    # a ReLU after every linear layer of the encoder, no path around them: a zero input gives ReLU(biases)
    encoder = mlp_agent.actor.encoder
    linears = [m for m in encoder.modules() if isinstance(m, torch.nn.Linear)]
    assert [tuple(m.weight.shape) for m in linears] == [(128, 5), (512, 128), (128, 512)]
    x = torch.randn(4, 5)
    h = x
    for linear in linears:
        h = torch.relu(linear(h))
    torch.testing.assert_close(encoder(x), h)
    # no observation normalization: statistics are not kept, observations pass through
    obs = torch.full((3, 5), 100.0)
    mlp_agent.obs_norm.update(obs)
    assert torch.equal(mlp_agent.obs_norm(obs), obs) and not list(mlp_agent.obs_norm.buffers())
    torch.testing.assert_close(mlp_agent.act(obs), torch.tanh(mlp_agent.actor(obs)[0]))


def test_simba_block_is_a_pre_layernorm_residual_mlp():
    torch.manual_seed(0)
    block = SimbaBlock(8)
    h = torch.randn(3, 8)
    by_hand = h + block.fc2(torch.relu(block.fc1(torch.nn.functional.layer_norm(h, (8,)))))
    assert torch.allclose(block(h), by_hand, atol=1e-6)
    assert block.fc1.weight.shape == (32, 8) and block.fc2.weight.shape == (8, 32)


def test_optimizers_and_temperature_follow_the_papers_defaults():
    agent, args = make_agent(act_dim=6)
    learner = simba.Learner(agent, args)
    for opt in (learner.actor_opt, learner.critic_opt):
        assert isinstance(opt, torch.optim.AdamW)
        assert opt.param_groups[0]["lr"] == 1e-4 and opt.param_groups[0]["weight_decay"] == 1e-2
    assert learner.alpha_opt.param_groups[0]["weight_decay"] == 0
    assert agent.log_alpha.exp().item() == pytest.approx(0.01)
    assert learner.target_entropy == -3.0  # -|A| / 2
    assert (args.tau, args.batch_size, args.buffer_size, args.learning_starts, args.updates_per_step) == (
        0.005,
        256,
        1_000_000,
        5_000,
        2.0,
    )


@pytest.mark.parametrize("raw", [-3.0, -0.5, 0.0, 0.7, 4.0])
def test_log_std_is_mapped_onto_minus_10_to_2(raw):
    agent, _ = make_agent(actor_width=16)
    with torch.no_grad():
        agent.actor.head.weight.zero_()
        agent.actor.head.bias.fill_(raw)
    _, log_std = agent.actor(torch.zeros(1, 5))
    assert log_std.flatten().tolist() == pytest.approx([-10 + 12 * 0.5 * (1 + math.tanh(raw))] * 2, abs=1e-5)


def test_evaluation_acts_with_tanh_of_the_mean():
    agent, _ = make_agent(actor_width=16)
    obs = torch.randn(4, 5)
    mean, _ = agent.actor(agent.obs_norm(obs))
    assert torch.allclose(agent.act(obs), torch.tanh(mean))


def test_clipped_double_q_trains_two_critics_and_takes_their_min_else_one_critic():
    """As the official code: two critics and their minimum on episodic tasks, ONE critic otherwise."""
    small = dict(actor_width=16, critic_width=16, critic_blocks=1)
    x, a = torch.randn(4, 5), torch.rand(4, 2) * 2 - 1
    on, _ = make_agent(clipped_double_q="on", **small)
    q_all = on.q_all(x, a)
    assert q_all.shape == (2, 4) and torch.allclose(on.q(x, a), q_all.min(0).values)
    off, _ = make_agent(clipped_double_q="off", **small)
    assert off.critic.size == 1 and off.q_all(x, a).shape == (1, 4) and torch.allclose(off.q(x, a), off.q_all(x, a)[0])
    # auto: episodic Gymnasium tasks on, DeepMind Control off (the official per-benchmark setting)
    assert make_agent(env="Hopper", **small)[0].critic.size == 2
    assert make_agent(env="dmc:cheetah-run", **small)[0].critic.size == 1


@pytest.mark.parametrize(
    "time_limit, gamma", [(1000, 0.995), (500, 0.99), (200, 0.975), (100, 0.95), (50, 0.95), (None, 0.99)]
)
def test_discount_from_the_episode_length_by_hand(time_limit, gamma):
    # clip((L/5 - 1) / (L/5), 0.95, 0.995): L/5 = 200 -> 0.995, 100 -> 0.99, 40 -> 0.975, 20 -> 0.95, 10 -> 0.9 -> 0.95
    assert simba.horizon_discount(time_limit) == pytest.approx(gamma)


@pytest.mark.parametrize("time_limit, repeat, gamma", [(1000, 2, 0.99), (1000, 4, 0.98), (1000, 1, 0.995), (None, 2, 0.99)])
def test_discount_counts_the_episode_in_agent_steps_under_action_repeat(time_limit, repeat, gamma):
    # L = time_limit / repeat, as the official configs: DMC's 1,000 steps at repeat 2 are 500, L/5 = 100 -> 0.99
    assert simba.horizon_discount(time_limit, repeat) == pytest.approx(gamma)


def test_action_repeat_auto_is_2_on_deepmind_control_and_1_elsewhere_an_integer_forces_it():
    assert simba.Args().action_repeat == "auto"
    assert simba.resolve_action_repeat("auto", "dmc:cheetah-run") == 2
    assert simba.resolve_action_repeat("auto", "dmc/walker-walk-v0") == 2
    assert simba.resolve_action_repeat("auto", "Hopper") == 1
    assert simba.resolve_action_repeat(1, "dmc:cheetah-run") == 1 and simba.resolve_action_repeat(3, "Hopper") == 3
    with pytest.raises(UsageError, match="--action-repeat 0: must be at least 1"):
        simba.resolve_action_repeat(0, "Hopper")


def test_learning_starts_counts_transitions_and_must_leave_room_for_updates():
    """--learning-starts counts agent steps (the official buffer's min_length), --total-timesteps simulator steps."""
    args = simba.Args(env="dmc:cheetah-run", action_repeat=2, learning_starts=5_000, total_timesteps=8_000)
    with pytest.raises(UsageError, match="10000 simulator steps, not fewer than --total-timesteps 8000"):
        args.validate()
    args = simba.Args(env="dmc:cheetah-run", action_repeat=2, learning_starts=5_000, total_timesteps=10_001)
    args.validate()
    assert args.action_repeat == 2
    # --resume of a run whose saved args had no action_repeat (Run merges them over the defaults)
    resumed_from_before_the_flag = simba.Args(env="dmc:cheetah-run", resume="runs/old", total_timesteps=20_000)
    resumed_from_before_the_flag.validate()
    assert resumed_from_before_the_flag.action_repeat == 1  # it acted on every step; it goes on doing so
    fresh = simba.Args(env="dmc:cheetah-run", total_timesteps=20_000)
    fresh.validate()  # a new run resolves auto and derives its discount here, for its args.json
    assert (fresh.action_repeat, fresh.gamma) == (2, pytest.approx(0.99))


def test_log_prob_is_that_of_the_squashed_action_in_unit_bounds():
    """No log(action_scale) term: the density of tanh(u) in [-1, 1], whatever the env's bounds."""
    torch.manual_seed(0)
    args = simba.Args(actor_width=16, critic_width=16, critic_blocks=1)
    agent = simba.SimbaSAC(5, 2, torch.tensor([-0.4, -2.0]), torch.tensor([0.4, 2.0]), args)
    x = torch.randn(64, 5)
    torch.manual_seed(1)
    action, log_prob = agent.sample(x)
    mean, log_std = agent.actor(x)
    torch.manual_seed(1)
    u = mean + log_std.exp() * torch.randn_like(mean)  # the same pre-squash sample
    assert torch.allclose(action, torch.tanh(u) * torch.tensor([0.4, 2.0]), atol=1e-6)
    by_hand = torch.distributions.Normal(mean, log_std.exp()).log_prob(u) - torch.log(1 - torch.tanh(u) ** 2)
    rows = (u.abs() < 3).all(-1)  # where 1 - tanh^2 is representable for the by-hand formula
    assert rows.sum() > 10 and torch.allclose(log_prob[rows], by_hand.sum(-1)[rows], atol=1e-4)


def test_critic_target_bootstraps_through_truncation_not_termination():
    torch.manual_seed(0)
    agent, args = make_agent(actor_width=16, critic_width=16, critic_blocks=1, batch_size=2, learning_rate=0.0, alpha_lr=0.0)
    learner = simba.Learner(agent, args)
    buffer = ReplayBuffer(2, (5,), (2,))
    z = torch.zeros(2, 5)
    buffer.add(z, torch.zeros(2, 2), torch.ones(2), z + 1, torch.tensor([True, False]), torch.tensor([False, True]))
    batch = buffer._gather(torch.tensor([0, 1]))
    # With a target critic predicting a large constant, only the truncated transition sees it.
    with torch.no_grad():
        agent.critic_target.stacked_params()["head.weight"].zero_()
        agent.critic_target.stacked_params()["head.bias"].fill_(100.0)
        agent.critic.stacked_params()["head.weight"].zero_()
        agent.critic.stacked_params()["head.bias"].zero_()
    losses = learner.update(batch)
    # q = 0, so each critic's loss is mean(target^2) over the two transitions; the terminated
    # target is r = 1, the truncated one about 1 + 0.99 * 100 (minus a small entropy term).
    assert losses["losses/qf_loss"].item() == pytest.approx(2 * (1 + (1 + 99) ** 2) / 2, rel=0.02)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_sac_simba_learns_pendulum(tmp_path, precision):
    run_agent(
        "sac_simba",
        "--precision",
        precision,
        "--env",
        "Pendulum",
        "--total-timesteps",
        "3500",
        "--learning-starts",
        "500",
        "--actor-width",
        "32",
        "--critic-width",
        "32",
        "--critic-blocks",
        "1",
        "--batch-size",
        "64",
        "--updates-per-step",
        "1",
        "--learning-rate",
        "1e-3",
        "--alpha-lr",
        "1e-3",
        "--eval-episodes",
        "5",
        "--log-every",
        "1000",
        run_dir=tmp_path / "run",
    )
    progress = read_progress(tmp_path / "run")
    final = progress["eval/return_mean"][-1][2]
    first_returns = [v for _, _, v in progress["charts/episodic_return"][:5]]
    assert final > -700 and final > max(first_returns) + 300
    assert evaluate_run(str(tmp_path / "run"), episodes=2).mean() > -700


@pytest.mark.slow
def test_sac_simba_resumes_a_killed_run(tmp_path):
    run_dir = tmp_path / "run"
    run_until_first_checkpoint_then_kill(
        "sac_simba",
        run_dir,
        "--env",
        "Hopper",
        "--total-timesteps",
        "600",
        "--learning-starts",
        "100",
        "--actor-width",
        "16",
        "--critic-width",
        "16",
        "--critic-blocks",
        "1",
        "--batch-size",
        "16",
        "--updates-per-step",
        "1",
        "--checkpoint-every",
        "200",
        "--save-buffer",
        "--eval-episodes",
        "0",
        "--log-every",
        "100",
    )
    first = load_checkpoint(run_dir)
    assert first["global_step"] < 600
    assert first["agent"]["critic_target.batched.head.weight"].shape[0] == 2  # Hopper: two critics (clipped double-Q)
    resume_agent("sac_simba", run_dir)
    last = load_checkpoint(run_dir)
    assert last["global_step"] == 600 and len(last["buffer"]["rewards"]) == 600
    steps = [s for s, _, _ in read_progress(run_dir)["charts/SPS"]]
    assert steps == sorted(steps) and len(steps) == len(set(steps)) == 6


@pytest.mark.parametrize("encoder", ["simba", "mlp"])
def test_whole_update_is_the_eager_update_as_tensor_code(encoder):
    """whole_update (what --compile compiles into one graph) run eagerly: the same parameters,
    optimizer state and losses as update(), with AdamW's weight decay, through a reload."""
    buffer = ReplayBuffer(64, (5,), (2,))
    generator = torch.Generator().manual_seed(1)
    buffer.add(
        torch.randn(64, 5, generator=generator),
        torch.rand(64, 2, generator=generator) * 2 - 1,
        torch.randn(64, generator=generator),
        torch.randn(64, 5, generator=generator),
        torch.rand(64, generator=generator) < 0.2,
        torch.zeros(64, dtype=torch.bool),
    )
    torch.manual_seed(2)
    batches = [buffer.sample(16) for _ in range(5)]
    runs = []
    for functional in (False, True):
        torch.manual_seed(0)
        agent, args = make_agent(encoder=encoder, actor_width=16, critic_width=16, batch_size=16, weight_decay=0.1)
        learner = simba.Learner(agent, args)
        torch.manual_seed(3)
        for i, b in enumerate(batches):
            if i == 3:  # a resumed run: the optimizers' state tensors are replaced
                learner.load_state_dict(copy.deepcopy(learner.state_dict()))
            if functional:
                learner._state = learner._state or learner._gather_state()
                losses = learner.whole_update(learner._state, b.obs, b.actions, b.rewards, b.next_obs, b.terminated)
            else:
                losses = learner.update(b)
        runs.append((agent.state_dict(), learner.actor_opt.state_dict()["state"][0], {k: float(v) for k, v in losses.items()}))
    (eager, eager_adam, eager_losses), (ours, our_adam, our_losses) = runs
    for name in eager:
        torch.testing.assert_close(ours[name], eager[name], rtol=1e-5, atol=1e-6, msg=name)
    torch.testing.assert_close(our_adam["exp_avg"], eager_adam["exp_avg"], rtol=1e-5, atol=1e-6)
    assert float(our_adam["step"]) == 5
    assert our_losses == pytest.approx(eager_losses, rel=1e-5, abs=1e-6)
