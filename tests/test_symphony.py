"""Symphony: the losses, swaddling, sorted-node target, Temporal Advantage, actor, learning, resuming."""

import math

import pytest
import torch
from agent_runs import resume_agent, run_agent, run_until_first_checkpoint_then_kill

from cleanrl_style.blocks.replay import FadingReplayBuffer
from cleanrl_style.runs.checkpoint import load_checkpoint
from cleanrl_style.runs.evaluate import evaluate_run, import_agent
from cleanrl_style.runs.logger import read_progress

sym = import_agent("agents/symphony.py")
E = torch.tensor([-3.0, -1.0, -0.2, 0.0, 0.2, 1.0, 3.0])


def test_rehse_by_hand_is_even_and_non_negative():
    expected = [e * math.tanh(e / 2) for e in E.tolist()]
    assert sym.rehse(E).tolist() == pytest.approx(expected, abs=1e-6)
    assert (sym.rehse(E) >= 0).all() and torch.allclose(sym.rehse(E), sym.rehse(-E))
    assert sym.rehse(torch.tensor(0.01)).item() == pytest.approx(0.01**2 / 2, rel=1e-3)  # quadratic near 0
    assert sym.rehse(torch.tensor(20.0)).item() == pytest.approx(20.0, rel=1e-6)  # linear far away


def test_rehae_by_hand_keeps_the_sign_with_rehse_size():
    expected = [abs(e) * math.tanh(e / 2) for e in E.tolist()]
    assert sym.rehae(E).tolist() == pytest.approx(expected, abs=1e-6)
    assert torch.equal(torch.sign(sym.rehae(E)), torch.sign(E))
    assert torch.allclose(sym.rehae(E).abs(), sym.rehse(E)) and torch.allclose(sym.rehae(-E), -sym.rehae(E))


def test_swaddling_by_hand():
    s, b = 0.5, 0.4
    omega_big = lambda x: math.log((1 + x) / (1 - x))
    expected = omega_big(s ** (1 / b)) + b * s * math.log(s) + omega_big(b**2)
    assert sym.swaddling(torch.tensor([s]), torch.tensor([b])).item() == pytest.approx(expected, rel=1e-5)
    assert sym.big_omega(torch.tensor([-0.5, 0.0, 0.5])).tolist() == pytest.approx([-math.log(3), 0, math.log(3)], rel=1e-6)
    assert sym.small_omega(torch.tensor([0.0, 1.0, 1 / math.e])).tolist() == pytest.approx([0, 0, -1 / math.e], abs=1e-6)


def test_swaddling_grows_with_action_strength_and_detaches_beta_in_the_exponent():
    sw = lambda s, b: sym.swaddling(torch.tensor([s]), torch.tensor([b])).item()
    assert sw(0.95, 0.5) > sw(0.6, 0.5) and sw(0.6, 0.9) > sw(0.6, 0.5)  # strong S, big B cost
    s, b = torch.tensor([0.5], requires_grad=True), torch.tensor([0.4], requires_grad=True)
    sym.swaddling(s, b).backward()
    # dSw/dB = omega(S) + 2B * Omega'(B^2), Omega'(x) = 2 / (1 - x^2): no term through S^(1/B)
    assert b.grad.item() == pytest.approx(0.5 * math.log(0.5) + 2 * 0.4 * 2 / (1 - 0.4**4), rel=1e-5)


def test_sorted_node_weights_by_hand():
    w = [math.tanh((math.pi * (1 - n / 4)) ** math.e) for n in range(4)]
    w = [x / sum(w) for x in w]
    assert sym.node_weights(4).tolist() == pytest.approx(w, rel=1e-6)
    nodes = torch.tensor([[3.0, 1.0, 4.0, 2.0]])
    assert sym.sorted_node_target(nodes, sym.node_weights(4)).item() == pytest.approx(
        1 * w[0] + 2 * w[1] + 3 * w[2] + 4 * w[3], rel=1e-6
    )


