"""SAC with NaP: the soft target, the policy head, the projection, learning, resuming."""

import copy
import statistics

import pytest
import torch
from agent_runs import resume_agent, run_seeds, run_until_first_checkpoint_then_kill

from cleanrl_style.blocks.replay import ReplayBuffer
from cleanrl_style.runs.checkpoint import load_checkpoint
from cleanrl_style.runs.evaluate import evaluate_run, import_agent
from cleanrl_style.runs.logger import read_progress

sac = import_agent("agents/sac_nap.py")


def make_agent(**overrides):
    args = sac.Args(hidden_sizes=(32, 32), batch_size=16, **overrides)
    agent = sac.SoftActorCritic(3, 1, torch.tensor([-2.0]), torch.tensor([2.0]), args)
    return agent, sac.Learner(agent, args), args


def test_soft_q_target_by_hand():
    next_q = torch.tensor([[5.0, 1.0], [3.0, 2.0]])  # two critics, two transitions
    target = sac.soft_q_target(
        torch.tensor([1.0, 1.0]), torch.tensor([0.0, 0.0]), next_q, torch.tensor([-1.0, 0.5]), torch.tensor(0.2), gamma=0.9
    )
    # r + gamma * (min_k Q_k - alpha * logp)
    assert target.tolist() == pytest.approx([1 + 0.9 * (3.0 + 0.2), 1 + 0.9 * (1.0 - 0.1)])


def test_termination_stops_the_bootstrap():
    target = sac.soft_q_target(
        torch.tensor([2.0]),
        torch.tensor([1.0]),
        torch.tensor([[7.0], [9.0]]),
        torch.tensor([0.3]),
        torch.tensor(0.5),
        gamma=0.99,
    )
    assert target.tolist() == [2.0]


def test_truncation_bootstraps_from_the_final_observation():
    """A time-limit end is stored with its final observation and the target bootstraps from it."""
    torch.manual_seed(0)
    agent, _, args = make_agent()
    final_obs, reset_obs = torch.tensor([[1.0, 0.0, 0.5]]), torch.tensor([[-1.0, 0.0, -3.0]])
    buffer = ReplayBuffer(4, (3,), (1,))
    buffer.add(reset_obs, torch.zeros(1, 1), torch.tensor([1.0]), final_obs, torch.tensor([False]), torch.tensor([True]))
    batch = buffer.sample(1)
    assert torch.equal(batch.next_obs, final_obs) and batch.terminated.item() == 0.0
    with torch.no_grad():
        next_q = agent.q_values(agent.obs_norm(batch.next_obs), torch.zeros(1, 1), target=True)
        target = sac.soft_q_target(batch.rewards, batch.terminated, next_q, torch.zeros(1), torch.tensor(0.0), 0.99)
    assert target.item() == pytest.approx(1.0 + 0.99 * next_q.min().item())
    assert target.item() != 1.0


def test_log_std_maps_onto_its_bounds():
    agent, _, args = make_agent()
    last = agent.actor.net[-1]
    with torch.no_grad():
        last.weight.zero_()
        for raw, expected in [
            (0.0, (args.log_std_min + args.log_std_max) / 2),
            (50.0, args.log_std_max),
            (-50.0, args.log_std_min),
        ]:
            last.bias.fill_(raw)
            _, log_std = agent.actor(torch.zeros(1, 3))
            assert log_std.item() == pytest.approx(expected)


def test_log_prob_is_the_squashed_gaussian_density():
    torch.manual_seed(0)
    agent, _, _ = make_agent()
    x = torch.randn(4, 3)
    torch.manual_seed(1)
    action, log_prob = agent.sample(x)
    mean, log_std = agent.actor(x)
    u = torch.atanh((action / 2.0).clamp(-0.999999, 0.999999))
    gaussian = torch.distributions.Normal(mean, log_std.exp()).log_prob(u).sum(-1)
    by_hand = gaussian - torch.log(2.0 * (1 - torch.tanh(u) ** 2) + 1e-6).sum(-1)
    assert torch.allclose(log_prob, by_hand, atol=1e-3)


def test_critic_ensemble_is_one_batched_call_equal_to_its_members():
    agent, _, _ = make_agent()
    x, a = torch.randn(5, 3), torch.randn(5, 1)
    members = agent.critic.members()
    by_member = torch.stack([m(torch.cat([x, a], -1)).squeeze(-1) for m in members])
    assert torch.allclose(agent.q_values(x, a), by_member, atol=1e-6)
    assert not torch.equal(by_member[0], by_member[1])  # independently initialized


def _hidden_norms(agent):
    members = agent.critic.members()
    return [m[i].weight.norm().item() for m in members for i in (0, 3)] + [
        agent.actor.net[i].weight.norm().item() for i in (0, 3)
    ]


