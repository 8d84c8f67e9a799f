"""Symphony's official implementation on this suite's task, budget and progress log, beside `agents/symphony.py`.

The official code (github.com/timurgepard/Symphony-S2) is not part of this repository. Point the
script to a checkout of the commit `agents/symphony.py` follows (its docstring pins it: 1318d66,
2025-12-31, the folder ``S3/``)::

    git clone https://github.com/timurgepard/Symphony-S2 /tmp/Symphony-S2
    mkdir -p /tmp/symphony_official
    git -C /tmp/Symphony-S2 archive 1318d66 | tar -x -C /tmp/symphony_official

    python benchmarks/symphony_official.py --official-dir /tmp/symphony_official \\
        --env Hopper --seed 1 --hidden 128 --buffer-size 40960 --total-timesteps 30000 \\
        --exp-name symphony_official_h128_buf41k --run-dir runs/symphony_official/Hopper__symphony_official_h128_buf41k__s1

and the same task with this suite's agent::

    python agents/symphony.py --env Hopper --seed 1 --hidden 128 --critic-nodes 32 --batch-size 96 \\
        --buffer-size 40960 --total-timesteps 30000 \\
        --exp-name symphony_h128_buf41k --run-dir runs/symphony_official/Hopper__symphony_h128_buf41k__s1

    python -m cleanrl_style.experiments.plot runs/symphony_official

What runs unmodified: the official module (``S3/symphony.py`` of the checkout, imported from its
path): its networks, its one combined loss, its optimizer, its target update, its replay buffer
with the fading weights, the replication of the warm-up (``norm_fill``) and the reward scaling.
The module's ``Symphony(capacity, state_dim, action_dim, h_dim, device, max_action, learning_rate)``
is the interface of the pinned commit; later commits changed it, and this adapter does not follow them.

What this adapter does in place of the official ``train.py`` (which opens a rendering window and
runs at import): the same training loop written anew, on a Gymnasium env of the suite's id
(``Hopper`` is Hopper-v5; the official script used v4). As there: the untrained policy with its
noise acts for ``--warmup-steps`` steps (10,240), then ``norm_fill`` replicates them
``buffer_size / warmup_steps`` times and training starts; each environment step is followed by
``--updates-per-step`` (3) calls of the official ``train()``; in the last 50 steps of an episode's
1,000-step limit the action term is off (noise only); every step reseeds torch, numpy and
``random`` from ``random`` (the official loop's ``seed_reset``), so ``--seed`` seeds ``random``
once at the start and fixes the whole run; terminal flags are ``terminated`` (truncation is not
a terminal). Not done: the official loop's 25-episode test every 2,500 steps and its checkpoints.

The width couplings are the official code's: ``--hidden H`` gives 3 critic sub-networks of ``H / 4``
nodes and batches of ``3 H / 4`` (all nodes); ``agents/symphony.py --hidden 128 --critic-nodes 32
--batch-size 96`` is the same point. The official ``train.py`` also ties the width to the buffer
(``h_dim = capacity // 1000``); here both are flags, so a 40,960 buffer can go with width 128 as in
the recipe arm ``symphony_h128_buf41k``. ``max_action`` is 1 for every env, as in the official
script (Hopper's bounds are [-1, 1]).

Logged like the suite's agents (``cleanrl_style.runs.run.Run``): ``progress.csv`` with
``charts/episodic_return`` and ``charts/episodic_length`` at each finished episode, ``charts/SPS``,
``losses/action_scale`` (the mean ``S`` the official ``train()`` returns) and ``losses/q_bar`` (its
running ``Qbar``) every ``--log-every`` steps, and a final deterministic evaluation
(``eval/return_mean``, ``--eval-episodes`` episodes, no noise, seeds ``seed + 10,000`` on as for the
agents); ``args.json`` and ``provenance.json`` as for any run. At the end, ``official_nets.pt`` holds the
official networks' state dicts, ``Qbar`` and the reward scale; there are no checkpoints and no resume.
"""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the suite's packages, run as a script