def test_sorted_node_target_softly_drops_the_highest_of_384_estimates():
    w = sym.node_weights(384)
    assert w.sum().item() == pytest.approx(1.0) and (w[1:] <= w[:-1]).all()
    assert w[-1] / w[0] < 1e-4 and w[:150].sum() / w.sum() > 0.45  # the lowest nodes carry the target
    nodes = torch.randn(8, 384)
    assert (sym.sorted_node_target(nodes, w) < nodes.mean(-1)).all()  # below the plain mean


def test_temporal_advantage_by_hand():
    a = 1 / ((1 + math.sqrt(5)) / 2)
    q_next, q_bar = torch.tensor([10.0, 4.0, -2.0]), torch.tensor(6.0)
    advantage, q_t = sym.temporal_advantage(q_next, q_bar, a, 1e-3)
    expected_qt = [a * 6 + (1 - a) * q for q in (10.0, 4.0, -2.0)]
    assert q_t.tolist() == pytest.approx(expected_qt, rel=1e-6)
    assert advantage.tolist() == pytest.approx([(q - t) / abs(t) for q, t in zip((10.0, 4.0, -2.0), expected_qt)], rel=1e-6)
    assert advantage[0] > 0 > advantage[1]  # above / below the moving average


def test_resine_by_hand():
    layer = sym.ReSine(3)
    with torch.no_grad():
        layer.p.copy_(torch.tensor([0.0, 1.0, -2.0]))
    x = torch.tensor([0.7, -1.3, 2.0])
    expected = []
    for xi, pi in zip(x.tolist(), (0.0, 1.0, -2.0)):
        s = 1 / (1 + math.exp(-pi))
        f = s * math.sin(xi / s)
        expected.append(f / (1 + math.exp(-1.5 * f / s)))
    assert layer(x).tolist() == pytest.approx(expected, rel=1e-5)


def test_actor_noise_is_limited_and_evaluation_is_noise_free():
    torch.manual_seed(0)
    args = sym.Args(hidden=16, critic_nodes=4)
    agent = sym.Symphony(4, 2, torch.tensor([-2.0, -1.0]), torch.tensor([2.0, 1.0]), args)
    obs = torch.randn(1000, 4)
    direction, scale, beta = agent.actor(obs)
    assert direction.abs().max() < 1 and scale.min() > 0 and scale.max() < 1 and beta.min() > 0 and beta.max() < 1
    clean = torch.tanh(scale * direction) * torch.tensor([2.0, 1.0])
    assert torch.allclose(agent.act(obs), clean)
    noisy = agent.explore(obs)
    pre = torch.atanh(noisy / torch.tensor([2.0, 1.0]))
    noise = pre - scale * direction
    assert noise.abs().max() <= 1 + 1e-4 and noise.std() > 0.2  # N = clamp(N(0,1), -e, e) / e