@pytest.mark.parametrize("nap", [True, False])
def test_nap_keeps_every_hidden_layer_at_its_initial_norm(nap):
    torch.manual_seed(0)
    agent, learner, args = make_agent(nap=nap, policy_lr=1e-2, q_lr=1e-2)
    buffer = ReplayBuffer(64, (3,), (1,))
    buffer.add(
        torch.randn(64, 3),
        torch.rand(64, 1) * 4 - 2,
        torch.randn(64) * 10,
        torch.randn(64, 3),
        torch.zeros(64, dtype=torch.bool),
        torch.zeros(64, dtype=torch.bool),
    )
    before = _hidden_norms(agent)
    for _ in range(30):
        learner.update(buffer.sample(args.batch_size))
    after = _hidden_norms(agent)
    if nap:
        assert after == pytest.approx(before, rel=1e-5)
    else:
        assert max(abs(a / b - 1) for a, b in zip(after, before)) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_sac_nap_learns_pendulum(tmp_path, precision):
    # Three seeds, asserted on their median: on an Intel Xeon (AMX) seed 1 evaluates at -843 while
    # seeds 2-5 reach -126 to -161 (fp32, 6,000 steps), and on an AMD EPYC seed 1 passes alone.
    run_dirs = run_seeds(
        "sac_nap",
        (1, 2, 3),
        tmp_path,
        "--precision",
        precision,
        "--env",
        "Pendulum",
        "--total-timesteps",
        "6000",  # the temperature starts at 1 (CleanRL's): it takes ~2,000 updates to settle
        "--learning-starts",
        "500",
        "--hidden-sizes",
        "64",
        "64",
        "--batch-size",
        "64",
        "--no-anneal-lr",
        "--eval-episodes",
        "5",
        "--log-every",
        "1000",
    )
    finals, gains = [], []
    for run_dir in run_dirs:
        progress = read_progress(run_dir)
        finals.append(progress["eval/return_mean"][-1][2])
        first_returns = [v for _, _, v in progress["charts/episodic_return"][:5]]  # random warm-up: about -1200
        gains.append(finals[-1] - max(first_returns))
    assert statistics.median(finals) > -700, finals
    assert statistics.median(gains) > 300, gains
    # the policy reloads from the checkpoint alone (normalizer statistics included): the best seed's
    best = run_dirs[finals.index(max(finals))]
    assert evaluate_run(str(best), episodes=2).mean() > -700


@pytest.mark.slow
def test_sac_nap_resumes_a_killed_run_with_its_buffer(tmp_path):
    run_dir = tmp_path / "run"
    run_until_first_checkpoint_then_kill(
        "sac_nap",
        run_dir,
        "--env",
        "Pendulum",
        "--total-timesteps",
        "1500",
        "--learning-starts",
        "200",
        "--hidden-sizes",
        "16",
        "16",
        "--batch-size",
        "16",
        "--checkpoint-every",
        "500",
        "--save-buffer",
        "--eval-episodes",
        "0",
        "--log-every",
        "100",
    )
    first = load_checkpoint(run_dir)
    assert first["global_step"] < 1500 and len(first["buffer"]["rewards"]) == first["global_step"]
    resume_agent("sac_nap", run_dir)
    last = load_checkpoint(run_dir)
    assert last["global_step"] == 1500
    assert len(last["buffer"]["rewards"]) == 1500  # the saved transitions were kept, not collected again
    steps = [s for s, _, _ in read_progress(run_dir)["charts/SPS"]]
    assert steps == sorted(steps) and len(steps) == len(set(steps)) == 15  # no row lost or duplicated
    assert last["agent"]["obs_norm.count"] > first["agent"]["obs_norm.count"]


@pytest.mark.parametrize("nap", [True, False])
def test_whole_update_is_the_eager_update_as_tensor_code(nap):
    """whole_update (what --compile compiles into one graph) run eagerly: the same parameters,
    optimizer state and losses as update(), through a learning-rate change and a reload."""
    buffer = ReplayBuffer(64, (3,), (1,))
    generator = torch.Generator().manual_seed(1)
    buffer.add(
        torch.randn(64, 3, generator=generator),
        torch.rand(64, 1, generator=generator) * 4 - 2,
        torch.randn(64, generator=generator),
        torch.randn(64, 3, generator=generator),
        torch.rand(64, generator=generator) < 0.2,
        torch.zeros(64, dtype=torch.bool),
    )
    torch.manual_seed(2)
    batches = [buffer.sample(16) for _ in range(6)]
    runs = []
    for functional in (False, True):
        torch.manual_seed(0)
        agent, learner, _ = make_agent(nap=nap, layer_norm=nap)
        torch.manual_seed(3)
        for i, batch in enumerate(batches):
            if i == 2:
                learner.set_lr_fraction(0.5)
            if i == 4:  # a resumed run: the optimizers' state tensors are replaced
                learner.load_state_dict(copy.deepcopy(learner.state_dict()))
            if functional:
                if learner._state is None:
                    learner._state = learner._gather_state()
                b = batch
                losses = learner.whole_update(learner._state, b.obs, b.actions, b.rewards, b.next_obs, b.terminated)
            else:
                losses = learner.update(batch)
        runs.append(
            (agent.state_dict(), learner.critic_opt.state_dict()["state"][0], {k: float(v) for k, v in losses.items()})
        )
    (eager, eager_adam, eager_losses), (ours, our_adam, our_losses) = runs
    for name in eager:
        torch.testing.assert_close(ours[name], eager[name], rtol=1e-5, atol=1e-6, msg=name)
    torch.testing.assert_close(our_adam["exp_avg_sq"], eager_adam["exp_avg_sq"], rtol=1e-5, atol=1e-9)
    assert float(our_adam["step"]) == float(eager_adam["step"]) == 6
    assert our_losses == pytest.approx(eager_losses, rel=1e-5, abs=1e-6)
    torch.manual_seed(0)
    assert not torch.equal(make_agent()[0].state_dict()["log_alpha"], eager["log_alpha"])  # the temperature moved
