"""SAC with the SimBa encoder (Lee et al., ICLR 2025) for continuous control.

    python agents/sac_simba.py --env Humanoid
    python agents/sac_simba.py --env Humanoid --critic-blocks 4 --critic-width 1024   # scaling study
    python agents/sac_simba.py --env Humanoid --updates-per-step 4                    # replay-ratio study
    python agents/sac_simba.py --env dmc:dog-run --total-timesteps 1000000            # action repeat 2 (auto)

SimBa adds three things to the networks of SAC: running observation normalization, a residual
encoder of pre-LayerNorm MLP blocks (``h + W2(ReLU(W1(LayerNorm(h))))``, W1: d -> 4d, W2: 4d -> d),
and a LayerNorm after the last block. The defaults are those of the paper and its official code
(SonyResearch/simba): actor 1 block of width 128, critics 2 blocks of width 512, AdamW (lr 1e-4,
weight decay 1e-2 on every parameter), temperature initialized to 0.01 with target entropy -|A|/2
(its optimizer without weight decay), tau 0.005, batch 256, 1M buffer, 5,000 random transitions, 2
gradient steps per agent step. The log-std is mapped onto [-10, 2] as
``-10 + 12 * 0.5 * (1 + tanh(raw))``; evaluation acts with ``tanh(mean)``. Each gradient step
updates the actor, then the temperature, then the critics (their target uses the fresh actor and
temperature), then the target critics.

As in the official code:
- ``--action-repeat auto`` (default) applies each action for 2 simulator steps on DeepMind Control
  (``dmc:`` ids), the official DMC configs' setting, and for 1 elsewhere; an integer forces it
  (``envs.make(..., action_repeat=k)``: rewards summed, stopping where an episode ends). Steps count
  as in the official code: ``--total-timesteps``, ``global_step``, ``--log-every`` and
  ``--checkpoint-every`` count simulator steps (``num_envs x k`` per agent step), so a 100k-step DMC
  run is 50k agent steps; ``--updates-per-step`` counts gradient steps per agent step and
  ``--learning-starts`` random transitions (agent steps, summed over sub-environments), the official
  ``updates_per_interaction_step`` and buffer ``min_length``. At k = 2 the default 2 updates per
  agent step are 1 per simulator step. Episode returns and lengths stay in simulator terms.
- ``--clipped-double-q auto`` (default) follows the official per-benchmark setting: episodic
  benchmarks (Gymnasium MuJoCo, HumanoidBench) train two critics and take their minimum in the
  target and the actor loss; non-episodic ones (DeepMind Control, ``dmc:`` ids) train ONE critic.
  ``on`` / ``off`` force either.
- ``--gamma`` unset (default) derives the discount from the episode length ``L`` in agent steps (the
  env's time limit divided by the action repeat), the heuristic the official code takes from TD-MPC2:
  ``gamma = clip((L/5 - 1) / (L/5), 0.95, 0.995)``; 0.995 for the 1,000-step MuJoCo tasks, 0.99 for
  DeepMind Control at action repeat 2 (L = 500) and without a time limit.
- The policy's log-probability is that of the squashed action in [-1, 1] (the official code wraps
  every env to [-1, 1] actions): no ``log(action_scale)`` term, so the target entropy means the
  same for every action range. Actions are then rescaled to the env's bounds.

Choices made here (the paper and the official code leave them, or differ only in detail):
- The policy head is one linear layer giving the mean and the raw log-std (the official code has
  two, each with orthogonal init gain 1; one with gain 1 here); the critic head likewise.
- Observation statistics update from every environment step (random warm-up and the first reset
  included) and are applied to sampled batches with their current values; they are saved in every
  checkpoint. Biases start at 0 and the blocks' weights He-normal (torch's, not truncated).
- Truncated episodes bootstrap from the true final observation (``info["final_obs"]``).
- The critics of the ensemble are one ``Ensemble``: stacked weights, one batched call.
- ``--encoder mlp`` swaps each SimBa encoder for a plain ReLU MLP of the same linear layers and
  drops the observation normalization: the same SAC on an MLP, the baseline of the paper's scaling
  claim. The actor's and the critics' parameter counts are logged at step 0
  (``model/actor_parameters``, ``model/critic_parameters``).
- ``--compile on`` compiles the whole gradient step into one graph (``Learner.whole_update``: both
  losses with their gradients from ``torch.func.grad`` on the flat parameter vectors, the AdamW and
  Adam steps as tensor arithmetic on the optimizers' own state, the target update), drawing its
  noise from torch's generator so that each update equals the eager one up to float rounding. ``auto``
  compiles CPU runs of 50k steps or more (measured there: 1.7x faster updates at width 64); on a
  GPU, where it has not been measured, ``--compile on`` asks for it.
- ``--precision bf16`` runs the matrix products in bfloat16 (losses, weights and optimizer state
  stay float32).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Literal

import torch
import tyro
from torch import nn

import envs
from cleanrl_style import (
    Batch,
    Ensemble,
    EpisodeStats,
    FlatParameters,
    MlpEncoder,
    ReplayBuffer,
    Run,
    RunArgs,
    RunningNorm,
    SimbaEncoder,
    adam_step_,
    adam_tensors,
    buffer_checkpoint,
    check_range,
    compile_or_eager,
    every_tensor,
    layer_init,
    require,
    restore_buffer,
)
from envs.dmc import is_dmc

# --compile auto compiles the whole update of CPU runs at least this long: at the recipes' width 64 an
# update took 11.6 ms compiled against 20.2 ms eager (benchmarks/update_efficiency.py), so the compile
# (about a minute) is repaid within a few thousand environment steps.
COMPILE_FROM_STEPS = 50_000


@dataclass
class Args(RunArgs):
    env: str = "Humanoid"
    """environment: a short name (Humanoid, Ant, Hopper, ...) or any registered Gymnasium id"""
    buffer_size: int = 1_000_000
    """replay capacity in transitions"""
    gamma: float | None = None
    """discount factor; None: from the episode length L, clip((L/5 - 1) / (L/5), 0.95, 0.995)"""
    tau: float = 0.005
    """Polyak rate of the target critics"""
    batch_size: int = 256
    """minibatch size of each gradient step"""
    learning_starts: int = 5_000
    """transitions (agent steps, summed over sub-environments) of uniformly random actions before learning starts"""
    updates_per_step: float = 2.0
    """gradient steps per agent step (update-to-data ratio; SimBa: 2; at --action-repeat 2, 1 per simulator step)"""
    action_repeat: int | Literal["auto"] = "auto"
    """simulator steps each action is applied for (rewards summed); auto: 2 on DeepMind Control (dmc: ids),
    1 elsewhere, as the official configs. --total-timesteps counts simulator steps"""
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
    encoder: Literal["simba", "mlp"] = "simba"
    """simba; or mlp, the same SAC on plain ReLU MLPs of the same linear layers, without observation
    normalization, residual paths or LayerNorm (the baseline of SimBa's scaling claim)"""
    clipped_double_q: Literal["auto", "on", "off"] = "auto"
    """on: two critics, their minimum in the target and the actor loss; off: one critic; auto: on for
    episodic benchmarks (Gymnasium MuJoCo), off for DeepMind Control (dmc: ids), as the official code"""
    log_std_min: float = -10.0
    """lower bound of the policy log-std"""
    log_std_max: float = 2.0
    """upper bound of the policy log-std"""
    save_buffer: bool = False
    """put the replay buffer in the checkpoints, so a resumed run keeps its data (large files)"""
    log_every: int = 1_000
    """log losses every this many simulator steps"""

    def validate(self) -> None:
        """Resolve the action repeat and the discount, recorded in the run's args, and refuse values that
        cannot work (called by Run, after --resume merged the saved arguments)."""
        if self.action_repeat == "auto" and self.resume:  # saved before --action-repeat: it acted on every step
            self.action_repeat = 1
        self.action_repeat = resolve_action_repeat(self.action_repeat, self.env)  # refuses one below 1
        if self.gamma is None:  # a resumed run has its own recorded
            self.gamma = horizon_discount(envs.time_limit(self.env), self.action_repeat)
        random_steps = self.learning_starts * self.action_repeat
        require(
            random_steps < self.total_timesteps,
            f"--learning-starts {self.learning_starts} random transitions at --action-repeat {self.action_repeat} are "
            f"{random_steps} simulator steps, not fewer than --total-timesteps {self.total_timesteps}: the run would end "
            "before its first update; raise --total-timesteps or lower --learning-starts",
        )
        require(min(self.actor_width, self.critic_width) >= 1, "--actor-width and --critic-width: widths of 1 or more")
        require(min(self.actor_blocks, self.critic_blocks) >= 0, "--actor-blocks and --critic-blocks: 0 or more blocks")
        check_range("target_entropy_scale", self.target_entropy_scale, 0, float("inf"))


# ---------------------------------------------------------------------------------------------
# Networks
# ---------------------------------------------------------------------------------------------
def make_encoder(args: Args, in_dim: int, width: int, blocks: int) -> nn.Module:
    return (SimbaEncoder if args.encoder == "simba" else MlpEncoder)(in_dim, width, blocks)


class NoObservationNorm(nn.Identity):
    """``--encoder mlp``: observations go to the networks as they are."""

    def update(self, x: torch.Tensor) -> None:
        pass


class Actor(nn.Module):
    """SimBa encoder and a linear head giving the mean and raw log-std; input normalized observations."""

    def __init__(self, obs_dim: int, act_dim: int, args: Args):
        super().__init__()
        self.encoder = make_encoder(args, obs_dim, args.actor_width, args.actor_blocks)
        self.head = layer_init(nn.Linear(args.actor_width, 2 * act_dim), gain=1.0)
        self.log_std_min, self.log_std_max = args.log_std_min, args.log_std_max

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, raw_log_std = self.head(self.encoder(x)).float().chunk(2, dim=-1)  # float32 under bf16 autocast
        log_std = self.log_std_min + (self.log_std_max - self.log_std_min) * 0.5 * (1 + torch.tanh(raw_log_std))
        return mean, log_std


class Critic(nn.Module):
    """One Q-network: SimBa encoder of concat(normalized obs, action), then a linear head."""

    def __init__(self, in_dim: int, args: Args):
        super().__init__()
        self.encoder = make_encoder(args, in_dim, args.critic_width, args.critic_blocks)
        self.head = layer_init(nn.Linear(args.critic_width, 1), gain=1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)).squeeze(-1).float()


