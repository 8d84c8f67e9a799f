"""Symphony with the Fading Replay Buffer (Ishuov et al., 2025) for continuous control.

    python agents/symphony.py --env Humanoid
    python agents/symphony.py --env Humanoid --fading uniform      # ablation: uniform replay

What Symphony puts together, as restated in REFERENCE.md:
- **Fading Replay Buffer**: sampling probability ``tanh((pi * u) ** e)`` of the relative age ``u``
  (the oldest ~40% fade out); capacity 512,000. A warm-up of 10,240 exploration steps is replicated
  to fill the whole buffer, and rewards are scaled by ``1 / mean|r|`` of that exploration data.
- **Critic**: 3 sub-networks of 128 outputs each, 384 "nodes", all regressed onto one target. The
  target sorts the target critic's nodes ascending and weights them with
  ``tanh((pi * (1 - n / 384)) ** e)``, which softly drops the highest estimates.
- **Temporal Advantage**: ``Q_T = a * Qbar + (1 - a) * q'``, ``a = 1 / phi``, with ``Qbar`` the stored
  batch mean of the previous ``Q_T``; the actor maximizes ``ReHAE((q' - Q_T) / |Q_T|)`` where ``q'``
  is the target critic at ``(s', actor(s'))``.
- **Actor with limited parametric noise**: ``tanh(net(s) / 2)`` split into direction ``A``, scale
  ``S``, beta ``B``; ``a = a_max * tanh(S * A + N)`` with ``N = clamp(N(0, 1), -e, e) / e``.
- **Swaddling** ``mean[Omega(S^(1 / B_detached)) + B * omega(S) + Omega(B^2)]``,
  ``Omega(x) = ln((1 + x) / (1 - x))``, ``omega(x) = x ln x``: penalizes the action *strength*.
- **One loss, one pass**: ``L = -ReHAE(A) + ReHSE(r + gamma (1 - d) q' - Q(s, a)) + Sw`` with
  ``ReHSE(e) = e tanh(e / 2)`` and ``ReHAE(e) = |e| tanh(e / 2)``; one optimizer step updates actor
  and critic together (Adam-like, betas (0.618, 0.995), decoupled decay 0.01, lr 1e-4), 3 steps per
  environment step, tau 0.005.
- **Blocks**: ``Linear -> LayerNorm -> Linear -> ReSine -> Linear``, hidden 512, with ReSine
  ``s = sigmoid(p); f = s sin(x / s); out = f sigmoid(1.5 f / s)``, ``p`` learnable per unit.

The three critic sub-networks are one ``Ensemble``: stacked weights, one batched call.

Choices made here (not fixed by REFERENCE.md; each is a flag or noted in the code):
- ``S`` and ``B`` must lie in (0, 1) for ``S^(1/B)``, ``x ln x`` and ``Omega`` to be defined: they
  are mapped from the actor's ``tanh(net / 2)`` outputs as ``(1 + y) / 2`` (i.e. ``sigmoid(net)``).
  The direction ``A`` keeps ``tanh(net / 2)`` in (-1, 1).
- ``q'`` uses the actor's noisy action at ``s'`` (reparameterized, like SAC's sampled next action);
  swaddling is computed on the same forward pass (the actor's ``S``, ``B`` at ``s'``).
- ``Q_T`` is a baseline: detached in the advantage. ``|Q_T|`` is clamped at 1e-3 (``--adv-eps``).
  ``Qbar`` starts at the first batch's mean of ``q'``.
- The exploration warm-up takes uniformly random actions. ``gamma = 0.99``, batch 256, ReSine
  ``p`` initialized to 0 (``s = 0.5``). ``Omega`` arguments are clamped to ``1 - 1e-6``.
- Evaluation acts with ``a_max * tanh(S * A)`` (no noise); there is no observation normalization.
- Truncated episodes bootstrap from the true final observation (``info["final_obs"]``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import tyro
from torch import nn

import envs
from cleanrl_style import Run, RunArgs, args_from_dict
from cleanrl_style.ensemble import Ensemble
from cleanrl_style.replay import Batch, FadingReplayBuffer, fading_tanh

PHI = (1 + math.sqrt(5)) / 2


@dataclass
class Args(RunArgs):
    env: str = "Humanoid"
    """environment: a short name (Humanoid, Ant, Hopper, ...) or any registered Gymnasium id"""
    buffer_size: int = 512_000
    """Fading Replay Buffer capacity"""
    warmup_steps: int = 10_240
    """exploration steps collected first, then replicated to fill the buffer"""
    fading: str = "tanh"
    """replay weight over age: tanh (Symphony's fading) or uniform (ablation)"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak rate of the target critic"""
    batch_size: int = 256
    """minibatch size of each gradient step"""
    updates_per_step: float = 3.0
    """gradient steps per environment step"""
    learning_rate: float = 1e-4
    """learning rate of the one optimizer (actor and critic)"""
    betas: tuple[float, float] = (1 / PHI, 0.995)
    """Adam betas"""
    weight_decay: float = 0.01
    """decoupled weight decay"""
    hidden: int = 512
    """hidden width of the actor and of each critic sub-network"""
    critic_nets: int = 3
    """critic sub-networks"""
    critic_nodes: int = 128
    """outputs ("nodes") per critic sub-network"""
    advantage_smoothing: float = 1 / PHI
    """a in Q_T = a * Qbar + (1 - a) * q'"""
    adv_eps: float = 1e-3
    """lower clamp of |Q_T| in the advantage's denominator"""
    save_buffer: bool = False
    """put the replay buffer in the checkpoints, so a resumed run keeps its data (large files)"""
    log_every: int = 1_000
    """log losses every this many environment steps"""


# ---------------------------------------------------------------------------------------------
# Formulas
# ---------------------------------------------------------------------------------------------
def rehse(e: torch.Tensor) -> torch.Tensor:
    """Rectified hubber symmetric error ``e * tanh(e / 2)``: ~e^2/2 near 0, ~|e| far away, >= 0."""
    return e * torch.tanh(e / 2)


def rehae(e: torch.Tensor) -> torch.Tensor:
    """Rectified hubber asymmetric error ``|e| * tanh(e / 2)``: the sign of ``e``, ReHSE's size."""
    return e.abs() * torch.tanh(e / 2)


def big_omega(x: torch.Tensor) -> torch.Tensor:
    """``ln((1 + x) / (1 - x))`` (= 2 artanh x), with ``x`` clamped below 1."""
    x = x.clamp(max=1 - 1e-6)
    return torch.log1p(x) - torch.log1p(-x)


def small_omega(x: torch.Tensor) -> torch.Tensor:
    """``x ln x`` (0 at x = 0)."""
    return torch.special.xlogy(x, x)


def swaddling(scale: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``mean[Omega(S^(1 / B_detached)) + B * omega(S) + Omega(B^2)]`` for ``S, B`` in (0, 1)."""
    strength = torch.exp(torch.log(scale.clamp_min(1e-12)) / beta.detach())
    return (big_omega(strength) + beta * small_omega(scale) + big_omega(beta**2)).mean()


def node_weights(num_nodes: int) -> torch.Tensor:
    """Weights of the ascending-sorted target nodes, ``tanh((pi (1 - n / N)) ** e)`` normalized to sum 1."""
    n = torch.arange(num_nodes, dtype=torch.float64)
    w = torch.tanh((math.pi * (1 - n / num_nodes)) ** math.e)
    return (w / w.sum()).float()


def sorted_node_target(nodes: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``nodes`` ``(B, N)`` sorted ascending and weighted: the lowest count most, the highest least."""
    return (nodes.sort(dim=-1).values * weights).sum(-1)


def temporal_advantage(q_next: torch.Tensor, q_bar: torch.Tensor, a: float, eps: float):
    """``Q_T = a Qbar + (1 - a) q'`` (a detached baseline) and ``A = (q' - Q_T) / |Q_T|``, each ``(B,)``."""
    q_t = (a * q_bar + (1 - a) * q_next).detach()
    return (q_next - q_t) / q_t.abs().clamp_min(eps), q_t


# ---------------------------------------------------------------------------------------------
# Networks
# ---------------------------------------------------------------------------------------------
class ReSine(nn.Module):
    """``s = sigmoid(p); f = s sin(x / s); out = f sigmoid(1.5 f / s)``, one learnable ``p`` per unit."""

    ensemble_broadcast = True  # p only broadcasts elementwise: the critic Ensemble may stack it (E, 1, dim)

    def __init__(self, dim: int):
        super().__init__()
        self.p = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(self.p)
        f = s * torch.sin(x / s)
        return f * torch.sigmoid(1.5 * f / s)


def block(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    """``Linear -> LayerNorm -> Linear -> ReSine -> Linear``."""
    return nn.Sequential(
        nn.Linear(in_dim, hidden), nn.LayerNorm(hidden), nn.Linear(hidden, hidden), ReSine(hidden), nn.Linear(hidden, out_dim)
    )


class Actor(nn.Module):
    """Direction ``A`` in (-1, 1), scale ``S`` and beta ``B`` in (0, 1), each ``(B, act_dim)``."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int):
        super().__init__()
        self.net = block(obs_dim, hidden, 3 * act_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        direction, scale, beta = torch.tanh(self.net(obs) / 2).chunk(3, dim=-1)
        return direction, (1 + scale) / 2, (1 + beta) / 2


class Symphony(nn.Module):
    """Actor, critic ensemble, target critic, the running ``Qbar`` and the reward scale."""

    def __init__(self, obs_dim: int, act_dim: int, action_low: torch.Tensor, action_high: torch.Tensor, args: Args):
        super().__init__()
        self.actor = Actor(obs_dim, act_dim, args.hidden)
        self.critic = Ensemble(lambda: block(obs_dim + act_dim, args.hidden, args.critic_nodes), args.critic_nets)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.register_buffer("action_scale", (action_high - action_low) / 2)
        self.register_buffer("action_bias", (action_high + action_low) / 2)
        self.register_buffer("node_weights", node_weights(args.critic_nets * args.critic_nodes))
        self.register_buffer("q_bar", torch.tensor(float("nan")))  # nan: not set yet
        self.register_buffer("reward_scale", torch.tensor(float("nan")))  # set at the end of the warm-up

    def action(self, obs: torch.Tensor, noise: bool = True):
        """``a_max * tanh(S * A + N)``, ``N = clamp(N(0,1), -e, e) / e``; also returns ``S`` and ``B``."""
        direction, scale, beta = self.actor(obs)
        pre = scale * direction
        if noise:
            pre = pre + torch.randn_like(pre).clamp(-math.e, math.e) / math.e
        return self.action_bias + self.action_scale * torch.tanh(pre), scale, beta

    def nodes(self, obs: torch.Tensor, action: torch.Tensor, target: bool = False) -> torch.Tensor:
        """All critic nodes, ``(B, critic_nets * critic_nodes)``."""
        critic = self.critic_target if target else self.critic
        out = critic(torch.cat([obs, action], -1))  # (nets, B, nodes)
        return out.permute(1, 0, 2).reshape(obs.shape[0], -1)

    @torch.no_grad()
    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        return self.action(obs, noise=True)[0]

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action (no noise), for evaluation."""
        return self.action(obs, noise=False)[0]


# ---------------------------------------------------------------------------------------------
# One gradient step: actor and critic from one combined loss
# ---------------------------------------------------------------------------------------------
class Learner:
    def __init__(self, agent: Symphony, args: Args):
        self.agent, self.args = agent, args
        params = list(agent.actor.parameters()) + list(agent.critic.parameters())
        self.optimizer = torch.optim.AdamW(
            params, lr=args.learning_rate, betas=tuple(args.betas), weight_decay=args.weight_decay, fused=True
        )

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        agent, args = self.agent, self.args
        rewards = batch.rewards * agent.reward_scale

        # q' at (s', actor(s')): the critic's target (detached) and the actor's objective (with gradient).
        next_action, scale, beta = agent.action(batch.next_obs)
        q_next = sorted_node_target(agent.nodes(batch.next_obs, next_action, target=True), agent.node_weights)

        # Temporal Advantage against the moving average Qbar of Q_T.
        q_bar = torch.where(torch.isnan(agent.q_bar), q_next.detach().mean(), agent.q_bar)
        advantage, q_t = temporal_advantage(q_next, q_bar, args.advantage_smoothing, args.adv_eps)
        agent.q_bar.copy_(q_t.mean())

        target = rewards + args.gamma * (1.0 - batch.terminated) * q_next.detach()
        q = agent.nodes(batch.obs, batch.actions)
        actor_loss = -rehae(advantage).mean()
        critic_loss = rehse(target.unsqueeze(-1) - q).mean()
        swaddle = swaddling(scale, beta)
        loss = actor_loss + critic_loss + swaddle

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(agent.critic_target.parameters()), list(agent.critic.parameters()), args.tau)
        return {
            "losses/loss": loss.detach(),
            "losses/actor_loss": actor_loss.detach(),
            "losses/critic_loss": critic_loss.detach(),
            "losses/swaddling": swaddle.detach(),
            "losses/qf_values": q.detach().mean(),
            "losses/q_bar": agent.q_bar.clone(),
            "losses/action_scale": scale.detach().mean(),
            "losses/beta": beta.detach().mean(),
        }


def load_policy(checkpoint: dict, vec_env: envs.TorchVectorEnv) -> Symphony:
    args = args_from_dict(Args, checkpoint["args"])
    agent = Symphony(
        vec_env.single_observation_space.shape[0],
        vec_env.single_action_space.shape[0],
        vec_env.action_low.cpu(),
        vec_env.action_high.cpu(),
        args,
    )
    agent.load_state_dict(checkpoint["agent"])
    return agent


if __name__ == "__main__":
    run = Run(tyro.cli(Args), agent_file=__file__)
    args, device = run.args, run.device
    weight_fns = {"tanh": fading_tanh, "uniform": torch.ones_like}
    if args.fading not in weight_fns:
        raise SystemExit(f"--fading must be one of {', '.join(weight_fns)}, got {args.fading!r}")

    vec_env = envs.make(args.env, args.num_envs, backend=args.backend, device=device, seed=args.seed + run.start_step)
    obs_dim = vec_env.single_observation_space.shape[0]
    act_dim = vec_env.single_action_space.shape[0]
    agent = Symphony(obs_dim, act_dim, vec_env.action_low, vec_env.action_high, args).to(device)
    learner = Learner(agent, args)
    rb = FadingReplayBuffer(args.buffer_size, (obs_dim,), (act_dim,), device=device, weight_fn=weight_fns[args.fading])
    replicate_at: int | None = args.warmup_steps  # step at which the warm-up data fills the buffer
    if run.checkpoint is not None:
        agent.load_state_dict(run.checkpoint["agent"])
        learner.optimizer.load_state_dict(run.checkpoint["optimizer"])
        if "buffer" in run.checkpoint:
            rb.load_state_dict(run.checkpoint["buffer"])
            if run.start_step >= args.warmup_steps:
                replicate_at = None
        else:  # without saved data, collect (with the current policy) and replicate a new warm-up
            replicate_at = run.start_step + args.warmup_steps
    updates_per_vector_step = max(1, round(args.updates_per_step * args.num_envs))

    global_step = run.start_step
    obs, _ = vec_env.reset()
    recent_returns: list[float] = []
    losses: dict[str, torch.Tensor] = {}
    while global_step < args.total_timesteps:
        # ---- act and store -----------------------------------------------------------------------
        if global_step < args.warmup_steps:  # exploration warm-up: uniformly random actions
            action = vec_env.action_low + (vec_env.action_high - vec_env.action_low) * torch.rand(
                (args.num_envs, act_dim), device=device
            )
        else:
            action = agent.explore(obs)
        next_obs, reward, terminated, truncated, info = vec_env.step(action)
        rb.add(obs, action, reward, info["final_obs"], terminated, truncated)
        obs = next_obs
        global_step += args.num_envs

        done = info["done"]
        if done.any():
            returns = info["episode_return"][done]
            recent_returns = (recent_returns + returns.tolist())[-20:]
            run.log(
                global_step,
                {
                    "charts/episodic_return": returns.mean().item(),
                    "charts/episodic_length": info["episode_length"][done].float().mean().item(),
                },
            )

        # ---- end of the warm-up: fix the reward scale, replicate the data to fill the buffer ------
        if replicate_at is not None and global_step >= replicate_at:
            if torch.isnan(agent.reward_scale):  # once per run: 1 / mean|r| of the exploration data
                agent.reward_scale.fill_(1.0 / rb.rewards[: len(rb)].abs().mean().clamp_min(1e-8).item())
            rb.fill_by_repeating()
            replicate_at = None
            print(
                f"warm-up done at step {global_step}: buffer filled to {len(rb)}, reward scale {agent.reward_scale.item():.4g}"
            )

        # ---- learn -------------------------------------------------------------------------------
        if replicate_at is None:
            for _ in range(updates_per_vector_step):
                losses = learner.update(rb.sample(args.batch_size))

        # ---- logging and checkpoints -------------------------------------------------------------
        if global_step % args.log_every < args.num_envs:
            sps = run.sps(global_step)
            metrics = {"charts/SPS": sps, "charts/learning_rate": learner.optimizer.param_groups[0]["lr"]}
            metrics.update({k: v.item() for k, v in losses.items()})
            run.log(global_step, metrics)
            run.progress(global_step, np.mean(recent_returns) if recent_returns else None, sps)
        if run.checkpoint_due(global_step) or global_step >= args.total_timesteps:
            extra = {"buffer": rb.state_dict()} if args.save_buffer else {}
            run.save(global_step, agent=agent.state_dict(), optimizer=learner.optimizer.state_dict(), **extra)
    vec_env.close()

    run.final_evaluation(agent, global_step)
    run.close()