from cleanrl_style import Run  # noqa: E402
from cleanrl_style.runs.run import BaseRunArgs  # noqa: E402
from envs.registry import resolve_env_id  # noqa: E402

PINNED_COMMIT = "1318d66bbd5031ee336ebb6c5156321780abe2d3"
NETS_NAME = "official_nets.pt"  # the official networks, Qbar and reward scale at the end of the run


@dataclass
class Args(BaseRunArgs):
    env: str = "Hopper"
    """environment: a short name (Hopper, Humanoid, ...) or a registered Gymnasium id"""
    official_dir: str = "/tmp/symphony_official"
    """the checkout of timurgepard/Symphony-S2 (see the module docstring; not part of this repository)"""
    official_file: str = "S3/symphony.py"
    """the official module inside the checkout"""
    official_commit: str = PINNED_COMMIT
    """the commit the checkout was exported from (recorded in args.json; not checked)"""
    hidden: int = 512
    """the official ``h_dim``: hidden width; each of the 3 critic nets has hidden / 4 nodes, batch = 3 hidden / 4"""
    buffer_size: int = 512_000
    """replay capacity: a multiple of --warmup-steps (the warm-up is replicated buffer_size / warmup_steps times)"""
    warmup_steps: int = 10_240
    """steps acted by the untrained policy before the replication and the first update"""
    updates_per_step: int = 3
    """official train() calls per environment step (the official G)"""
    learning_rate: float = 1e-4
    """the official optimizer's learning rate"""
    noise_only_steps: int = 50
    """last steps of the episode limit acted with noise only once training runs (the official loop's 50)"""
    reseed_every_step: bool = True
    """reseed torch, numpy and random from random at every step, as the official loop does"""
    log_every: int = 1_000
    """log the action scale, Qbar and SPS every this many environment steps"""


