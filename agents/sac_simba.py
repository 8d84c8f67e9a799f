"""SAC with the SimBa encoder (Lee et al., ICLR 2025) for continuous control.

    python agents/sac_simba.py --env Humanoid
    python agents/sac_simba.py --env Humanoid --critic-blocks 4 --critic-width 1024   # scaling study
    python agents/sac_simba.py --env Humanoid --updates-per-step 4                    # replay-ratio study

SimBa adds three things to the networks of SAC: running observation normalization, a residual
encoder of pre-LayerNorm MLP blocks (``h + W2(ReLU(W1(LayerNorm(h))))``, W1: d -> 4d, W2: 4d -> d),
and a LayerNorm after the last block. The paper's SAC defaults are the defaults here: actor 1 block
of width 128, critics 2 blocks of width 512, AdamW (lr 1e-4, weight decay 1e-2), temperature
initialized to 0.01 with target entropy -|A|/2 (its optimizer without weight decay), tau 0.005,
batch 256, 1M buffer, 5,000 random steps, 2 gradient steps per environment step. The log-std is
mapped onto [-10, 2] as ``-10 + 12 * 0.5 * (1 + tanh(raw))``; evaluation acts with ``tanh(mean)``.
Each gradient step updates the actor, then the temperature, then the critics (their target uses the
fresh actor and temperature), then the target critics.

The two critics are one ``Ensemble``: stacked weights, one batched call for both.

Choices made here (not fixed by REFERENCE.md):
- ``--clipped-double-q auto`` (default): the target and the actor take the minimum of the two
  critics when the task is episodic and their mean otherwise. "Episodic" is decided when learning
  starts, from whether any episode in the random warm-up data terminated (Hopper, Walker2d, Ant,
  Humanoid do; HalfCheetah, Swimmer, Pendulum only truncate). The decision is saved in the checkpoint.
- Weight decay applies to every actor and critic parameter (LayerNorm and biases included).
- The policy head is a linear layer with orthogonal init (gain 1); the critic head likewise.
- Observation statistics update from every environment step (random warm-up included) and are
  applied to sampled batches with their current values; they are saved in every checkpoint.
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
from cleanrl_style import Run, RunArgs, RunningNorm, SimbaEncoder, args_from_dict, layer_init
from cleanrl_style.ensemble import Ensemble
from cleanrl_style.replay import Batch, ReplayBuffer


@dataclass
class Args(RunArgs):
    env: str = "Humanoid"
    """environment: a short name (Humanoid, Ant, Hopper, ...) or any registered Gymnasium id"""
    buffer_size: int = 1_000_000
    """replay capacity in transitions"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak rate of the target critics"""
    batch_size: int = 256
    """minibatch size of each gradient step"""
    learning_starts: int = 5_000
    """environment steps of uniformly random actions before learning starts"""
    updates_per_step: float = 2.0
    """gradient steps per environment step (update-to-data ratio; SimBa: 2)"""
    learning_rate: float = 1e-4
    """AdamW learning rate of the actor and the critics"""
    weight_decay: float = 1e-2
    """AdamW decoupled weight decay of the actor and the critics"""
    alpha_lr: float = 1e-4
    """Adam learning rate of the temperature (no weight decay)"""
    alpha: float = 0.01
    """initial entropy temperature"""
    target_entropy_scale: float = 0.5
    """target entropy is -scale * |A|"""
    actor_width: int = 128
    """hidden width d of the actor's SimBa encoder"""
    actor_blocks: int = 1
    """residual blocks in the actor's encoder"""
    critic_width: int = 512
    """hidden width d of each critic's SimBa encoder"""
    critic_blocks: int = 2
    """residual blocks in each critic's encoder"""
    num_critics: int = 2
    """critics in the ensemble"""
    clipped_double_q: str = "auto"
    """min over critics in the target: on, off (mean), or auto (on if the warm-up data has terminations)"""
    log_std_min: float = -10.0
    """lower bound of the policy log-std"""
    log_std_max: float = 2.0
    """upper bound of the policy log-std"""
    save_buffer: bool = False
    """put the replay buffer in the checkpoints, so a resumed run keeps its data (large files)"""
    log_every: int = 1_000
    """log losses every this many environment steps"""