def test_one_combined_step_updates_actor_and_critic_and_the_moving_average():
    torch.manual_seed(0)
    args = sym.Args(hidden=16, critic_nodes=4, batch_size=8)
    agent = sym.Symphony(3, 1, torch.tensor([-1.0]), torch.tensor([1.0]), args)
    agent.reward_scale.fill_(1.0)
    learner = sym.Learner(agent, args)
    assert len(learner.optimizer.param_groups) == 1 and learner.optimizer.defaults["betas"] == pytest.approx(
        (0.618, 0.995), abs=1e-3
    )
    buffer = FadingReplayBuffer(32, (3,), (1,))
    buffer.add(
        torch.randn(32, 3),
        torch.rand(32, 1) * 2 - 1,
        torch.randn(32),
        torch.randn(32, 3),
        torch.zeros(32, dtype=torch.bool),
        torch.zeros(32, dtype=torch.bool),
    )
    actor_before = [p.clone() for p in agent.actor.parameters()]
    critic_before = [p.clone() for p in agent.critic.parameters()]
    target_before = [p.clone() for p in agent.critic_target.parameters()]
    learner.update(buffer.sample(8))
    assert all(not torch.equal(a, b) for a, b in zip(actor_before, agent.actor.parameters()))
    assert all(not torch.equal(a, b) for a, b in zip(critic_before, agent.critic.parameters()))
    for t0, t1, c in zip(target_before, agent.critic_target.parameters(), agent.critic.parameters()):
        assert torch.allclose(t1, t0 + 0.005 * (c - t0), atol=1e-6)
    assert not torch.isnan(agent.q_bar)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_symphony_learns_inverted_pendulum(tmp_path, precision):
    run_agent(
        "symphony",
        "--precision",
        precision,
        "--env",
        "InvertedPendulum",
        "--total-timesteps",
        "3000",
        "--warmup-steps",
        "500",
        "--buffer-size",
        "3000",
        "--hidden",
        "64",
        "--critic-nodes",
        "16",
        "--batch-size",
        "64",
        "--updates-per-step",
        "1",
        "--learning-rate",
        "1e-3",
        "--eval-episodes",
        "5",
        "--log-every",
        "1000",
        run_dir=tmp_path / "run",
    )
    progress = read_progress(tmp_path / "run")
    first_returns = [v for _, _, v in progress["charts/episodic_return"][:20]]  # random warm-up: about 5-10
    final = progress["eval/return_mean"][-1][2]
    assert final > 50 and final > 4 * max(sum(first_returns) / len(first_returns), 1)
    assert evaluate_run(str(tmp_path / "run"), episodes=2).mean() > 50


def test_replay_order_s3_reaches_the_buffer_and_keeps_terminal_transitions(tmp_path):
    """A short InvertedPendulum run (an episode ends by falling every few dozen steps) turning its
    400-transition buffer over twice: with S3's order more of the stored transitions are terminal."""
    terminal = {}
    for order in ("ring", "s3"):
        flags = ["--env", "InvertedPendulum", "--total-timesteps", "1000", "--warmup-steps", "200", "--buffer-size", "400"]
        flags += ["--hidden", "16", "--critic-nodes", "4", "--batch-size", "16", "--updates-per-step", "0.2"]
        flags += ["--eval-episodes", "0", "--save-buffer", "--replay-order", order]
        run_agent("symphony", *flags, run_dir=tmp_path / order)
        buffer = load_checkpoint(tmp_path / order / "checkpoint.pt")["buffer"]
        terminal[order] = int(buffer["terminated"].sum())
    assert terminal["s3"] > 1.5 * terminal["ring"] > 0, terminal


