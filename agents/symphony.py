"""Symphony with the Fading Replay Buffer (Ishuov et al., 2025, arXiv 2512.10477) for continuous control.

    python agents/symphony.py --env Humanoid
    python agents/symphony.py --env Humanoid --fading uniform      # ablation: uniform replay

**Pinned official code**: timurgepard/Symphony-S2 commit ``1318d66`` (2025-12-31, "Add files via
upload"), the folder ``S3/`` (``symphony.py``, ``train.py``). ``S3/`` was uploaded once in that
commit and never changed until it was deleted (``3ec36e4``, 2026-03-04); the repository's top-level
``symphony.py`` moved on (bell-shaped node weights, the swaddling value subtracted in the target;
at ``97e0466``, 2026-08-22, also a feature extractor with a reward model, batch 192, tau 0.001).
Every default below is S3's but the gradient dropout (see there), and
``benchmarks/symphony_official.py`` runs that commit on this suite's tasks.

What Symphony puts together, with the defaults of the pinned official code (S3):
- **Fading Replay Buffer**: sampling probability ``tanh((pi * u) ** e)`` of the relative age ``u``
  (the oldest ~40% fade out); capacity 512,000. A warm-up of 10,240 steps, acted by the untrained
  policy with its noise, is replicated to fill the whole buffer, and rewards are scaled by
  ``1 / mean|r|`` of that warm-up data. The capacity fits long runs (from about 522k steps on, a
  run's own data replaces every copy): a run that stores fewer transitions after the warm-up than
  the buffer holds keeps drawing mostly warm-up copies (a 100k-step run with 512,000 draws 23% of
  its batches from its own data at the end), and is warned about at start; the 100k-step CPU
  recipe uses ``--buffer-size 40960``.
- **Critic**: 3 sub-networks of 128 outputs each, 384 "nodes", all regressed onto one target. The
  target sorts the target critic's nodes ascending and weights them with
  ``tanh((pi * (1 - n / 384)) ** e)``, which softly drops the highest estimates.
- **Temporal Advantage**: ``Q_T = a * Qbar + (1 - a) * q'``, ``a = 1 / phi``, with ``Qbar`` the stored
  batch mean of the previous ``Q_T`` (0 at the start); the actor maximizes ``ReHAE((q' - Q_T) / |Q_T|)``
  where ``q'`` is the target critic at ``(s', actor(s'))``.
- **Actor with limited parametric noise**: ``tanh(net(s) / 2)`` split into direction ``A``, and
  ``S``, ``B`` as its absolute values; ``a = a_max * tanh(S * A + N)`` with ``N = clamp(N(0, 1), -e, e) / e``.
- **Swaddling** ``mean[Omega(S^(1 / B_detached)) + B * omega(S) + Omega(B^2)]``,
  ``Omega(x) = ln((1 + x) / (1 - x))``, ``omega(x) = x ln x``, on ``S``, ``B`` clamped to
  ``[1e-3, 1 - 1e-3]``: penalizes the action *strength*.
- **One loss, one pass**: ``L = -ReHAE(A) + ReHSE(r + gamma (1 - d) q' - Q(s, a)) + Sw`` with
  ``ReHSE(e) = e tanh(e / 2)`` and ``ReHAE(e) = |e| tanh(e / 2)``; one optimizer step updates actor
  and critic together: Adam without bias correction (betas (0.618, 0.995), eps 1e-8, decoupled
  decay 0.01, lr 1e-4), batch 384, 3 steps per environment step, tau 0.005, gamma 0.99.
- **Blocks**: ``Linear -> LayerNorm -> Linear -> ReSine -> Linear``, hidden 512, with ReSine
  ``s = sigmoid(p); f = s sin(x / s); out = f sigmoid(1.5 f / s)``, ``p`` learnable per unit,
  initialized uniformly in ``+-1/sqrt(hidden)``.
- **Gradient dropout** after the output layer of the actor and of every critic sub-network
  (probability 0.5): the forward value is unchanged, the gradient passes through a random half of
  the outputs. S3 defines this module (probability 0.5) but its blocks do not apply it:
  ``--grad-dropout 0`` is S3's setting.

Flags give the alternatives to these choices: ``--sb-map sigmoid`` (S and B as ``(1 + y) / 2``),
``--grad-dropout 0``, ``--replay-order s3``, ``--batch-size 256``, ``--bias-correction``, ``--warmup-actions uniform``,
``--q-bar-init first-batch``. The target critic is a copy of the critic, gradient dropout included:
the actor's gradient through ``q'`` is masked the same way.

Differences from the pinned commit (S3 at ``1318d66``), besides gradient dropout above:
- Replay order: S3 keeps transitions in insertion order and, once full, rolls its tensors by one
  per step (the oldest leaves); when the oldest is terminal it rolls by two, which moves that
  terminal transition to the newest end and drops the second-oldest instead, so terminal
  transitions pile up (one leaves only from second place behind another).
  Here a ring buffer drops the oldest transition, terminal or not; ``--replay-order s3`` keeps
  S3's order (the same transitions stored after every add; S3's buffer also holds, in its newest
  slot, the one it dropped last, until the next add overwrites it). Both weight by the same fading
  of the relative age (S3 draws with ``torch.multinomial``, here by inverse CDF: the same law).
- S3's training loop acts with noise only (``a = tanh(N)``) in the last 50 steps of each training
  episode's 1,000-step limit; here the policy acts on every step.
- ``|Q_T|`` is clamped at 1e-3 here (S3 divides unclamped); ``Omega``'s argument is clamped at
  ``1 - 1e-6`` (S3 does not clamp; ``S``, ``B`` are in ``[1e-3, 1 - 1e-3]`` in both).
- Actions are scaled to the env's bounds; S3 uses ``a_max = 1`` for every env (the same on Hopper,
  Walker2d, HalfCheetah and Ant, whose bounds are [-1, 1]; not on Humanoid, [-0.4, 0.4]), which
  ``--action-bound unit`` reproduces (the env clips; the replay keeps the unclipped action, as S3's).
- S3's ``train.py`` ties the width to the buffer (``h_dim = capacity // 1000``: 512 at 512,000) and
  derives the nodes (``h_dim / 4`` per sub-network) and the batch (all nodes); here each is a flag
  with S3's values as defaults, so reduced widths keep S3's coupling only when given together
  (``--hidden 128 --critic-nodes 32 --batch-size 96``).
- S3 reseeds torch, numpy and ``random`` from ``random`` at every environment step and every
  update; here the run is seeded once. S3's script used the v4 MuJoCo envs; the suite's are v5.
- S3 divides rewards by ``mean|r|`` when storing them; here the stored rewards are the
  environment's and the loss multiplies them by ``1 / mean|r|`` (the same values).
- Arithmetic that is the same in both, written differently: the optimizer (S3:
  ``p -= lr (m / (sqrt(v) + eps) + wd p)``), the target (S3 Polyak-averages the critic part of a full
  actor-critic copy), ReSine, the sorted-node target, ``Qbar`` (the batch mean of the previous
  ``Q_T``, from 0), the noise, the swaddling, the critic target ``r + gamma (1 - d) q'``.

Choices made here where the paper leaves them open (S3 makes the same ones, unless listed above):
- ``q'`` uses the actor's noisy action at ``s'`` (reparameterized, like SAC's sampled next action);
  swaddling is computed on the same forward pass (the actor's ``S``, ``B`` at ``s'``).
- ``Q_T`` is a baseline: detached in the advantage (``--adv-eps`` sets the clamp of ``|Q_T|``).
- Evaluation acts with ``a_max * tanh(S * A)`` (no noise); there is no observation normalization.
- Later top-level versions of the official code (after the pin) add ``0.1 * sum(a^2)`` to the stored
  reward (``--action-reward 0.1`` does the same; S3 does not) and subtract the swaddling value in
  the critic target (``r + gamma (1 - d)(q' - Sw)``; S3 and this agent do not).
- The three critic sub-networks are one ``Ensemble``: stacked weights, one batched call; actor and
  critic parameters live in one flat tensor (``FlatParameters``), so the optimizer step is a few ops.
- Truncated episodes bootstrap from the true final observation (``info["final_obs"]``).
- The nodes are sorted with ``cleanrl_style.blocks.sorting.sort_rows`` (numpy's SIMD argsort on the CPU, the
  same values and gradients as ``torch.sort``, several times faster).
- ``--compile on`` compiles the whole gradient step into one graph (``Learner.whole_update``: the
  loss's gradient from ``torch.func.grad`` with respect to the flat parameter vector, the optimizer
  step, the target update and ``Qbar``), drawing its noise from torch's generator as eager does;
  ``auto`` does so for runs of 100k steps or more. ``--precision bf16`` runs the matrix products in
  bfloat16 (losses, weights and optimizer state stay float32).
"""