# ---------------------------------------------------------------------------------------------
# Networks
# ---------------------------------------------------------------------------------------------
class Actor(nn.Module):
    """SimBa encoder and a linear head giving the mean and raw log-std; input normalized observations."""

    def __init__(self, obs_dim: int, act_dim: int, args: Args):
        super().__init__()
        self.encoder = SimbaEncoder(obs_dim, args.actor_width, args.actor_blocks)
        self.head = layer_init(nn.Linear(args.actor_width, 2 * act_dim), gain=1.0)
        self.log_std_min, self.log_std_max = args.log_std_min, args.log_std_max

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, raw_log_std = self.head(self.encoder(x)).chunk(2, dim=-1)
        log_std = self.log_std_min + (self.log_std_max - self.log_std_min) * 0.5 * (1 + torch.tanh(raw_log_std))
        return mean, log_std


class Critic(nn.Module):
    """One Q-network: SimBa encoder of concat(normalized obs, action), then a linear head."""

    def __init__(self, in_dim: int, args: Args):
        super().__init__()
        self.encoder = SimbaEncoder(in_dim, args.critic_width, args.critic_blocks)
        self.head = layer_init(nn.Linear(args.critic_width, 1), gain=1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)).squeeze(-1)


class SimbaSAC(nn.Module):
    """Observation statistics, actor, critic ensemble, target critics and temperature."""

    def __init__(self, obs_dim: int, act_dim: int, action_low: torch.Tensor, action_high: torch.Tensor, args: Args):
        super().__init__()
        self.obs_norm = RunningNorm(obs_dim)
        self.actor = Actor(obs_dim, act_dim, args)
        self.critic = Ensemble(lambda: Critic(obs_dim + act_dim, args), args.num_critics)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(args.alpha)))
        self.register_buffer("action_scale", (action_high - action_low) / 2)
        self.register_buffer("action_bias", (action_high + action_low) / 2)
        # 1: min over critics (clipped double-Q), 0: mean, -1: not decided yet (auto, before learning)
        self.register_buffer("clipped_double_q", torch.tensor({"on": 1, "off": 0, "auto": -1}[args.clipped_double_q]))

    def sample(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized action and its log-probability ``(B,)`` for normalized observations."""
        mean, log_std = self.actor(x)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        y = torch.tanh(u)
        log_prob = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - torch.log(self.action_scale * (1 - y.pow(2)) + 1e-6).sum(-1)
        return self.action_bias + self.action_scale * y, log_prob

    def q(self, x: torch.Tensor, action: torch.Tensor, target: bool = False, detach_params: bool = False) -> torch.Tensor:
        """Critics reduced over the ensemble (min or mean): ``(B,)``; every critic: see ``q_all``."""
        q_all = self.q_all(x, action, target, detach_params)
        # torch.where rather than an `if`: no device-to-host sync in the update
        return torch.where(self.clipped_double_q == 1, q_all.min(0).values, q_all.mean(0))

    def q_all(self, x, action, target: bool = False, detach_params: bool = False) -> torch.Tensor:
        critic = self.critic_target if target else self.critic
        return critic(torch.cat([x, action], -1), detach_params=detach_params)

    @torch.no_grad()
    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        return self.sample(self.obs_norm(obs))[0]

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action ``bias + scale * tanh(mean)`` for raw observations (evaluation)."""
        mean, _ = self.actor(self.obs_norm(obs))
        return self.action_bias + self.action_scale * torch.tanh(mean)


# ---------------------------------------------------------------------------------------------
# One gradient step: actor, temperature, critics, target critics
# ---------------------------------------------------------------------------------------------
class Learner:
    def __init__(self, agent: SimbaSAC, args: Args):
        self.agent, self.args = agent, args
        adamw = dict(lr=args.learning_rate, weight_decay=args.weight_decay, fused=True)
        self.actor_opt = torch.optim.AdamW(agent.actor.parameters(), **adamw)
        self.critic_opt = torch.optim.AdamW(agent.critic.parameters(), **adamw)
        self.alpha_opt = torch.optim.Adam([agent.log_alpha], lr=args.alpha_lr)
        self.target_entropy = -args.target_entropy_scale * agent.action_scale.numel()

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        agent, args = self.agent, self.args
        obs, next_obs = agent.obs_norm(batch.obs), agent.obs_norm(batch.next_obs)

        # Actor: maximize Q - alpha * log pi (critic parameters get no gradient from this loss).
        alpha = agent.log_alpha.exp().detach()
        action, log_prob = agent.sample(obs)
        actor_loss = (alpha * log_prob - agent.q(obs, action, detach_params=True)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()

        # Temperature, towards the target entropy.
        alpha_loss = -(agent.log_alpha.exp() * (log_prob.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()

        # Critics: the target uses the actor and temperature just updated.
        with torch.no_grad():
            alpha = agent.log_alpha.exp()
            next_action, next_log_prob = agent.sample(next_obs)
            next_v = agent.q(next_obs, next_action, target=True) - alpha * next_log_prob
            target = batch.rewards + args.gamma * (1.0 - batch.terminated) * next_v
        q = agent.q_all(obs, batch.actions)
        qf_loss = ((q - target) ** 2).mean(1).sum()
        self.critic_opt.zero_grad(set_to_none=True)
        qf_loss.backward()
        self.critic_opt.step()

        with torch.no_grad():
            torch._foreach_lerp_(list(agent.critic_target.parameters()), list(agent.critic.parameters()), args.tau)
        return {
            "losses/qf_loss": qf_loss.detach(),
            "losses/qf_values": q.detach().mean(),
            "losses/actor_loss": actor_loss.detach(),
            "losses/alpha": alpha,
            "losses/alpha_loss": alpha_loss.detach(),
            "losses/entropy": -log_prob.detach().mean(),
        }

    def state_dict(self) -> dict:
        return {
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])


def load_policy(checkpoint: dict, vec_env: envs.TorchVectorEnv) -> SimbaSAC:
    args = args_from_dict(Args, checkpoint["args"])
    agent = SimbaSAC(
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
    if args.clipped_double_q not in ("auto", "on", "off"):
        raise SystemExit(f"--clipped-double-q must be auto, on or off, got {args.clipped_double_q!r}")

    vec_env = envs.make(args.env, args.num_envs, backend=args.backend, device=device, seed=args.seed + run.start_step)
    obs_dim = vec_env.single_observation_space.shape[0]
    act_dim = vec_env.single_action_space.shape[0]
    agent = SimbaSAC(obs_dim, act_dim, vec_env.action_low, vec_env.action_high, args).to(device)
    learner = Learner(agent, args)
    rb = ReplayBuffer(args.buffer_size, (obs_dim,), (act_dim,), device=device)
    updates_from = args.learning_starts
    if run.checkpoint is not None:
        agent.load_state_dict(run.checkpoint["agent"])
        learner.load_state_dict(run.checkpoint["learner"])
        if "buffer" in run.checkpoint:
            rb.load_state_dict(run.checkpoint["buffer"])
        else:  # without saved data, refill the buffer (with the current policy) before updating again
            updates_from = run.start_step + args.learning_starts
    updates_per_vector_step = max(1, round(args.updates_per_step * args.num_envs))

    cdq_decided = agent.clipped_double_q.item() != -1
    global_step = run.start_step
    obs, _ = vec_env.reset()
    agent.obs_norm.update(obs)
    recent_returns: list[float] = []
    losses: dict[str, torch.Tensor] = {}
    while global_step < args.total_timesteps:
        # ---- act and store -----------------------------------------------------------------------
        if global_step < args.learning_starts:
            action = vec_env.action_low + (vec_env.action_high - vec_env.action_low) * torch.rand(
                (args.num_envs, act_dim), device=device
            )
        else:
            action = agent.explore(obs)
        next_obs, reward, terminated, truncated, info = vec_env.step(action)
        agent.obs_norm.update(next_obs)
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

        # ---- learn -------------------------------------------------------------------------------
        if global_step >= updates_from and len(rb) >= args.batch_size:
            if not cdq_decided:  # auto: episodic iff the warm-up saw a termination
                agent.clipped_double_q.fill_(int(rb.terminated[: len(rb)].any().item()))
                cdq_decided = True
                print(
                    f"clipped double-Q {'on' if agent.clipped_double_q.item() else 'off'} "
                    f"({'terminations' if agent.clipped_double_q.item() else 'no termination'} in the warm-up data)"
                )
            for _ in range(updates_per_vector_step):
                losses = learner.update(rb.sample(args.batch_size))

        # ---- logging and checkpoints -------------------------------------------------------------
        if global_step % args.log_every < args.num_envs:
            sps = run.sps(global_step)
            metrics = {"charts/SPS": sps, "charts/learning_rate": learner.critic_opt.param_groups[0]["lr"]}
            metrics.update({k: v.item() for k, v in losses.items()})
            run.log(global_step, metrics)
            run.progress(global_step, np.mean(recent_returns) if recent_returns else None, sps)
        if run.checkpoint_due(global_step) or global_step >= args.total_timesteps:
            extra = {"buffer": rb.state_dict()} if args.save_buffer else {}
            run.save(global_step, agent=agent.state_dict(), learner=learner.state_dict(), **extra)
    vec_env.close()

    run.final_evaluation(agent, global_step)
    run.close()
