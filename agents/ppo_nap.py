"""PPO with Normalize-and-Project (NaP) for continuous control.

    python agents/ppo_nap.py --env Humanoid
    python agents/ppo_nap.py --env Humanoid --no-nap --no-layer-norm     # the plain PPO baseline

PPO-clip with GAE as in CleanRL's ``ppo_continuous_action.py`` (its MuJoCo defaults: a batch of
2,048 steps, 32 minibatches, 10 epochs, lr 3e-4 decayed linearly, observation and reward
normalization, 64x64 tanh networks), here collected from 8 sub-environments x 256 steps. NaP
(Lyle et al., 2024) adds LayerNorm before every nonlinearity and, after every optimizer step,
projects each layer's weights back to their initial norm, so the linear learning-rate decay is the
only schedule of the effective learning rate. ``--no-nap`` and ``--no-layer-norm`` give the
ablations of the paper from the same file.

Differences from CleanRL, all fixes: truncated episodes bootstrap from ``V(final_obs)`` instead of
being treated as terminal; the normalizer statistics are saved with the model (evaluation uses
them); runs resume from their last checkpoint.

``--compile auto`` compiles each minibatch step whole (``Learner.whole_step``: the loss, its
gradient, the clipping, Adam and the projection as one graph) for runs of 500k steps or more, which
repay the one-off compile. ``--precision bf16``
runs the networks' matrix products in bfloat16 (autocast); the Gaussian's arithmetic, the losses,
the weights and Adam's state stay float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import tyro
from torch import nn

import envs
from cleanrl_style import (
    EpisodeStats,
    FlatParameters,
    NormProjector,
    RewardScaler,
    Run,
    RunArgs,
    RunningNorm,
    adam_step_,
    adam_tensors,
    compile_or_eager,
    every_tensor,
    mlp,
    project_spans_,
    require,
)

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
# --compile auto compiles runs at least this long: the whole step's compile (about 10 s) is repaid
# at ~0.13 s saved per 2,048-step iteration (Humanoid, idle EPYC, benchmarks/ppo_profile.py) after
# about 150k steps, and the margin leaves room for slower compiles and faster eager machines.
COMPILE_FROM_STEPS = 500_000


@dataclass
class Args(RunArgs):
    env: str = "Humanoid"
    """environment: a short name (Humanoid, Ant, Hopper, ...) or any registered Gymnasium id"""
    num_envs: int = 8
    """number of parallel sub-environments"""
    total_timesteps: int = 1_000_000
    """total environment steps, summed over sub-environments"""
    learning_rate: float = 3e-4
    """Adam learning rate at the start of training"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 (NaP's explicit effective-learning-rate schedule)"""
    num_steps: int = 256
    """steps per sub-environment per rollout (batch = num_envs * num_steps)"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    num_minibatches: int = 32
    """minibatches per epoch"""
    update_epochs: int = 10
    """epochs over each batch"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    clip_coef: float = 0.2
    """PPO surrogate clipping coefficient"""
    clip_vloss: bool = True
    """clip the value loss as in the PPO implementation details"""
    ent_coef: float = 0.0
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clipping"""
    target_kl: float | None = None
    """stop the epochs of an update early when the approximate KL exceeds this"""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """hidden widths of the actor and the critic"""
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
    obs_clip: float = 10.0
    """clip normalized observations to [-obs_clip, obs_clip]"""
    normalize_reward: bool = True
    """scale rewards by the running std of the discounted return"""

    # filled in at run time
    batch_size: int = 0
    minibatch_size: int = 0
    num_iterations: int = 0

    def validate(self) -> None:
        """Derive the batch sizes (called by Run, after --resume) and refuse ones that cannot work."""
        self.batch_size = self.num_envs * self.num_steps
        self.minibatch_size = self.batch_size // self.num_minibatches
        self.num_iterations = self.total_timesteps // self.batch_size
        batch = f"one batch ({self.batch_size} steps = --num-envs x --num-steps)"
        require(self.minibatch_size >= 1, f"--num-minibatches {self.num_minibatches} exceeds {batch}: lower it or raise those")
        require(self.num_iterations > 0, f"--total-timesteps {self.total_timesteps} is below {batch}: raise it or lower those")


class Agent(nn.Module):
    """Gaussian policy and value function; the observation statistics are part of the model."""

    def __init__(self, obs_dim: int, act_dim: int, args: Args):
        super().__init__()
        self.obs_norm = RunningNorm(obs_dim, clip=args.obs_clip)
        self.critic = mlp(obs_dim, args.hidden_sizes, 1, nn.Tanh, args.layer_norm, output_gain=1.0)
        self.actor_mean = mlp(obs_dim, args.hidden_sizes, act_dim, nn.Tanh, args.layer_norm, output_gain=0.01)
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def output_layers(self) -> list[nn.Module]:
        return [self.critic[-1], self.actor_mean[-1]]

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: normalized observations ``(batch, obs_dim)`` -> values ``(batch,)``."""
        return self.critic(x).squeeze(-1).float()  # float32 even under bf16 autocast

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        """Sample (or score) actions for normalized observations; returns action, logprob, entropy, value.

        The diagonal Gaussian's log-density and entropy are written out: ``torch.distributions``
        validates its arguments on every call, a cost that shows in minibatch updates this small.
        """
        mean = self.actor_mean(x).float()  # the distribution's arithmetic in float32 under bf16 autocast
        logstd = self.actor_logstd.expand_as(mean)
        std = logstd.exp()
        if action is None:
            action = mean + std * torch.randn_like(mean)
        logprob = (-0.5 * ((action - mean) / std) ** 2 - logstd - HALF_LOG_2PI).sum(-1)
        entropy = (0.5 + HALF_LOG_2PI + logstd).sum(-1)
        return action, logprob, entropy, self.get_value(x)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action (the mean) for raw observations, used by evaluation."""
        return self.actor_mean(self.obs_norm(obs)).float()


def gae(rewards, values, dones, next_value, next_done, gamma: float, gae_lambda: float):
    """Generalized advantage estimates and value targets of a rollout of shape [steps, envs]
    (Schulman et al., 2016, arXiv:1506.02438). ``dones[t]`` marks an episode that ended just before
    step ``t``; ``next_value`` and ``next_done`` belong to the observation after the last step."""
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    num_steps = rewards.shape[0]
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal, nextvalues = 1.0 - next_done, next_value
        else:
            nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def ppo_objective(newlogprob, old_logprobs, entropy, newvalue, advantages, returns, old_values, args: Args):
    """PPO-clip's loss of one minibatch from the policy's new log-probabilities, entropy and values,
    and its diagnostics (old and new approximate KL, clip fraction)."""
    logratio = newlogprob - old_logprobs
    ratio = logratio.exp()
    with torch.no_grad():
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean()

    if args.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

    if args.clip_vloss:
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = old_values + torch.clamp(newvalue - old_values, -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * ((newvalue - returns) ** 2).mean()

    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    return loss, pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac


class Learner:
    """Adam and the NaP projection of an :class:`Agent`, and its minibatch step.

    Eagerly a step is ``backward()``, gradient clipping, fused Adam and the projection on the flat
    parameter tensor. ``compile=True`` runs :meth:`whole_step` through ``torch.compile`` instead: the
    loss, its gradient, the clipping, Adam and the projection as one graph, the same step up to
    float rounding.
    """

    def __init__(self, agent: Agent, args: Args, autocast=None, compile: bool = False):
        self.agent, self.args = agent, args
        self.autocast = autocast or (lambda: torch.autocast("cpu", enabled=False))
        # All parameters in one tensor: zeroing, clipping and the Adam step are then a few ops each
        # instead of dozens (a third of each minibatch update on the CPU). Same math as per-parameter.
        self.flat = FlatParameters(agent)
        self.optimizer = torch.optim.Adam([self.flat.param], lr=args.learning_rate, eps=1e-5, fused=True)
        self.projector = NormProjector(
            agent,
            agent.output_layers(),
            project_output=args.nap_project_output,
            layer_norm=args.nap_layer_norm,
            biases=args.nap_biases,
        )
        self._compiled = compile_or_eager(self.whole_step, True, mutated=self._mutated) if compile else None
        self._state: dict | None = None  # whole_step's tensors, gathered at its first call

    def set_lr(self, lr: float) -> None:
        self.optimizer.param_groups[0]["lr"] = lr
        if self._state is not None:
            self._state["lr"].fill_(lr)  # a tensor in the compiled graph: the schedule does not recompile

    def loss(self, obs, actions, old_logprobs, advantages, returns, old_values):
        """:func:`ppo_objective` of one minibatch (normalized observations) and its diagnostics."""
        with self.autocast():
            _, newlogprob, entropy, newvalue = self.agent.get_action_and_value(obs, actions)
        return ppo_objective(newlogprob, old_logprobs, entropy, newvalue, advantages, returns, old_values, self.args)

    def step(self, *minibatch: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One optimizer step on a minibatch; returns :func:`ppo_objective`'s outputs."""
        if self._compiled is not None:
            if self._state is None:
                self._state = self._gather_state()
            return self._compiled(self._state, *minibatch)
        loss, *diagnostics = self.loss(*minibatch)
        self.flat.zero_grad()
        loss.backward()
        self.flat.clip_grad_norm_(self.args.max_grad_norm)
        self.optimizer.step()
        if self.args.nap:
            self.projector.project()
        return (loss.detach(), *(d.detach() for d in diagnostics))

    def whole_step(self, state: dict, *minibatch: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """:meth:`step` as tensor code without ``backward()`` or ``optimizer.step()``, so that
        ``torch.compile`` makes it one graph: the gradient by ``torch.func.grad`` with respect to the
        flat parameter vector, the clipping written out, Adam by :func:`adam_step_` on the
        optimizer's own state, NaP by :func:`project_spans_`."""
        params = state["agent"]

        def loss(vector):
            with self.flat.reparametrized(vector):
                outputs = self.loss(*minibatch)
            return outputs[0], tuple(o.detach() for o in outputs)

        grad, outputs = torch.func.grad(loss, has_aux=True)(params.detach())
        # FlatParameters.clip_grad_norm_'s scaling, as tensor ops
        grad = grad * (self.args.max_grad_norm / (torch.linalg.vector_norm(grad) + 1e-6)).clamp(max=1.0)
        adam_step_(params, grad, state["agent_adam"], state["lr"], self._hyper["agent"])
        if self.args.nap:
            project_spans_(params, self._spans)
        return outputs

    def _gather_state(self) -> dict:
        """The tensors :meth:`whole_step` reads and writes; its constants (NaP spans, Adam's settings)."""
        self._spans = self.projector.flat_spans(self.flat)
        tensors, self._hyper = adam_tensors({"agent": (self.flat.param, self.optimizer)})
        return {**tensors, "lr": torch.tensor(float(self.optimizer.param_groups[0]["lr"]))}

    def _mutated(self) -> list[torch.Tensor]:
        """Every tensor :meth:`whole_step` changes in place (restored if its compile fails)."""
        return every_tensor(self._state or {})

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "nap": self.projector.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self._state = None  # the optimizer's state tensors are replaced
        self.optimizer.load_state_dict(state["optimizer"])
        self.projector.load_state_dict(state["nap"])


def make_agent(args: Args, vec_env: envs.TorchVectorEnv) -> Agent:
    """The model for ``vec_env``'s spaces, on the env's device (also rebuilds it for evaluation)."""
    obs_dim, act_dim = vec_env.single_observation_space.shape[0], vec_env.single_action_space.shape[0]
    return Agent(obs_dim, act_dim, args).to(vec_env.device)


if __name__ == "__main__":
    run = Run(tyro.cli(Args), agent_file=__file__)
    args, device = run.args, run.device

    vec_env = run.make_vector_env()
    obs_dim = vec_env.single_observation_space.shape[0]
    act_dim = vec_env.single_action_space.shape[0]
    agent = make_agent(args, vec_env)
    # A minibatch update of these small networks is bound by per-op overhead, not arithmetic: compiled,
    # the whole step (loss, gradient, clipping, Adam, projection) is one graph of a few fused kernels.
    use_compile = args.compile == "on" or (args.compile == "auto" and args.total_timesteps >= COMPILE_FROM_STEPS)
    learner = Learner(agent, args, autocast=run.autocast, compile=use_compile)
    run.record(compiled_update=use_compile)  # what --compile auto chose, in provenance.json
    reward_scaler = RewardScaler(args.num_envs, args.gamma).to(device)
    start_iteration = 1
    if run.checkpoint is not None:
        agent.load_state_dict(run.checkpoint["agent"])
        learner.load_state_dict(run.checkpoint)
        reward_scaler.load_state_dict(run.checkpoint["reward_scaler"])
        start_iteration = run.checkpoint["iteration"] + 1

    # Rollout storage, on the training device
    obs = torch.zeros((args.num_steps, args.num_envs, obs_dim), device=device)
    actions = torch.zeros((args.num_steps, args.num_envs, act_dim), device=device)
    logprobs = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    dones = torch.zeros((args.num_steps, args.num_envs), device=device)
    values = torch.zeros((args.num_steps, args.num_envs), device=device)

    run.watch(agent, vec_env)  # --capture-video films this policy
    global_step = run.start_step
    raw_obs, _ = vec_env.reset()
    agent.obs_norm.update(raw_obs)
    next_obs = agent.obs_norm(raw_obs)
    next_done = torch.zeros(args.num_envs, device=device)
    episodes = EpisodeStats()

    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            learner.set_lr(args.learning_rate * (1.0 - (iteration - 1.0) / args.num_iterations))

        # ---- collect a rollout -------------------------------------------------------------------
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad(), run.autocast():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step], actions[step], logprobs[step] = value, action, logprob

            raw_obs, reward, terminated, truncated, info = vec_env.step(action)
            done = info["done"]
            agent.obs_norm.update(raw_obs)
            next_obs = agent.obs_norm(raw_obs)
            reward = reward_scaler(reward, done) if args.normalize_reward else reward
            if truncated.any():
                # A time limit is not a terminal state: bootstrap from the value of the final observation.
                with torch.no_grad():
                    final_value = agent.get_value(agent.obs_norm(info["final_obs"]))
                reward = reward + args.gamma * final_value * (truncated & ~terminated)
            rewards[step] = reward
            next_done = done.float()
            episodes.add(info)

        # ---- GAE ---------------------------------------------------------------------------------
        with torch.no_grad():
            advantages, returns = gae(
                rewards, values, dones, agent.get_value(next_obs), next_done, args.gamma, args.gae_lambda
            )

        b_obs = obs.reshape((-1, obs_dim))
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1, act_dim))
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # ---- PPO update, with the NaP projection after every optimizer step ------------------
        clipfracs = []
        for _epoch in range(args.update_epochs):
            # Shuffle the batch once per epoch; minibatches are then slices (views), not gathers.
            b_inds = torch.randperm(args.batch_size, device=device)
            e_obs, e_actions, e_logprobs = b_obs[b_inds], b_actions[b_inds], b_logprobs[b_inds]
            e_advantages, e_returns, e_values = b_advantages[b_inds], b_returns[b_inds], b_values[b_inds]
            for start in range(0, args.batch_size, args.minibatch_size):
                mb = slice(start, start + args.minibatch_size)
                loss, pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac = learner.step(
                    e_obs[mb], e_actions[mb], e_logprobs[mb], e_advantages[mb], e_returns[mb], e_values[mb]
                )
                clipfracs.append(clipfrac)

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        # ---- logging and checkpoints -------------------------------------------------------------
        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        lr = learner.optimizer.param_groups[0]["lr"]
        sps = run.sps(global_step)
        metrics = {
            "charts/learning_rate": lr,
            "charts/SPS": sps,
            "losses/value_loss": v_loss.item(),
            "losses/policy_loss": pg_loss.item(),
            "losses/entropy": entropy_loss.item(),
            "losses/old_approx_kl": old_approx_kl.item(),
            "losses/approx_kl": approx_kl.item(),
            "losses/clipfrac": torch.stack(clipfracs).mean().item(),
            "losses/explained_variance": explained_var,
            **learner.projector.layer_stats(lr),
            **episodes.metrics(),
        }
        run.log(global_step, metrics)
        run.progress(global_step, episodes.recent_return, sps)

        if run.checkpoint_due(global_step) or iteration == args.num_iterations:
            run.save(
                global_step,
                iteration=iteration,
                agent=agent.state_dict(),
                **learner.state_dict(),
                reward_scaler=reward_scaler.state_dict(),
            )
    vec_env.close()

    run.final_evaluation(agent, global_step)
    run.close()