def horizon_discount(time_limit: int | None, action_repeat: int = 1) -> float:
    """SimBa's discount from the episode length ``L = time_limit / action_repeat`` in agent steps:
    ``clip((L/5 - 1) / (L/5), 0.95, 0.995)``; 0.99 without a time limit."""
    if not time_limit:
        return 0.99
    horizon = time_limit / action_repeat / 5
    return min(max((horizon - 1) / horizon, 0.95), 0.995)


def resolve_action_repeat(setting: int | str, env_id: str) -> int:
    """An integer as given; ``auto``: 2 for DeepMind Control (``dmc:`` ids), as the official DMC configs, else 1."""
    if setting == "auto":
        return 2 if is_dmc(env_id) else 1
    require(int(setting) >= 1, f"--action-repeat {setting}: must be at least 1 (1: no repeat), or auto")
    return int(setting)


def uses_clipped_double_q(setting: str, env_id: str) -> bool:
    """``on``/``off`` as given; ``auto``: off for DeepMind Control (``dmc:`` ids), on otherwise (episodic)."""
    if setting == "auto":
        return not env_id.startswith("dmc:")
    return setting == "on"


class SimbaSAC(nn.Module):
    """Observation statistics, actor, critics (two with clipped double-Q, else one), target critics, temperature."""

    def __init__(self, obs_dim: int, act_dim: int, action_low: torch.Tensor, action_high: torch.Tensor, args: Args):
        super().__init__()
        self.obs_norm = RunningNorm(obs_dim) if args.encoder == "simba" else NoObservationNorm()
        self.actor = Actor(obs_dim, act_dim, args)
        self.clipped_double_q = uses_clipped_double_q(args.clipped_double_q, args.env)
        self.critic = Ensemble(lambda: Critic(obs_dim + act_dim, args), 2 if self.clipped_double_q else 1)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(args.alpha)))
        self.register_buffer("action_scale", (action_high - action_low) / 2)
        self.register_buffer("action_bias", (action_high + action_low) / 2)

    def sample(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized action in the env's bounds, and the log-probability ``(B,)`` of its [-1, 1] form."""
        mean, log_std = self.actor(x)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        y = torch.tanh(u)
        log_prob = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # tanh's change of variables; 2 (log 2 - u - softplus(-2u)) = log(1 - tanh(u)^2), stable for large |u|
        log_prob = log_prob - (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return self.action_bias + self.action_scale * y, log_prob

    def q(self, x: torch.Tensor, action: torch.Tensor, target: bool = False, detach_params: bool = False) -> torch.Tensor:
        """The critics' estimate ``(B,)``: the minimum of the two with clipped double-Q, else the one critic."""
        q_all = self.q_all(x, action, target, detach_params)
        return q_all.min(0).values if self.clipped_double_q else q_all[0]

    def q_all(self, x, action, target: bool = False, detach_params: bool = False) -> torch.Tensor:
        """Every critic, ``(num_critics, B)``; the critics see the action in [-1, 1]."""
        critic = self.critic_target if target else self.critic
        unit_action = (action - self.action_bias) / self.action_scale
        return critic(torch.cat([x, unit_action], -1), detach_params=detach_params)

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
    """Optimizers and the target entropy of a :class:`SimbaSAC`.

    ``compile=True`` runs :meth:`whole_update` through ``torch.compile``: the whole gradient step
    (both losses and their gradients, the three optimizer steps, the target update) as one graph.
    Otherwise :meth:`update` runs eagerly with ``backward()`` and fused AdamW.
    """

    def __init__(self, agent: SimbaSAC, args: Args, autocast=None, compile: bool = False):
        if args.gamma is None:
            raise ValueError("Learner needs a resolved discount: set args.gamma (horizon_discount gives SimBa's rule)")
        self.agent, self.args, self.gamma = agent, args, args.gamma
        self.autocast = autocast or (lambda: torch.autocast("cpu", enabled=False))
        # Each network's parameters in one tensor: zeroing and the AdamW step are one op each (same
        # math as per-parameter AdamW; see cleanrl_style/blocks/flat_params.py).
        self.actor_flat, self.critic_flat = FlatParameters(agent.actor), FlatParameters(agent.critic)
        self.target_flat = FlatParameters(agent.critic_target, trainable=False)  # Polyak: one lerp_
        adamw = dict(lr=args.learning_rate, weight_decay=args.weight_decay, fused=True)
        self.actor_opt = torch.optim.AdamW([self.actor_flat.param], **adamw)
        self.critic_opt = torch.optim.AdamW([self.critic_flat.param], **adamw)
        self.alpha_opt = torch.optim.Adam([agent.log_alpha], lr=args.alpha_lr)
        self.target_entropy = -args.target_entropy_scale * agent.action_scale.numel()
        # fallback_random: the compiled graph draws its noise from torch's generator, as eager does.
        self._compiled = (
            compile_or_eager(self.whole_update, True, mutated=self._mutated, options={"fallback_random": True})
            if compile
            else None
        )
        self._state: dict | None = None  # whole_update's tensors, gathered at its first call

    def actor_loss(self, obs, alpha) -> tuple[torch.Tensor, torch.Tensor]:
        """``alpha log pi - Q`` (critic parameters get no gradient) and the log-probabilities."""
        with self.autocast():
            action, log_prob = self.agent.sample(obs)
            q_pi = self.agent.q(obs, action, detach_params=True)
        return (alpha * log_prob - q_pi).mean(), log_prob.detach()

    def critic_loss(self, obs, actions, rewards, next_obs, terminated, alpha) -> tuple[torch.Tensor, torch.Tensor]:
        """TD loss of the critics against the target critics at the current actor's next action, and the mean Q."""
        agent = self.agent
        with torch.no_grad(), self.autocast():
            next_action, next_log_prob = agent.sample(next_obs)
            next_v = agent.q(next_obs, next_action, target=True) - alpha * next_log_prob
            target = rewards + self.gamma * (1.0 - terminated) * next_v
        with self.autocast():
            q = agent.q_all(obs, actions)
        return ((q - target) ** 2).mean(1).sum(), q.detach().mean()

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        if self._compiled is not None:
            if self._state is None:
                self._state = self._gather_state()
            return self._compiled(self._state, batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.terminated)
        agent = self.agent
        obs, next_obs = agent.obs_norm(batch.obs), agent.obs_norm(batch.next_obs)

        # Actor: maximize Q - alpha * log pi.
        alpha = agent.log_alpha.exp().detach()
        actor_loss, log_prob = self.actor_loss(obs, alpha)
        self.actor_flat.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()

        # Temperature, towards the target entropy.
        alpha_loss = -(agent.log_alpha.exp() * (log_prob + self.target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()

        # Critics: the target uses the actor and temperature just updated.
        alpha = agent.log_alpha.exp().detach()
        qf_loss, q_mean = self.critic_loss(obs, batch.actions, batch.rewards, next_obs, batch.terminated, alpha)
        self.critic_flat.zero_grad()
        qf_loss.backward()
        self.critic_opt.step()

        with torch.no_grad():
            self.target_flat.param.lerp_(self.critic_flat.param, self.args.tau)
        return {
            "losses/qf_loss": qf_loss.detach(),
            "losses/qf_values": q_mean,
            "losses/actor_loss": actor_loss.detach(),
            "losses/alpha": alpha,
            "losses/alpha_loss": alpha_loss.detach(),
            "losses/entropy": -log_prob.mean(),
        }

    def whole_update(self, state: dict, obs, actions, rewards, next_obs, terminated) -> dict[str, torch.Tensor]:
        """:meth:`update` as tensor code without ``backward()`` or ``optimizer.step()``, so that
        ``torch.compile`` makes it one graph: gradients by ``torch.func.grad`` with respect to the
        flat parameter vectors, AdamW and Adam by :func:`adam_step_` on the optimizers' own state.
        The same math, random draws and order as :meth:`update`."""
        agent = self.agent
        actor, critic, target, log_alpha = state["actor"], state["critic"], state["target"], state["log_alpha"]
        obs, next_obs = agent.obs_norm(obs), agent.obs_norm(next_obs)

        alpha = log_alpha.detach().exp()

        def actor_loss(actor_vec):
            with self.actor_flat.reparametrized(actor_vec), self.critic_flat.reparametrized(critic.detach()):
                loss, log_prob = self.actor_loss(obs, alpha)
            return loss, (loss.detach(), log_prob)

        actor_grad, (actor_loss, log_prob) = torch.func.grad(actor_loss, has_aux=True)(actor.detach())
        adam_step_(actor, actor_grad, state["actor_adam"], self.actor_opt.param_groups[0]["lr"], self._hyper["actor"])

        # d/d(log alpha) of -(exp(log alpha) * (log_prob + target)).mean() is the loss itself.
        alpha_loss = -(alpha * (log_prob + self.target_entropy)).mean()
        adam_step_(
            log_alpha, alpha_loss, state["log_alpha_adam"], self.alpha_opt.param_groups[0]["lr"], self._hyper["log_alpha"]
        )

        alpha = log_alpha.detach().exp()

        def critic_loss(critic_vec):
            with (
                self.actor_flat.reparametrized(actor.detach()),
                self.critic_flat.reparametrized(critic_vec),
                self.target_flat.reparametrized(target),
            ):
                loss, q_mean = self.critic_loss(obs, actions, rewards, next_obs, terminated, alpha)
            return loss, (loss.detach(), q_mean)

        critic_grad, (qf_loss, q_mean) = torch.func.grad(critic_loss, has_aux=True)(critic.detach())
        adam_step_(critic, critic_grad, state["critic_adam"], self.critic_opt.param_groups[0]["lr"], self._hyper["critic"])
        with torch.no_grad():
            target.lerp_(critic, self.args.tau)
        return {
            "losses/qf_loss": qf_loss,
            "losses/qf_values": q_mean,
            "losses/actor_loss": actor_loss,
            "losses/alpha": alpha,
            "losses/alpha_loss": alpha_loss,
            "losses/entropy": -log_prob.mean(),
        }

    def _gather_state(self) -> dict:
        """The tensors :meth:`whole_update` reads and writes; its constants (the optimizers' settings)."""
        tensors, self._hyper = adam_tensors(
            {
                "actor": (self.actor_flat.param, self.actor_opt),
                "critic": (self.critic_flat.param, self.critic_opt),
                "log_alpha": (self.agent.log_alpha, self.alpha_opt),
            }
        )
        return {**tensors, "target": self.target_flat.param}

    def _mutated(self) -> list[torch.Tensor]:
        """Every tensor :meth:`whole_update` changes in place (restored if its compile fails)."""
        return every_tensor(self._state or {})

    def state_dict(self) -> dict:
        return {
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self._state = None  # the optimizers' state tensors are replaced
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])


def make_agent(args: Args, vec_env: envs.TorchVectorEnv) -> SimbaSAC:
    """The model for ``vec_env``'s spaces, on the env's device (also rebuilds it for evaluation)."""
    obs_dim, act_dim = vec_env.single_observation_space.shape[0], vec_env.single_action_space.shape[0]
    return SimbaSAC(obs_dim, act_dim, vec_env.action_low, vec_env.action_high, args).to(vec_env.device)


if __name__ == "__main__":
    args = tyro.cli(Args)
    run = Run(args, agent_file=__file__)
    args, device = run.args, run.device
    action_repeat = int(args.action_repeat)
    # global_step counts simulator steps, as the official code: num_envs x action_repeat per agent step.
    steps_per_iteration = args.num_envs * action_repeat

    vec_env = run.make_vector_env(action_repeat=action_repeat)
    agent = make_agent(args, vec_env)
    # auto: measured on the CPU only (benchmarks/README.md); on a GPU --compile on asks for it
    long_run = args.total_timesteps >= COMPILE_FROM_STEPS
    use_compile = args.compile == "on" or (args.compile == "auto" and long_run and device.type == "cpu")
    learner = Learner(agent, args, run.autocast, compile=use_compile)
    run.record(compiled_update=use_compile)  # what --compile auto chose, in provenance.json
    rb = ReplayBuffer(args.buffer_size, vec_env.single_observation_space.shape, vec_env.single_action_space.shape, device)
    # --learning-starts counts transitions (agent steps), as the official buffer's min_length.
    random_until = args.learning_starts * action_repeat
    updates_from = random_until
    if run.checkpoint is not None:
        agent.load_state_dict(run.checkpoint["agent"])
        learner.load_state_dict(run.checkpoint["learner"])
        if not restore_buffer(run.checkpoint, rb):  # refill the buffer (current policy) before updating again
            updates_from = run.start_step + random_until
    updates_per_vector_step = max(1, round(args.updates_per_step * args.num_envs))
    print(f"gamma {args.gamma:.4g}, {'two critics, clipped double-Q' if agent.clipped_double_q else 'one critic'}")
    print(
        f"action repeat {action_repeat}: {args.total_timesteps} simulator steps = {args.total_timesteps // action_repeat} "
        f"agent steps, {updates_per_vector_step / args.num_envs:g} updates per agent step "
        f"({updates_per_vector_step / steps_per_iteration:g} per simulator step), "
        f"{args.learning_starts} random transitions ({random_until} simulator steps)"
    )

    sizes = {
        f"model/{net}_parameters": sum(p.numel() for p in getattr(agent, net).parameters()) for net in ("actor", "critic")
    }
    actor_size, critic_size = sizes["model/actor_parameters"], sizes["model/critic_parameters"]
    print(f"{args.encoder} encoders: actor {actor_size:,} parameters, critics {critic_size:,}")
    if run.start_step == 0:  # the x-axis of a scaling study (a resumed run logged them at its start)
        run.log(0, sizes)

    run.watch(agent, vec_env)  # --capture-video films this policy
    global_step = run.start_step
    obs, _ = vec_env.reset()
    agent.obs_norm.update(obs)
    episodes = EpisodeStats()
    losses: dict[str, torch.Tensor] = {}
    while global_step < args.total_timesteps:
        # ---- act and store -----------------------------------------------------------------------
        if global_step < random_until:
            action = vec_env.random_actions()
        else:
            with run.autocast():
                action = agent.explore(obs)
        next_obs, reward, terminated, truncated, info = vec_env.step(action)
        agent.obs_norm.update(next_obs)
        rb.add(obs, action, reward, info["final_obs"], terminated, truncated)
        obs = next_obs
        global_step += steps_per_iteration
        if episodes.add(info):
            run.log(global_step, episodes.metrics())

        # ---- learn -------------------------------------------------------------------------------
        if global_step >= updates_from and len(rb) >= args.batch_size:
            for _ in range(updates_per_vector_step):
                losses = learner.update(rb.sample(args.batch_size))

        # ---- logging and checkpoints -------------------------------------------------------------
        if global_step % args.log_every < steps_per_iteration:
            sps = run.sps(global_step)
            metrics = {"charts/SPS": sps, "charts/learning_rate": learner.critic_opt.param_groups[0]["lr"]}
            metrics.update({k: v.item() for k, v in losses.items()})
            run.log(global_step, metrics)
            run.progress(global_step, episodes.recent_return, sps)
        if run.checkpoint_due(global_step) or global_step >= args.total_timesteps:
            state = dict(agent=agent.state_dict(), learner=learner.state_dict(), **buffer_checkpoint(rb, args.save_buffer))
            run.save(global_step, **state)
    vec_env.close()

    run.final_evaluation(agent, global_step)
    run.close()