def load_official(path: Path) -> ModuleType:
    """Import the official module from its file (a name of its own: ``agents/symphony.py`` may be importable too)."""
    if not path.exists():
        raise SystemExit(f"{path}: no such file. Export the official checkout first (see this script's docstring).")
    spec = importlib.util.spec_from_file_location("symphony_official_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.jit reads the classes' source through the module
    spec.loader.exec_module(module)
    return module


def reseed_from_random() -> None:
    """Draw three seeds from ``random`` and reseed torch, numpy and ``random`` with them."""
    torch.manual_seed(random.randint(0, 2**32 - 1))
    np.random.seed(random.randint(0, 2**32 - 1))
    random.seed(random.randint(0, 2**32 - 1))


class OfficialPolicy(nn.Module):
    """``act(obs)``: the official actor without noise, for the suite's evaluation."""

    def __init__(self, algo):
        super().__init__()
        self._algo = algo  # a plain attribute: the official nets are not registered here

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return self._algo.nets.online.actor(obs.float(), True, False)[0]


def main() -> None:
    run = Run(tyro.cli(Args), agent_file=__file__)
    args = run.args
    if args.buffer_size % args.warmup_steps:
        raise SystemExit(f"--buffer-size {args.buffer_size} must be a multiple of --warmup-steps {args.warmup_steps}")
    official = load_official(Path(args.official_dir) / args.official_file)
    random.seed(args.seed)  # every later seed comes from random (reseed_from_random)
    reseed_from_random()

    env_id = resolve_env_id(args.env)
    env = gym.make(env_id)
    limit = env.spec.max_episode_steps if env.spec and env.spec.max_episode_steps else 1000
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    algo = official.Symphony(
        args.buffer_size, obs_dim, act_dim, args.hidden, run.device, torch.ones(act_dim), args.learning_rate
    )
    times = args.buffer_size // args.warmup_steps
    print(
        f"official Symphony from {args.official_dir}/{args.official_file}: {env_id}, hidden {args.hidden}, "
        f"{algo.nets.online.q_dist} nodes, batch {algo.batch_size}, buffer {args.buffer_size:,} "
        f"({times} x {args.warmup_steps:,}), {args.updates_per_step} updates per step"
    )

    learning = False
    global_step, episode = 0, 0
    recent: list[float] = []
    scale = torch.tensor(math.nan)
    while global_step < args.total_timesteps:
        obs, _ = env.reset(seed=args.seed if episode == 0 else None)
        episode_return, finished = 0.0, False
        for t in range(1, limit + 1):
            if args.reseed_every_step:
                reseed_from_random()
            global_step += 1
            if not learning and algo.replay_buffer.length >= args.warmup_steps:
                learning = True
                algo.replay_buffer.norm_fill(times)
            active = t < limit - args.noise_only_steps if learning else True
            action = algo.select_action(obs, action=active, noise=True)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            algo.replay_buffer.add(obs, action, float(reward), next_obs, terminated)
            episode_return += float(reward)
            if learning:
                for _ in range(args.updates_per_step):
                    scale = algo.train()
            if global_step % args.log_every == 0:
                sps = run.sps(global_step)
                metrics = {"charts/SPS": sps}
                if learning:
                    metrics |= {"losses/action_scale": float(scale.mean()), "losses/q_bar": float(algo.nets.q_next_ema)}
                run.log(global_step, metrics)
                run.progress(global_step, float(np.mean(recent[-10:])) if recent else None, sps)
            if terminated or truncated:
                finished = True
                break
            obs = next_obs
            if global_step >= args.total_timesteps:
                break
        episode += 1
        if finished:
            recent.append(episode_return)
            run.log(global_step, {"charts/episodic_return": episode_return, "charts/episodic_length": float(t)})
    env.close()

    # Saved before the evaluation: a run whose evaluation fails keeps its networks (pull, a later evaluation).
    nets = {"online": algo.nets.online.state_dict(), "target": algo.nets.target.state_dict()}
    torch.save({**nets, "q_bar": algo.nets.q_next_ema, "reward_norm": algo.replay_buffer.norm}, run.dir / NETS_NAME)
    run.final_evaluation(OfficialPolicy(algo), global_step)
    run.close()


# ---------------------------------------------------------------------------------------------
# The actor's two pulls on its scale S at the end of a run (ours and the official, the same way)
# ---------------------------------------------------------------------------------------------
def _suite_agent_module() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "agents" / "symphony.py"
    spec = importlib.util.spec_from_file_location("suite_symphony_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _load_pull_model(run_dir: Path, official_dir: str, env):
    """``(explore, actor_asb, soft_q, q_bar, a_max)`` of the run's final networks (official or suite)."""
    import json

    saved = json.loads((run_dir / "args.json").read_text())
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    if (run_dir / NETS_NAME).exists():
        official = load_official(Path(saved.get("official_dir", official_dir)) / saved.get("official_file", "S3/symphony.py"))
        state = torch.load(run_dir / NETS_NAME, weights_only=False)
        make = lambda: official.ActorCritic(obs_dim, act_dim, saved["hidden"], max_action=torch.ones(act_dim))
        online, target = make(), make()
        online.load_state_dict(state["online"])
        target.load_state_dict(state["target"])

        def actor_asb(obs):
            asb = torch.tanh(online.a(obs) / 2).reshape(-1, 3, act_dim)
            return asb[:, 0], asb[:, 1].abs(), asb[:, 2].abs()

        explore = lambda obs: online.actor(obs, True, True)[0]
        soft_q = lambda obs, act: target.critic_soft(obs, act)[0].squeeze(-1)
        return explore, actor_asb, soft_q, float(state["q_bar"]), torch.ones(act_dim)
    from cleanrl_style.runs.checkpoint import load_checkpoint
    from cleanrl_style.runs.cli import args_from_dict

    agent_module = _suite_agent_module()
    agent_args = args_from_dict(agent_module.Args, saved)
    low, high = torch.as_tensor(env.action_space.low), torch.as_tensor(env.action_space.high)
    agent = agent_module.Symphony(obs_dim, act_dim, low, high, agent_args)
    agent.load_state_dict(load_checkpoint(run_dir, trust=True)["agent"])
    agent.train()  # as in training: the target critic's gradient dropout masks the actor's gradient through q'
    soft_q = lambda obs, act: agent_module.sorted_node_target(agent.nodes(obs, act, target=True), agent.node_weights)
    return lambda obs: agent.explore(obs), agent.actor, soft_q, float(agent.q_bar), agent.action_scale


def pull(run_dirs: list[str], official_dir: str = "/tmp/symphony_official", steps: int = 4096, seed: int = 0) -> None:
    """Per element of ``S`` at states ``s'`` the final noisy policy visits: the gradient of the
    actor term ``-ReHAE((q' - Q_T) / |Q_T|)`` and of the swaddling term, per sample (the losses'
    means undone), and the gradient of ``q'`` itself. The swaddling term alone is stationary at
    ``S = 0.364`` (near ``1/e``), ``B = 0.092`` (``1 / (4e)``), with stiffness ``d2/dS2`` about
    ``B / S`` there: the actor term moves ``S`` by about ``-g_actor / (B / S)``."""
    from cleanrl_style.blocks.sorting import sort_rows  # noqa: F401  (the suite's target needs it importable)

    suite = _suite_agent_module()
    for run_dir in map(Path, run_dirs):
        import json

        saved = json.loads((run_dir / "args.json").read_text())
        env = gym.make(resolve_env_id(saved["env"]))
        explore, actor_asb, soft_q, q_bar, a_max = _load_pull_model(run_dir, official_dir, env)
        torch.manual_seed(seed)
        states, (obs, _) = [], env.reset(seed=seed)
        with torch.no_grad():
            for _ in range(steps):
                action = explore(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0))[0].numpy()
                obs, _, terminated, truncated, _ = env.step(action)
                states.append(obs)
                if terminated or truncated:
                    obs, _ = env.reset()
        next_obs = torch.as_tensor(np.array(states), dtype=torch.float32)
        direction, scale, beta = (t.detach() for t in actor_asb(next_obs))
        scale = scale.clone().requires_grad_(True)
        noise = torch.randn_like(scale).clamp(-math.e, math.e) / math.e
        q_next = soft_q(next_obs, a_max * torch.tanh(scale * direction + noise))
        a = (math.sqrt(5) - 1) / 2
        q_t = (a * q_bar + (1 - a) * q_next).detach()
        advantage = (q_next - q_t) / q_t.abs()
        (g_actor,) = torch.autograd.grad(-suite.rehae(advantage).sum(), scale, retain_graph=True)
        (g_value,) = torch.autograd.grad(q_next.sum(), scale)  # dq'/dS before the advantage's scaling
        s_c, b_c = scale.clamp(1e-3, 1 - 1e-3), beta.clamp(1e-3, 1 - 1e-3)
        sw = suite.big_omega(torch.exp(torch.log(s_c) / b_c)) + b_c * suite.small_omega(s_c) + suite.big_omega(b_c**2)
        (g_sw,) = torch.autograd.grad(sw.sum(), scale)
        stiffness = (b_c / s_c).mean().item()
        print(
            f"{run_dir.name}: S {scale.mean():.3f}, B {beta.mean():.3f}, |Q_T| {q_t.abs().mean():.1f}, "
            f"|advantage| {advantage.abs().mean():.4f}; per element of S: |dq'/dS| {g_value.abs().mean():.2e}, "
            f"g_actor {g_actor.mean():+.2e} "
            f"(|g| {g_actor.abs().mean():.2e}), g_swaddling {g_sw.mean():+.2e}, stiffness B/S {stiffness:.3f}, "
            f"shift -g_actor/(B/S) {-g_actor.mean().item() / stiffness:+.4f}"
        )
        env.close()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "pull":
        import argparse

        parser = argparse.ArgumentParser(prog="symphony_official.py pull", description=pull.__doc__)
        parser.add_argument("run_dirs", nargs="+")
        parser.add_argument("--official-dir", default="/tmp/symphony_official")
        parser.add_argument("--steps", type=int, default=4096)
        ns = parser.parse_args(sys.argv[2:])
        pull(ns.run_dirs, ns.official_dir, ns.steps)
    else:
        main()