from __future__ import annotations

import copy
import math
import warnings
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
    FadingReplayBuffer,
    FlatParameters,
    Run,
    RunArgs,
    buffer_checkpoint,
    check_range,
    compile_or_eager,
    fading_tanh,
    require,
    restore_buffer,
    sort_rows,
)

PHI = (1 + math.sqrt(5)) / 2
SB_CLAMP = 1e-3  # S and B enter the swaddling loss clamped to [1e-3, 1 - 1e-3]
# --compile auto compiles the update of runs at least this long, which repay the one-off compile.
COMPILE_FROM_STEPS = 100_000


@dataclass
class Args(RunArgs):
    env: str = "Humanoid"
    """environment: a short name (Humanoid, Ant, Hopper, ...) or any registered Gymnasium id"""
    buffer_size: int = 512_000
    """Fading Replay Buffer capacity"""
    warmup_steps: int = 10_240
    """exploration steps collected first, then replicated to fill the buffer"""
    warmup_actions: Literal["policy", "uniform"] = "policy"
    """warm-up actions: the untrained policy with its noise (official), or uniformly random"""
    fading: str = "tanh"
    """replay weight over age: tanh (Symphony's fading) or uniform (ablation)"""
    replay_order: Literal["ring", "s3"] = "ring"
    """which transition a full buffer drops: the oldest (ring), or as the official S3 code, the oldest unless it is
    terminal, which then moves to the newest end (s3: terminal transitions pile up)"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak rate of the target critic"""
    batch_size: int = 384
    """minibatch size of each gradient step (the official code: the number of critic nodes, 384)"""
    updates_per_step: float = 3.0
    """gradient steps per environment step"""
    learning_rate: float = 1e-4
    """learning rate of the one optimizer (actor and critic)"""
    betas: tuple[float, float] = (1 / PHI, 0.995)
    """Adam betas"""
    weight_decay: float = 0.01
    """decoupled weight decay"""
    bias_correction: bool = False
    """Adam's bias correction of the moment estimates (the official optimizer has none)"""
    grad_dropout: float = 0.5
    """probability that an output of the actor or of a critic sub-network passes no gradient (0: off)"""
    sb_map: Literal["abs", "sigmoid"] = "abs"
    """how S and B come from the actor's tanh(net / 2) outputs y: |y| (official) or (1 + y) / 2"""
    action_reward: float = 0.0
    """stored reward + this x sum(a^2) of the action taken (the official S2 buffer adds 0.1 x sum(a^2), which
    counters swaddling's pull toward weak actions); 0: the environment's reward alone"""
    q_bar_init: Literal["zero", "first-batch"] = "zero"
    """starting Qbar of the Temporal Advantage: 0 (official) or the first batch's mean of q'"""
    action_bound: Literal["env", "unit"] = "env"
    """a_max and the action's centre: the env's bounds (env), or a_max = 1 on every env with the env clipping to its
    bounds (unit: the official S3 code; differs where the bounds are not [-1, 1], as Humanoid's [-0.4, 0.4])"""
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

    def validate(self) -> None:
        """Refuse values the update cannot use (called by Run, after --resume); shared flags: cleanrl_style.runs.cli."""
        require(
            self.hidden >= 1 and self.critic_nodes >= 1,
            f"--hidden {self.hidden}, --critic-nodes {self.critic_nodes}: widths of 1 or more",
        )
        check_range("grad_dropout", self.grad_dropout, 0, 1, high_in=False)
        check_range("advantage_smoothing", self.advantage_smoothing, 0, 1)
        for beta in self.betas:
            check_range("betas", beta, 0, 1, high_in=False)


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
    return (sort_rows(nodes) * weights).sum(-1)


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
        bound = 1 / math.sqrt(dim)
        self.p = nn.Parameter(torch.empty(dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(self.p)
        sine = torch.sin(x * (1 / s))  # f = s * sine, and 1.5 f / s = 1.5 sine: one division fewer per element
        return (s * sine) * torch.sigmoid(1.5 * sine)


class GradientDropout(nn.Module):
    """Identity forward; in training, each element passes its gradient with probability ``1 - p``."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p <= 0:
            return x
        keep = (torch.rand_like(x) >= self.p).to(x.dtype)
        return keep * x + (1 - keep) * x.detach()


def block(in_dim: int, hidden: int, out_dim: int, grad_dropout: float = 0.0) -> nn.Sequential:
    """``Linear -> LayerNorm -> Linear -> ReSine -> Linear`` (then gradient dropout on the outputs)."""
    layers = [nn.Linear(in_dim, hidden), nn.LayerNorm(hidden), nn.Linear(hidden, hidden), ReSine(hidden)]
    layers.append(nn.Linear(hidden, out_dim))
    if grad_dropout > 0:
        layers.append(GradientDropout(grad_dropout))
    return nn.Sequential(*layers)


class Actor(nn.Module):
    """Direction ``A`` in (-1, 1), scale ``S`` and beta ``B`` in [0, 1), each ``(B, act_dim)``."""

    def __init__(self, obs_dim: int, act_dim: int, args: Args):
        super().__init__()
        self.net = block(obs_dim, args.hidden, 3 * act_dim, args.grad_dropout)
        self.sb_map = args.sb_map

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        direction, scale, beta = torch.tanh(self.net(obs).float() / 2).chunk(3, dim=-1)
        if self.sb_map == "abs":
            return direction, scale.abs(), beta.abs()
        return direction, (1 + scale) / 2, (1 + beta) / 2


class Symphony(nn.Module):
    """Actor, critic ensemble, target critic, the running ``Qbar`` and the reward scale."""

    def __init__(self, obs_dim: int, act_dim: int, action_low: torch.Tensor, action_high: torch.Tensor, args: Args):
        super().__init__()
        self.actor = Actor(obs_dim, act_dim, args)
        make_critic = lambda: block(obs_dim + act_dim, args.hidden, args.critic_nodes, args.grad_dropout)
        self.critic = Ensemble(make_critic, args.critic_nets)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.register_buffer("action_scale", (action_high - action_low) / 2)
        self.register_buffer("action_bias", (action_high + action_low) / 2)
        self.register_buffer("node_weights", node_weights(args.critic_nets * args.critic_nodes))
        q_bar = 0.0 if args.q_bar_init == "zero" else float("nan")  # nan: the first batch's mean of q'
        self.register_buffer("q_bar", torch.tensor(q_bar))
        self.register_buffer("reward_scale", torch.tensor(float("nan")))  # set at the end of the warm-up

    def action(self, obs: torch.Tensor, noise: bool = True):
        """``a_max * tanh(S * A + N)``, ``N = clamp(N(0,1), -e, e) / e``; also ``S`` and ``B`` clamped for swaddling."""
        direction, scale, beta = self.actor(obs)
        pre = scale * direction
        if noise:
            pre = pre + torch.randn_like(pre).clamp(-math.e, math.e) / math.e
        action = self.action_bias + self.action_scale * torch.tanh(pre)
        return action, scale.clamp(SB_CLAMP, 1 - SB_CLAMP), beta.clamp(SB_CLAMP, 1 - SB_CLAMP)

    def nodes(self, obs: torch.Tensor, action: torch.Tensor, target: bool = False) -> torch.Tensor:
        """All critic nodes, ``(B, critic_nets * critic_nodes)``."""
        critic = self.critic_target if target else self.critic
        out = critic(torch.cat([obs, action], -1)).float()  # (nets, B, nodes)
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
class SymphonyAdam(torch.optim.Optimizer):
    """Adam with decoupled weight decay and, by default, no bias correction (Symphony's optimizer):
    ``m <- b1 m + (1 - b1) g``, ``v <- b2 v + (1 - b2) g^2``, ``p <- p - lr (m / (sqrt(v) + eps) + wd p)``.

    With ``bias_correction`` it divides ``m`` by ``1 - b1^t`` and ``v`` by ``1 - b2^t`` as Adam does.
    The state is created up front and the step count is a tensor, so a compiled update traces one
    graph for every step.
    """

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float = 1e-8, weight_decay: float = 0.0,
                 bias_correction: bool = False):  # fmt: skip
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, bias_correction=bias_correction))
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p] = {"step": torch.zeros((), device=p.device), "m": torch.zeros_like(p), "v": torch.zeros_like(p)}

    @torch.no_grad()
    def step(self, closure=None):
        self.update_parameters()

    @torch.no_grad()
    def update_parameters(self, gradients: list[torch.Tensor] | None = None) -> None:
        """The step's arithmetic (``step`` without the profiling hook torch.optim wraps it in: compilable).

        ``gradients``, one per parameter of the single group, replace the parameters' ``.grad``.
        """
        for group in self.param_groups:
            if gradients is not None:
                params, grads = list(group["params"]), gradients
            else:
                params = [p for p in group["params"] if p.grad is not None]
                grads = [p.grad for p in params]
            if not params:
                continue
            states = [self.state[p] for p in params]
            m, v = [st["m"] for st in states], [st["v"] for st in states]
            b1, b2 = group["betas"]
            torch._foreach_add_([st["step"] for st in states], 1)
            torch._foreach_lerp_(m, grads, 1 - b1)
            torch._foreach_mul_(v, b2)
            torch._foreach_addcmul_(v, grads, grads, 1 - b2)
            denom = torch._foreach_sqrt(v)
            if group["weight_decay"]:
                torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])
            if not group["bias_correction"]:
                torch._foreach_add_(denom, group["eps"])
                torch._foreach_addcdiv_(params, m, denom, -group["lr"])
                continue
            step = states[0]["step"]
            torch._foreach_div_(denom, torch.sqrt(1 - b2**step))
            torch._foreach_add_(denom, group["eps"])
            updates = torch._foreach_div(m, denom)
            torch._foreach_mul_(updates, group["lr"] / (1 - b1**step))
            torch._foreach_sub_(params, updates)


class Learner:
    def __init__(self, agent: Symphony, args: Args, autocast=None, compile: bool = False):
        self.agent, self.args = agent, args
        self.autocast = autocast or (lambda: torch.autocast("cpu", enabled=False))
        # Actor and critic parameters in one tensor: the optimizer step and zeroing are a few ops.
        self.flat = FlatParameters(nn.ModuleList([agent.actor, agent.critic]))
        self.optimizer = SymphonyAdam(
            [self.flat.param], args.learning_rate, tuple(args.betas), weight_decay=args.weight_decay,
            bias_correction=args.bias_correction,
        )  # fmt: skip
        self._targets, self._critic_params = list(agent.critic_target.parameters()), list(agent.critic.parameters())
        # compile=True runs whole_update through torch.compile: the loss, its gradient, the optimizer
        # step and the target update as one graph, its noise drawn from torch's generator as eager.
        self._compiled = (
            compile_or_eager(self.whole_update, True, mutated=self.step_state, options={"fallback_random": True})
            if compile
            else None
        )

    def step_state(self) -> list[torch.Tensor]:
        """Every tensor the update changes in place: parameters, moments, target critic, ``Qbar``."""
        moments = [t for state in self.optimizer.state.values() for t in state.values()]
        return [self.flat.param, *moments, *self._targets, self.agent.q_bar]

    def loss(self, obs, actions, rewards, next_obs, terminated, q_bar) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Symphony's one loss (actor, critic, swaddling) and the new ``Qbar``; pure, so it compiles."""
        agent, args = self.agent, self.args
        # q' at (s', actor(s')): the critic's target (detached) and the actor's objective (with gradient).
        with self.autocast():
            next_action, scale, beta = agent.action(next_obs)
            q_next = sorted_node_target(agent.nodes(next_obs, next_action, target=True), agent.node_weights)

        # Temporal Advantage against the moving average Qbar of Q_T (nan: not set yet, start from this batch).
        q_bar = torch.where(torch.isnan(q_bar), q_next.detach().mean(), q_bar)
        advantage, q_t = temporal_advantage(q_next, q_bar, args.advantage_smoothing, args.adv_eps)

        target = rewards * agent.reward_scale + args.gamma * (1.0 - terminated) * q_next.detach()
        with self.autocast():
            q = agent.nodes(obs, actions)
        actor_loss = -rehae(advantage).mean()
        critic_loss = rehse(target.unsqueeze(-1) - q).mean()
        swaddle = swaddling(scale, beta)
        parts = {
            "actor_loss": actor_loss.detach(),
            "critic_loss": critic_loss.detach(),
            "swaddling": swaddle.detach(),
            "qf_values": q.detach().mean(),
            "q_bar": q_t.mean().detach(),
            "action_scale": scale.detach().mean(),
            "beta": beta.detach().mean(),
        }
        return actor_loss + critic_loss + swaddle, parts

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        if self._compiled is not None:
            return self._compiled(batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.terminated)
        agent = self.agent
        loss, parts = self.loss(batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.terminated, agent.q_bar)
        agent.q_bar.copy_(parts["q_bar"])
        self.flat.zero_grad()
        loss.backward()
        self.apply_gradients()
        return {"losses/loss": loss.detach(), **{f"losses/{k}": v for k, v in parts.items()}}

    def whole_update(self, obs, actions, rewards, next_obs, terminated) -> dict[str, torch.Tensor]:
        """:meth:`update` without ``backward()``, so that ``torch.compile`` makes it one graph: the
        gradient by ``torch.func.grad`` with respect to the flat parameter vector, read by the
        unchanged :meth:`loss` through ``FlatParameters.reparametrized``. Same math and order."""
        agent = self.agent

        def loss_at(vector):
            with self.flat.reparametrized(vector):
                loss, parts = self.loss(obs, actions, rewards, next_obs, terminated, agent.q_bar)
            return loss, (loss.detach(), parts)

        grad, (loss, parts) = torch.func.grad(loss_at, has_aux=True)(self.flat.param.detach())
        with torch.no_grad():
            agent.q_bar.copy_(parts["q_bar"])
        self.apply_gradients([grad])
        return {"losses/loss": loss, **{f"losses/{k}": v for k, v in parts.items()}}

    @torch.no_grad()
    def apply_gradients(self, grads: list[torch.Tensor] | None = None) -> None:
        """The optimizer step (with ``grads``, else the parameters' ``.grad``), then the target
        critic's Polyak update toward the critic."""
        self.optimizer.update_parameters(grads)
        torch._foreach_lerp_(self._targets, self._critic_params, self.args.tau)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])


def warm_up_dominance(args: Args, buffer: FadingReplayBuffer) -> str | None:
    """A warning when the replicated warm-up copies still draw most batches at the end of the run.

    The warm-up fills the whole buffer with copies; only the ``total_timesteps - warmup_steps``
    transitions collected afterwards replace them, oldest first. With a buffer much larger than
    that (the default 512,000 on a 100k-step run), most batches of the whole run are warm-up data.
    """
    fresh = args.total_timesteps - args.warmup_steps
    share = buffer.newest_share(fresh)
    if share >= 0.5:
        return None
    return (
        f"--buffer-size {args.buffer_size:,} with --total-timesteps {args.total_timesteps:,}: the run stores "
        f"{max(fresh, 0):,} transitions after the warm-up, so even at its end only {share:.0%} of the sampled "
        f"batches come from them and the rest are copies of the {args.warmup_steps:,}-step warm-up. "
        f"A buffer of at most {max(fresh, args.warmup_steps):,} (--buffer-size) lets this run's own data replace them."
    )


def make_agent(args: Args, vec_env: envs.TorchVectorEnv) -> Symphony:
    """The model for ``vec_env``'s spaces, on the env's device (also rebuilds it for evaluation)."""
    obs_dim, act_dim = vec_env.single_observation_space.shape[0], vec_env.single_action_space.shape[0]
    low, high = vec_env.action_low, vec_env.action_high
    if args.action_bound == "unit":  # a_max = 1; the vector env clips each action to its bounds
        low, high = -torch.ones_like(low), torch.ones_like(high)
    return Symphony(obs_dim, act_dim, low, high, args).to(vec_env.device)


if __name__ == "__main__":
    run = Run(tyro.cli(Args), agent_file=__file__)
    args, device = run.args, run.device
    weight_fns = {"tanh": fading_tanh, "uniform": torch.ones_like}
    if args.fading not in weight_fns:
        raise SystemExit(f"--fading must be one of {', '.join(weight_fns)}, got {args.fading!r}")

    vec_env = run.make_vector_env()
    agent = make_agent(args, vec_env)
    use_compile = args.compile == "on" or (args.compile == "auto" and args.total_timesteps >= COMPILE_FROM_STEPS)
    learner = Learner(agent, args, run.autocast, compile=use_compile)
    run.record(compiled_update=use_compile)  # what --compile auto chose, in provenance.json
    obs_shape, act_shape = vec_env.single_observation_space.shape, vec_env.single_action_space.shape
    rb = FadingReplayBuffer(
        args.buffer_size,
        obs_shape,
        act_shape,
        device=device,
        weight_fn=weight_fns[args.fading],
        keep_terminals=args.replay_order == "s3",
    )
    if (warning := warm_up_dominance(args, rb)) is not None:
        warnings.warn(warning, RuntimeWarning, stacklevel=1)
    replicate_at: int | None = args.warmup_steps  # step at which the warm-up data fills the buffer
    if run.checkpoint is not None:
        agent.load_state_dict(run.checkpoint["agent"])
        learner.load_state_dict(run.checkpoint["learner"])
        if not restore_buffer(run.checkpoint, rb):  # collect (current policy) and replicate a new warm-up
            replicate_at = run.start_step + args.warmup_steps
        elif run.start_step >= args.warmup_steps:
            replicate_at = None
    updates_per_vector_step = max(1, round(args.updates_per_step * args.num_envs))

    run.watch(agent, vec_env)  # --capture-video films this policy
    global_step = run.start_step
    obs, _ = vec_env.reset()
    episodes = EpisodeStats()
    losses: dict[str, torch.Tensor] = {}
    while global_step < args.total_timesteps:
        # ---- act and store -----------------------------------------------------------------------
        if global_step < args.warmup_steps and args.warmup_actions == "uniform":
            action = vec_env.random_actions()
        else:
            with run.autocast():
                action = agent.explore(obs)
        next_obs, reward, terminated, truncated, info = vec_env.step(action)
        stored_reward = reward + args.action_reward * action.square().sum(-1) if args.action_reward else reward
        rb.add(obs, action, stored_reward, info["final_obs"], terminated, truncated)
        obs = next_obs
        global_step += args.num_envs
        if episodes.add(info):
            run.log(global_step, episodes.metrics())

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
            run.progress(global_step, episodes.recent_return, sps)
        if run.checkpoint_due(global_step) or global_step >= args.total_timesteps:
            state = dict(agent=agent.state_dict(), learner=learner.state_dict(), **buffer_checkpoint(rb, args.save_buffer))
            run.save(global_step, **state)
    vec_env.close()

    run.final_evaluation(agent, global_step)
    run.close()
