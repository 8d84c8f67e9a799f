"""SAC with Normalize-and-Project (NaP) for continuous control.

    python agents/sac_nap.py --env Hopper
    python agents/sac_nap.py --env Hopper --no-nap --no-layer-norm --no-anneal-lr   # plain SAC

Soft actor-critic with automatic temperature, a pair of Q-networks with the clipped double-Q
target, CleanRL's ``sac_continuous_action.py`` defaults (256x256 ReLU networks, Adam at 3e-4 for
the actor and 1e-3 for the critics, batch 256, 5,000 random steps, tau 0.005, 1M buffer; the
temperature starts at 1 (log alpha = 0) and is tuned by Adam at 1e-3 towards -|A|). NaP
(Lyle et al., 2024) puts a LayerNorm before every nonlinearity and, after every optimizer step,
projects each layer's weights back to their initial norm, so an explicit learning-rate schedule is
the only schedule of the effective learning rate. ``--no-nap`` / ``--no-layer-norm`` give the
ablations from the same file.

The two critics are one ``Ensemble``: stacked weights, one batched call for both.

Choices made here (the papers leave them open):
- NaP: each critic member is projected to its own initial norms; the output layers stay free and
  LayerNorm (gamma, beta) are projected jointly (flags as in ``ppo_nap.py``). The target critic is
  not projected: it is a Polyak average of projected weights. The temperature is not projected.
- ``--anneal-lr`` (default on) decays the actor's and the critics' learning rates linearly to 0,
  the explicit schedule the NaP paper pairs with projection on stationary tasks. The temperature's
  learning rate stays constant, as in CleanRL. ``--no-anneal-lr`` is CleanRL's constant rates.
- The actor is updated every gradient step (CleanRL delays it by 2 steps and then does 2 updates;
  the number of actor updates is the same). The temperature step uses the log-probabilities of the
  actor step's sample (CleanRL samples once more after the actor step).
- Observations are normalized by running statistics (``--obs-norm``, saved in checkpoints); the
  statistics update from every environment step, random warm-up included. CleanRL does not
  normalize: ``--no-obs-norm``.
- Plain SAC, CleanRL's, is ``--no-nap --no-layer-norm --no-anneal-lr --no-obs-norm``.
- ``--compile on`` compiles the whole gradient step into one graph (``Learner.whole_update``: both
  losses with their gradients from ``torch.func.grad`` on the flat parameter vectors, the three Adam
  steps as tensor arithmetic on the optimizers' own state, the projections and the target update);
  the eager step is the same math with ``backward()`` and fused Adam. The compiled graph draws its
  noise from torch's generator, so each update equals the eager one up to float rounding (over a
  run the rounding differences grow: benchmarks/README.md).
  ``auto`` compiles CPU runs of 50k steps or more.
- Truncated episodes bootstrap from the true final observation (``info["final_obs"]``); only
  termination stops the bootstrap.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import tyro
from torch import nn

import envs
from cleanrl_style import (
    Batch,
    Ensemble,
    EpisodeStats,
    FlatParameters,
    NormProjector,
    ReplayBuffer,
    Run,
    RunArgs,
    RunningNorm,
    adam_step_,
    adam_tensors,
    buffer_checkpoint,
    compile_or_eager,
    every_tensor,
    mlp,
    project_spans_,
    restore_buffer,
)

# --compile auto compiles the whole update of CPU runs at least this long: the compile (about 30 s)
# is repaid after about 5k updates (256x256, one thread: 12 ms compiled against 18 ms eager per update).
COMPILE_FROM_STEPS = 50_000


@dataclass
class Args(RunArgs):
    env: str = "Hopper"
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
    updates_per_step: float = 1.0
    """gradient steps per environment step (update-to-data ratio)"""
    policy_lr: float = 3e-4
    """Adam learning rate of the actor"""
    q_lr: float = 1e-3
    """Adam learning rate of the critics"""
    anneal_lr: bool = True
    """decay the learning rates linearly to 0 over training (the explicit schedule NaP relies on)"""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """hidden widths of the actor and of each critic"""
    num_critics: int = 2
    """critics in the ensemble; the target takes their minimum (clipped double-Q)"""
    alpha: float = 1.0
    """initial entropy temperature (CleanRL's autotuned runs start at log alpha = 0); the fixed one with --no-autotune"""
    alpha_lr: float = 1e-3
    """Adam learning rate of the temperature (CleanRL: the critics' rate), constant"""
    autotune: bool = True
    """tune the temperature towards the target entropy -|A|"""
    log_std_min: float = -5.0
    """lower bound of the policy log-std"""
    log_std_max: float = 2.0
    """upper bound of the policy log-std"""
    layer_norm: bool = True
    """LayerNorm before every nonlinearity (--no-layer-norm removes it)"""
    nap: bool = True
    """project every layer back to its initial weight norm after each optimizer step (--no-nap removes it)"""
    nap_layer_norm: str = "joint"
    """NaP treatment of LayerNorm (gamma, beta): joint (rescale together to their initial norm) or none"""
    nap_biases: str = "none"
    """NaP treatment of biases: none (free) or joint (projected together with their weight)"""
    nap_project_output: bool = False
    """also project the output layers (they feed no normalization, so by default they stay free)"""
    obs_norm: bool = True
    """normalize observations with running statistics (saved in checkpoints)"""
    save_buffer: bool = False
    """put the replay buffer in the checkpoints, so a resumed run keeps its data (large files)"""
    log_every: int = 1_000
    """log losses and NaP statistics every this many environment steps"""


# ---------------------------------------------------------------------------------------------
# Networks
# ---------------------------------------------------------------------------------------------
class Actor(nn.Module):
    """Tanh-squashed Gaussian policy; input normalized observations ``(B, obs_dim)``."""

    def __init__(self, obs_dim: int, act_dim: int, args: Args):
        super().__init__()
        self.net = mlp(obs_dim, args.hidden_sizes, 2 * act_dim, nn.ReLU, args.layer_norm, output_gain=0.01)
        self.log_std_min, self.log_std_max = args.log_std_min, args.log_std_max

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, raw_log_std = self.net(x).chunk(2, dim=-1)
        # Smooth map of the raw output onto [log_std_min, log_std_max].
        log_std = self.log_std_min + (self.log_std_max - self.log_std_min) * 0.5 * (1 + torch.tanh(raw_log_std))
        return mean, log_std


class SoftActorCritic(nn.Module):
    """Actor, critic ensemble, target critics and temperature; observation statistics included.

    Actions are produced in the env's bounds: ``a = bias + scale * tanh(u)``.
    """

    def __init__(self, obs_dim: int, act_dim: int, action_low: torch.Tensor, action_high: torch.Tensor, args: Args):
        super().__init__()
        self.obs_norm = RunningNorm(obs_dim)
        self.actor = Actor(obs_dim, act_dim, args)
        self.critic = Ensemble(
            lambda: mlp(obs_dim + act_dim, args.hidden_sizes, 1, nn.ReLU, args.layer_norm, output_gain=1.0),
            args.num_critics,
        )
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(args.alpha)))
        self.register_buffer("action_scale", (action_high - action_low) / 2)
        self.register_buffer("action_bias", (action_high + action_low) / 2)

    def sample(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized action and its log-probability ``(B,)`` for normalized observations."""
        mean, log_std = self.actor(x)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        y = torch.tanh(u)
        log_prob = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # Change of variables through tanh and the scaling to the action bounds.
        log_prob = log_prob - torch.log(self.action_scale * (1 - y.pow(2)) + 1e-6).sum(-1)
        return self.action_bias + self.action_scale * y, log_prob

    def q_values(self, x: torch.Tensor, action: torch.Tensor, target: bool = False, detach_params: bool = False):
        """Every critic at (normalized obs, action): ``(num_critics, B)``."""
        critic = self.critic_target if target else self.critic
        return critic(torch.cat([x, action], -1), detach_params=detach_params).squeeze(-1)

    @torch.no_grad()
    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        return self.sample(self.obs_norm(obs))[0]

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action ``bias + scale * tanh(mean)`` for raw observations (evaluation)."""
        mean, _ = self.actor(self.obs_norm(obs))
        return self.action_bias + self.action_scale * torch.tanh(mean)


def soft_q_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """``r + gamma * (1 - terminated) * (min_k Q'_k(s', a') - alpha * log pi(a'|s'))``, shape ``(B,)``.

    ``next_q`` ``(num_critics, B)`` is evaluated at the true next observation, which for a
    truncated episode is its final observation: truncation bootstraps, termination does not.
    """
    return rewards + gamma * (1.0 - terminated) * (next_q.min(0).values - alpha * next_log_prob)


# ---------------------------------------------------------------------------------------------
# One gradient step
# ---------------------------------------------------------------------------------------------
class Learner:
    """Optimizers, NaP projectors and the target entropy of a :class:`SoftActorCritic`.

    ``compile=True`` runs :meth:`whole_update` through ``torch.compile``: the whole gradient step
    (both losses and their gradients, the three Adam steps, the projections and the target update)
    as one graph. Otherwise :meth:`update` runs eagerly with ``backward()`` and fused Adam.
    """

    def __init__(self, agent: SoftActorCritic, args: Args, autocast=None, compile: bool = False):
        self.agent, self.args = agent, args
        self.autocast = autocast or (lambda: torch.autocast("cpu", enabled=False))
        # Each network's parameters in one tensor: zeroing and the Adam step are one op each
        # (same math as per-parameter; see cleanrl_style/blocks/flat_params.py). Before members() below.
        self.actor_flat, self.critic_flat = FlatParameters(agent.actor), FlatParameters(agent.critic)
        self.target_flat = FlatParameters(agent.critic_target, trainable=False)  # Polyak: one lerp_
        self.actor_opt = torch.optim.Adam([self.actor_flat.param], lr=args.policy_lr, fused=True)
        self.critic_opt = torch.optim.Adam([self.critic_flat.param], lr=args.q_lr, fused=True)
        self.alpha_opt = torch.optim.Adam([agent.log_alpha], lr=args.alpha_lr)
        self.target_entropy = -float(agent.action_scale.numel())
        nap = dict(project_output=args.nap_project_output, layer_norm=args.nap_layer_norm, biases=args.nap_biases)
        critic_members = agent.critic.members()
        self.actor_nap = NormProjector(agent.actor, [agent.actor.net[-1]], **nap)
        self.critic_nap = NormProjector(critic_members, [m[-1] for m in critic_members], **nap)
        # fallback_random: the compiled graph draws its noise from torch's generator, as eager does, so
        # each update equals the eager one up to float rounding.
        self._compiled = (
            compile_or_eager(self.whole_update, True, mutated=self._mutated, options={"fallback_random": True})
            if compile
            else None
        )
        self._state: dict[str, torch.Tensor] | None = None  # whole_update's tensors, gathered at its first call

    def set_lr_fraction(self, frac: float) -> None:
        """Anneal the actor's and the critics' learning rates (the temperature's stays constant)."""
        self.actor_opt.param_groups[0]["lr"] = frac * self.args.policy_lr
        self.critic_opt.param_groups[0]["lr"] = frac * self.args.q_lr
        if self._state is not None:
            self._state["actor_lr"].fill_(frac * self.args.policy_lr)
            self._state["critic_lr"].fill_(frac * self.args.q_lr)

    def critic_loss(self, obs, actions, rewards, next_obs, terminated, alpha) -> tuple[torch.Tensor, torch.Tensor]:
        """Soft TD loss of every critic (normalized observations) and the mean Q."""
        agent = self.agent
        with torch.no_grad(), self.autocast():
            next_action, next_log_prob = agent.sample(next_obs)
            next_q = agent.q_values(next_obs, next_action, target=True).float()
            target = soft_q_target(rewards, terminated, next_q, next_log_prob.float(), alpha, self.args.gamma)
        with self.autocast():
            q = agent.q_values(obs, actions).float()
        return ((q - target) ** 2).mean(1).sum(), q.detach().mean()

    def actor_loss(self, obs, alpha) -> tuple[torch.Tensor, torch.Tensor]:
        """``alpha log pi - min_k Q_k`` (critic parameters get no gradient) and the log-probabilities."""
        agent = self.agent
        with self.autocast():
            action, log_prob = agent.sample(obs)
            q_pi = agent.q_values(obs, action, detach_params=True).min(0).values
        log_prob = log_prob.float()
        return (alpha * log_prob - q_pi.float()).mean(), log_prob.detach()

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Critic step, actor step, temperature step, then the Polyak update of the target critics."""
        if self._compiled is not None:
            if self._state is None:
                self._state = self._gather_state()
            return self._compiled(self._state, batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.terminated)
        agent, args = self.agent, self.args
        obs, next_obs = agent.obs_norm(batch.obs), agent.obs_norm(batch.next_obs)
        alpha = agent.log_alpha.exp().detach()

        qf_loss, q_mean = self.critic_loss(obs, batch.actions, batch.rewards, next_obs, batch.terminated, alpha)
        self.critic_flat.zero_grad()
        qf_loss.backward()
        self.critic_opt.step()
        if args.nap:
            self.critic_nap.project()

        actor_loss, log_prob = self.actor_loss(obs, alpha)
        self.actor_flat.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()
        if args.nap:
            self.actor_nap.project()

        alpha_loss = -(agent.log_alpha.exp() * (log_prob + self.target_entropy)).mean()
        if args.autotune:
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_opt.step()

        with torch.no_grad():
            self.target_flat.param.lerp_(self.critic_flat.param, args.tau)
        return {
            "losses/qf_loss": qf_loss.detach(),
            "losses/qf_values": q_mean,
            "losses/actor_loss": actor_loss.detach(),
            "losses/alpha": alpha,
            "losses/alpha_loss": alpha_loss.detach(),
        }

    def whole_update(self, state: dict[str, torch.Tensor], obs, actions, rewards, next_obs, terminated):
        """:meth:`update` as tensor code without ``backward()`` or ``optimizer.step()``, so that
        ``torch.compile`` makes it one graph: gradients by ``torch.func.grad`` with respect to the
        flat parameter vectors, Adam by :func:`adam_step_` on the optimizers' own state, NaP by
        :func:`project_spans_`. The same math, random draws and order as :meth:`update`."""
        agent, args = self.agent, self.args
        actor, critic, target = state["actor"], state["critic"], state["target"]
        obs, next_obs = agent.obs_norm(obs), agent.obs_norm(next_obs)
        alpha = state["log_alpha"].detach().exp()

        def critic_loss(critic_vec):
            with (
                self.actor_flat.reparametrized(actor.detach()),
                self.critic_flat.reparametrized(critic_vec),
                self.target_flat.reparametrized(target),
            ):
                loss, q_mean = self.critic_loss(obs, actions, rewards, next_obs, terminated, alpha)
            return loss, (loss.detach(), q_mean)

        critic_grad, (qf_loss, q_mean) = torch.func.grad(critic_loss, has_aux=True)(critic.detach())
        adam_step_(critic, critic_grad, state["critic_adam"], state["critic_lr"], self._hyper["critic"])
        if args.nap:
            project_spans_(critic, self._spans["critic"])

        def actor_loss(actor_vec):
            with self.actor_flat.reparametrized(actor_vec), self.critic_flat.reparametrized(critic.detach()):
                loss, log_prob = self.actor_loss(obs, alpha)
            return loss, (loss.detach(), log_prob)

        actor_grad, (actor_loss, log_prob) = torch.func.grad(actor_loss, has_aux=True)(actor.detach())
        adam_step_(actor, actor_grad, state["actor_adam"], state["actor_lr"], self._hyper["actor"])
        if args.nap:
            project_spans_(actor, self._spans["actor"])

        # d/d(log alpha) of -(exp(log alpha) * (log_prob + target)).mean() is the loss itself.
        alpha_loss = -(alpha * (log_prob + self.target_entropy)).mean()
        if args.autotune:
            adam_step_(state["log_alpha"], alpha_loss, state["log_alpha_adam"], args.alpha_lr, self._hyper["log_alpha"])
        with torch.no_grad():
            target.lerp_(critic, args.tau)
        return {
            "losses/qf_loss": qf_loss,
            "losses/qf_values": q_mean,
            "losses/actor_loss": actor_loss,
            "losses/alpha": alpha,
            "losses/alpha_loss": alpha_loss,
        }

    def _gather_state(self) -> dict:
        """The tensors :meth:`whole_update` reads and writes; its constants (NaP spans, the optimizers' settings)."""
        self._spans = {
            "actor": self.actor_nap.flat_spans(self.actor_flat),
            "critic": self.critic_nap.flat_spans(self.critic_flat),
        }
        tensors, self._hyper = adam_tensors(
            {
                "actor": (self.actor_flat.param, self.actor_opt),
                "critic": (self.critic_flat.param, self.critic_opt),
                "log_alpha": (self.agent.log_alpha, self.alpha_opt),
            }
        )
        return {
            **tensors,
            "target": self.target_flat.param,
            "actor_lr": torch.tensor(float(self.actor_opt.param_groups[0]["lr"])),
            "critic_lr": torch.tensor(float(self.critic_opt.param_groups[0]["lr"])),
        }

    def _mutated(self) -> list[torch.Tensor]:
        """Every tensor :meth:`whole_update` changes in place (restored if its compile fails)."""
        return every_tensor(self._state or {})

    def layer_stats(self) -> dict[str, float]:
        return {
            **self.actor_nap.layer_stats(self.actor_opt.param_groups[0]["lr"], prefix="actor."),
            **self.critic_nap.layer_stats(self.critic_opt.param_groups[0]["lr"], prefix="critic."),
        }

    def state_dict(self) -> dict:
        return {
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
            "actor_nap": self.actor_nap.state_dict(),
            "critic_nap": self.critic_nap.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self._state = None  # the optimizers' state tensors and the NaP norms are replaced
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        self.actor_nap.load_state_dict(state["actor_nap"])
        self.critic_nap.load_state_dict(state["critic_nap"])


def make_agent(args: Args, vec_env: envs.TorchVectorEnv) -> SoftActorCritic:
    """The model for ``vec_env``'s spaces, on the env's device (also rebuilds it for evaluation)."""
    obs_dim, act_dim = vec_env.single_observation_space.shape[0], vec_env.single_action_space.shape[0]
    return SoftActorCritic(obs_dim, act_dim, vec_env.action_low, vec_env.action_high, args).to(vec_env.device)


if __name__ == "__main__":
    run = Run(tyro.cli(Args), agent_file=__file__)
    args, device = run.args, run.device

    vec_env = run.make_vector_env()
    agent = make_agent(args, vec_env)
    # auto: measured on the CPU only (benchmarks/README.md); elsewhere --compile on asks for it
    long_run = args.total_timesteps >= COMPILE_FROM_STEPS
    use_compile = args.compile == "on" or (args.compile == "auto" and long_run and device.type == "cpu")
    learner = Learner(agent, args, run.autocast, compile=use_compile)
    run.record(compiled_update=use_compile)  # what --compile auto chose, in provenance.json
    rb = ReplayBuffer(args.buffer_size, vec_env.single_observation_space.shape, vec_env.single_action_space.shape, device)
    updates_from = args.learning_starts
    if run.checkpoint is not None:
        agent.load_state_dict(run.checkpoint["agent"])
        learner.load_state_dict(run.checkpoint["learner"])
        if not restore_buffer(run.checkpoint, rb):  # refill the buffer (current policy) before updating again
            updates_from = run.start_step + args.learning_starts
    updates_per_vector_step = max(1, round(args.updates_per_step * args.num_envs))

    run.watch(agent, vec_env)  # --capture-video films this policy
    global_step = run.start_step
    obs, _ = vec_env.reset()
    if args.obs_norm:
        agent.obs_norm.update(obs)
    episodes = EpisodeStats()
    losses: dict[str, torch.Tensor] = {}
    while global_step < args.total_timesteps:
        # ---- act and store -----------------------------------------------------------------------
        if global_step < args.learning_starts:
            action = vec_env.random_actions()
        else:
            with run.autocast():
                action = agent.explore(obs).float()
        next_obs, reward, terminated, truncated, info = vec_env.step(action)
        if args.obs_norm:
            agent.obs_norm.update(next_obs)
        rb.add(obs, action, reward, info["final_obs"], terminated, truncated)
        obs = next_obs
        global_step += args.num_envs
        if episodes.add(info):
            run.log(global_step, episodes.metrics())

        # ---- learn -------------------------------------------------------------------------------
        if global_step >= updates_from and len(rb) >= args.batch_size:
            if args.anneal_lr:
                learner.set_lr_fraction(1.0 - global_step / args.total_timesteps)
            for _ in range(updates_per_vector_step):
                losses = learner.update(rb.sample(args.batch_size))

        # ---- logging and checkpoints -------------------------------------------------------------
        if global_step % args.log_every < args.num_envs:
            sps = run.sps(global_step)
            metrics = {"charts/SPS": sps, "charts/learning_rate": learner.critic_opt.param_groups[0]["lr"]}
            metrics.update({k: v.item() for k, v in losses.items()})
            if losses:
                metrics.update(learner.layer_stats())
            run.log(global_step, metrics)
            run.progress(global_step, episodes.recent_return, sps)
        if run.checkpoint_due(global_step) or global_step >= args.total_timesteps:
            state = dict(agent=agent.state_dict(), learner=learner.state_dict(), **buffer_checkpoint(rb, args.save_buffer))
            run.save(global_step, **state)
    vec_env.close()

    run.final_evaluation(agent, global_step)
    run.close()