@pytest.mark.slow
def test_symphony_resumes_a_killed_run(tmp_path):
    run_dir = tmp_path / "run"
    run_until_first_checkpoint_then_kill(
        "symphony",
        run_dir,
        "--env",
        "Pendulum",
        "--total-timesteps",
        "600",
        "--warmup-steps",
        "100",
        "--buffer-size",
        "1000",
        "--hidden",
        "16",
        "--critic-nodes",
        "4",
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
    assert first["global_step"] < 600 and len(first["buffer"]["rewards"]) == 1000  # warm-up replicated
    scale = first["agent"]["reward_scale"].item()
    resume_agent("symphony", run_dir)
    last = load_checkpoint(run_dir)
    assert last["global_step"] == 600
    assert last["agent"]["reward_scale"].item() == scale  # fixed by the first warm-up, not recomputed
    assert not torch.equal(last["agent"]["q_bar"], first["agent"]["q_bar"])
    steps = [s for s, _, _ in read_progress(run_dir)["charts/SPS"]]
    assert steps == sorted(steps) and len(steps) == len(set(steps)) == 6


def test_scale_and_beta_are_the_absolute_values_of_the_tanh_outputs():
    """The official mapping: S = |tanh(net/2)|, B likewise; swaddling sees them clamped to [1e-3, 1 - 1e-3]."""
    torch.manual_seed(0)
    args = sym.Args(hidden=16, critic_nodes=4, grad_dropout=0.0)
    agent = sym.Symphony(4, 2, -torch.ones(2), torch.ones(2), args)
    obs = torch.randn(256, 4)
    raw = torch.tanh(agent.actor.net(obs) / 2)
    direction, scale, beta = agent.actor(obs)
    assert torch.allclose(direction, raw[:, :2]) and torch.allclose(scale, raw[:, 2:4].abs())
    assert torch.allclose(beta, raw[:, 4:].abs())
    _, s_clamped, b_clamped = agent.action(obs, noise=False)
    assert torch.allclose(s_clamped, scale.clamp(1e-3, 1 - 1e-3)) and b_clamped.min() >= 1e-3
    sigmoid = sym.Symphony(4, 2, -torch.ones(2), torch.ones(2), sym.Args(hidden=16, critic_nodes=4, sb_map="sigmoid"))
    sigmoid.load_state_dict(agent.state_dict())
    assert torch.allclose(sigmoid.actor(obs)[1], (1 + raw[:, 2:4]) / 2, atol=1e-6)


def test_adam_without_bias_correction_by_hand_and_with_it_equal_to_adamw():
    torch.manual_seed(0)
    grads = [torch.randn(5) for _ in range(3)]
    lr, (b1, b2), wd, eps = 1e-2, (0.618, 0.995), 0.01, 1e-8
    p = torch.nn.Parameter(torch.randn(5))
    expected, m, v = p.detach().clone(), torch.zeros(5), torch.zeros(5)
    opt = sym.SymphonyAdam([p], lr, (b1, b2), weight_decay=wd)
    for g in grads:
        p.grad = g.clone()
        opt.step()
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        expected = expected - lr * (m / (v.sqrt() + eps) + wd * expected)
    assert torch.allclose(p.detach(), expected, atol=1e-6)
    # with bias correction it is torch's AdamW, step for step
    q, r = torch.nn.Parameter(torch.randn(5)), None
    r = torch.nn.Parameter(q.detach().clone())
    mine = sym.SymphonyAdam([q], lr, (b1, b2), weight_decay=wd, bias_correction=True)
    torchs = torch.optim.AdamW([r], lr=lr, betas=(b1, b2), weight_decay=wd, eps=eps)
    for g in grads:
        q.grad, r.grad = g.clone(), g.clone()
        mine.step()
        torchs.step()
    assert torch.allclose(q.detach(), r.detach(), atol=1e-6)


def test_gradient_dropout_keeps_the_value_and_passes_about_half_the_gradients():
    torch.manual_seed(0)
    layer = sym.GradientDropout(0.5)
    x = torch.randn(4000, requires_grad=True)
    y = layer(x)
    assert torch.equal(y.detach(), x.detach())
    y.sum().backward()
    assert set(x.grad.unique().tolist()) == {0.0, 1.0} and 0.45 < x.grad.mean().item() < 0.55
    layer.eval()
    x.grad = None
    layer(x).sum().backward()
    assert torch.equal(x.grad, torch.ones(4000))  # evaluation: no dropout


def test_defaults_follow_the_official_code():
    args = sym.Args()
    assert (args.batch_size, args.updates_per_step, args.warmup_steps, args.buffer_size) == (384, 3.0, 10_240, 512_000)
    assert (args.bias_correction, args.grad_dropout, args.sb_map, args.warmup_actions) == (False, 0.5, "abs", "policy")
    assert args.replay_order == "ring"  # the one difference from S3 kept by default: see the docstring
    agent = sym.Symphony(4, 2, -torch.ones(2), torch.ones(2), sym.Args(hidden=64, critic_nodes=4))
    assert agent.q_bar.item() == 0.0  # Qbar starts at 0
    p = agent.actor.net[3].p
    assert p.abs().max() <= 1 / 8 and p.std() > 0.03  # ReSine's p ~ U(-1/sqrt(64), 1/sqrt(64))


def test_warns_when_the_replicated_warm_up_would_draw_most_batches_to_the_end():
    # Default buffer on a 100k-step run: 89,760 fresh transitions of 512,000 draw 23% of the batches.
    args = sym.Args(total_timesteps=100_000)
    buffer = FadingReplayBuffer(args.buffer_size, (3,), (1,))
    warning = sym.warm_up_dominance(args, buffer)
    assert warning is not None and "--buffer-size 512,000" in warning and " 23% " in warning and "89,760" in warning
    # A buffer the run can overwrite, or the long runs the default is meant for: no warning.
    short = sym.Args(total_timesteps=100_000, buffer_size=40_960)
    assert sym.warm_up_dominance(short, FadingReplayBuffer(short.buffer_size, (3,), (1,))) is None
    assert sym.warm_up_dominance(sym.Args(total_timesteps=3_000_000), buffer) is None


@pytest.mark.parametrize("bias_correction", [False, True])
def test_whole_update_is_the_eager_update_as_tensor_code(bias_correction):
    """whole_update (what --compile compiles into one graph) run eagerly: the same parameters,
    target critic, optimizer moments, Qbar and losses as update()."""
    generator = torch.Generator().manual_seed(1)
    data = [
        (
            torch.randn(8, 3, generator=generator),
            torch.rand(8, 1, generator=generator) * 2 - 1,
            torch.randn(8, generator=generator),
            torch.randn(8, 3, generator=generator),
            (torch.rand(8, generator=generator) < 0.2).float(),
        )
        for _ in range(4)
    ]
    runs = []
    for functional in (False, True):
        torch.manual_seed(0)
        args = sym.Args(hidden=16, critic_nodes=4, batch_size=8, bias_correction=bias_correction, weight_decay=0.1)
        agent = sym.Symphony(3, 1, torch.tensor([-1.0]), torch.tensor([1.0]), args)
        agent.reward_scale.fill_(1.0)  # set from the warm-up's rewards in a run
        learner = sym.Learner(agent, args)
        torch.manual_seed(3)
        for obs, actions, rewards, next_obs, terminated in data:
            if functional:
                losses = learner.whole_update(obs, actions, rewards, next_obs, terminated)
            else:
                losses = learner.update(sym.Batch(obs, actions, rewards, next_obs, terminated, torch.zeros(8)))
        moments = learner.optimizer.state[learner.flat.param]
        runs.append((agent.state_dict(), moments["v"].clone(), {k: float(v) for k, v in losses.items()}))
    (eager, eager_v, eager_losses), (ours, our_v, our_losses) = runs
    for name in eager:
        torch.testing.assert_close(ours[name], eager[name], rtol=1e-5, atol=1e-6, msg=name)
    torch.testing.assert_close(our_v, eager_v, rtol=1e-5, atol=1e-9)
    assert all(math.isfinite(v) for v in eager_losses.values()), eager_losses
    assert our_losses == pytest.approx(eager_losses, rel=1e-5, abs=1e-6)


def test_action_bound_unit_is_the_official_a_max_of_one_on_any_env():
    """``--action-bound env`` scales tanh to the env's bounds; ``unit`` keeps a_max = 1 and leaves the
    clipping to the env, as the official code does on every env (Pendulum: bounds [-2, 2])."""
    import envs

    vec_env = envs.make("Pendulum-v1", num_envs=1, backend="gymnasium", seed=0)
    try:
        scaled = sym.make_agent(sym.Args(hidden=16, critic_nodes=4), vec_env)
        unit = sym.make_agent(sym.Args(hidden=16, critic_nodes=4, action_bound="unit"), vec_env)
    finally:
        vec_env.close()
    assert scaled.action_scale.tolist() == [2.0] and scaled.action_bias.tolist() == [0.0]
    assert unit.action_scale.tolist() == [1.0] and unit.action_bias.tolist() == [0.0]
    unit.load_state_dict(scaled.state_dict() | {"action_scale": unit.action_scale, "action_bias": unit.action_bias})
    obs = torch.randn(64, 3)
    assert torch.allclose(scaled.act(obs), 2 * unit.act(obs))
