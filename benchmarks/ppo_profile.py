"""Where one PPO-NaP iteration's time goes: physics, the policy's rollout step, the minibatch steps.

    python benchmarks/ppo_profile.py                       # Humanoid, 8 envs x 256 steps, 32 minibatches x 10 epochs
    python benchmarks/ppo_profile.py --env Ant --rounds 3
    python benchmarks/ppo_profile.py --in-loop             # the same parts timed inside one run of the agent

Each part of one iteration of ``agents/ppo_nap.py`` at its defaults is timed on its own, with the
agent's own classes and backend, one torch thread, in alternating rounds (``benchmarks/timing.py``):

- **physics**: 256 vector steps of the environment, under zero actions and under the actions the
  untrained policy samples (recorded over one rollout, replayed open loop): the backend's Python
  (task, rewards, resets) included;
- **policy step**: 256 times the rollout's policy forward (action, log-probability, value) with the
  observation and reward normalization;
- **minibatch steps**, the update's 320 optimizer steps on minibatches of 64, three ways: eager
  (``backward()``, fused Adam, projection), the loss and its backward compiled with the rest eager,
  and the whole step compiled as one graph (``Learner.whole_step``, what ``--compile on`` runs).

The figures are seconds per iteration (2,048 steps at the defaults) (the minibatch step also in ms), medians over the
rounds, and the time of each variant's first step (the compile, where there is one; a warm
inductor cache in the user's temp folder shortens it). Random minibatches: the cost of a step does
not depend on the data.

``--in-loop`` times the agent's own loop instead, where the parts slow each other down (caches,
the second core's physics threads) as timings in isolation cannot show: it runs
``agents/ppo_nap.py --compile on`` (with ``--total-timesteps`` and ``--env-threads`` passed on) in
this process, with timers around the vector env's ``step`` (and inside it the backend's ``_step``,
MuJoCo's ``Batch.step``, the task's reward and observation code, ``mj_rnePostConstraint`` and the
resets), the running normalizations and the compiled minibatch step, and prints seconds per
iteration from the end of the first iteration (the compile) to the last minibatch step, with the
remainder as the rest of the loop::

    python benchmarks/ppo_profile.py --in-loop --total-timesteps 49152
"""

from __future__ import annotations

import collections
import runpy
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))

from timing import alternating_rounds  # noqa: E402

import envs  # noqa: E402
from cleanrl_style import RewardScaler, compile_or_eager  # noqa: E402
from cleanrl_style.runs.evaluate import import_agent  # noqa: E402


@dataclass
class Args:
    env: str = "Humanoid"
    """environment short name or Gymnasium id"""
    backend: str = "auto"
    """the agent's vector-env backend"""
    rounds: int = 5
    """alternating rounds"""
    in_loop: bool = False
    """time the parts inside one run of the agent instead (see the module docstring)"""
    total_timesteps: int = 49152
    """--in-loop: the run's length"""
    env_threads: int = 0
    """--in-loop: the agent's --env-threads (0: one per CPU)"""


def main(args: Args) -> None:
    torch.set_num_threads(1)
    ppo = import_agent("agents/ppo_nap.py")
    run_args = ppo.Args(env=args.env, backend=args.backend)
    run_args.validate()  # derives the batch and minibatch sizes, as Run does
    num_envs, num_steps, minibatch = run_args.num_envs, run_args.num_steps, run_args.minibatch_size
    updates = run_args.num_minibatches * run_args.update_epochs
    vec_env = envs.make(args.env, num_envs, backend=args.backend, device=torch.device("cpu"), seed=1)
    agent = ppo.make_agent(run_args, vec_env)
    obs_dim, act_dim = vec_env.single_observation_space.shape[0], vec_env.single_action_space.shape[0]
    scaler = RewardScaler(num_envs, run_args.gamma)
    raw, _ = vec_env.reset()
    zeros = torch.zeros(num_envs, act_dim)

    def physics() -> None:
        for _ in range(num_steps):
            vec_env.step(zeros)

    # The actions an untrained policy samples (Gaussian, unit scale), recorded over one rollout and
    # replayed open loop: the bodies flail and fall as in early training, unlike under zero torques.
    with torch.no_grad():
        sampled, obs = [], raw
        for _ in range(num_steps):
            action = agent.get_action_and_value(agent.obs_norm(obs))[0]
            sampled.append(action)
            obs = vec_env.step(action)[0]

    def physics_sampled() -> None:
        for action in sampled:
            vec_env.step(action)

    def policy_step() -> None:
        for _ in range(num_steps):
            agent.obs_norm.update(raw)
            with torch.no_grad():
                agent.get_action_and_value(agent.obs_norm(raw))
            scaler(torch.ones(num_envs), torch.zeros(num_envs, dtype=torch.bool))

    g = torch.Generator().manual_seed(0)
    batch = (
        torch.randn(minibatch, obs_dim, generator=g),
        torch.randn(minibatch, act_dim, generator=g),
        torch.randn(minibatch, generator=g) - 3.0,
        *(torch.randn(minibatch, generator=g) for _ in range(3)),
    )
    # One model per learner: FlatParameters moves a model's parameters into its learner's buffer.
    eager = ppo.Learner(ppo.make_agent(run_args, vec_env), run_args)
    whole = ppo.Learner(ppo.make_agent(run_args, vec_env), run_args, compile=True)
    loss_only = ppo.Learner(ppo.make_agent(run_args, vec_env), run_args)
    compiled_loss = compile_or_eager(loss_only.loss, True)

    def loss_compiled_step() -> None:  # the loss and its backward compiled, the optimizer side eager
        loss, *_ = compiled_loss(*batch)
        loss_only.flat.zero_grad()
        loss.backward()
        loss_only.flat.clip_grad_norm_(run_args.max_grad_norm)
        loss_only.optimizer.step()
        loss_only.projector.project()

    steps = {
        "eager": lambda: eager.step(*batch),
        "loss compiled": loss_compiled_step,
        "whole step compiled": lambda: whole.step(*batch),
    }
    first_call = {}
    for name, step in steps.items():  # compile and warm up outside the clock
        start = time.perf_counter()
        step()
        first_call[name] = time.perf_counter() - start
        for _ in range(4):
            step()
    contenders = {"physics, zero actions": physics, "physics, sampled actions": physics_sampled, "policy step": policy_step}
    contenders |= {f"minibatch steps, {name}": (lambda s=s: [s() for _ in range(updates)]) for name, s in steps.items()}
    seconds = alternating_rounds(contenders, args.rounds, seconds_per_round=0.0, min_calls=1)
    print(
        f"{args.env}, backend {type(vec_env).__name__}, {num_envs} envs x {num_steps} steps, {updates} minibatch steps "
        f"of {minibatch}, torch {torch.__version__}, one thread; seconds per iteration (median of {args.rounds} rounds):"
    )
    for name, values in seconds.items():
        per_step = f"   ({statistics.median(values) / updates * 1e3:.3f} ms per step)" if name.startswith("minibatch") else ""
        print(f"  {name:36s} {statistics.median(values):.3f} s   rounds {[round(v, 3) for v in values]}{per_step}")
    firsts = ", ".join(f"{name} {first:.1f} s" for name, first in first_call.items())
    print(f"first minibatch step (the compile, where there is one): {firsts}")


def in_loop(args: Args) -> None:
    import cleanrl_style
    import envs.core
    import envs.mujoco_backend
    import envs.mujoco_tasks
    from cleanrl_style.blocks import normalization

    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    order: list[str] = []  # the parts in the order they were wrapped: each nested one under its caller
    clock = {"from": None, "to": None, "updates": 0}

    def timed(owner, name: str, label: str, learner_step: bool = False) -> None:
        original = getattr(owner, name)
        order.append(label)

        def wrapper(*a, **k):
            start = time.perf_counter()
            out = original(*a, **k)
            end = time.perf_counter()
            if learner_step:
                clock["updates"] += 1
                clock["to"] = end
                if clock["from"] is None and clock["updates"] == updates_per_iteration:
                    clock["from"] = end  # the first iteration (and its compile) ends here
                    totals.clear()
                    return out
            if clock["from"] is not None:
                totals[label][0] += end - start
                totals[label][1] += 1
            return out

        setattr(owner, name, wrapper)

    ppo = import_agent("agents/ppo_nap.py")
    run_args = ppo.Args(env=args.env, backend=args.backend)
    run_args.validate()
    updates_per_iteration = run_args.num_minibatches * run_args.update_epochs
    timed(envs.core.TorchVectorEnv, "step", "vector env step (contract + backend)")
    timed(envs.mujoco_backend.MujocoBatchVectorEnv, "_step", "  backend step (mujoco)")
    from mujoco.batch import Batch

    timed(Batch, "step", "    physics: Batch.step")
    timed(envs.mujoco_tasks.LocomotionTask, "outcome", "    task: observation, reward, termination")
    timed(envs.mujoco_backend.MujocoBatchVectorEnv, "_rne_post_constraint", "    mj_rnePostConstraint (cfrc_ext)")
    timed(envs.mujoco_backend.MujocoBatchVectorEnv, "_reset_simulations", "    resets")
    timed(normalization.RunningNorm, "update", "observation and return statistics (update)")
    timed(normalization.RunningNorm, "forward", "observation normalization")
    original_compile = cleanrl_style.compile_or_eager

    def compile_and_time(fn, enabled, *a, **k):
        compiled = original_compile(fn, enabled, *a, **k)
        if getattr(fn, "__name__", "") != "whole_step":
            return compiled
        holder = type("Holder", (), {"step": staticmethod(compiled)})
        timed(holder, "step", "minibatch steps (compiled whole step)", learner_step=True)
        return holder.step

    cleanrl_style.compile_or_eager = compile_and_time
    sys.argv = [
        "agents/ppo_nap.py", "--env", args.env, "--backend", args.backend, "--total-timesteps", str(args.total_timesteps),
        "--compile", "on", "--env-threads", str(args.env_threads), "--torch-threads", "1",
        "--eval-episodes", "0", "--no-progress-bar", "--run-dir", str(Path(tempfile.mkdtemp()) / "run"),
    ]  # fmt: skip
    runpy.run_path(str(REPO / "agents" / "ppo_nap.py"), run_name="__main__")
    if clock["updates"] < 2 * updates_per_iteration:
        sys.exit("--in-loop needs at least two iterations: raise --total-timesteps")
    iterations = clock["updates"] / updates_per_iteration - 1
    wall = (clock["to"] - clock["from"]) / iterations
    print(
        f"\n{args.env}, {iterations:.0f} iterations after the first, {run_args.num_envs} envs x {run_args.num_steps} steps, "
        f"--env-threads {args.env_threads}, torch {torch.__version__}: {wall:.3f} s per iteration, "
        f"{run_args.num_envs * run_args.num_steps / wall:,.0f} steps/s"
    )
    top = 0.0
    for label in order:
        seconds, calls = totals[label]
        if not calls:
            continue
        per_iteration = seconds / iterations
        if not label.startswith(" "):
            top += per_iteration
        print(f"  {label:46s} {per_iteration:6.3f} s  {seconds / calls * 1e6:8.1f} us per call")
    print(f"  {'the rest of the loop':46s} {wall - top:6.3f} s")


if __name__ == "__main__":
    cli = tyro.cli(Args)
    in_loop(cli) if cli.in_loop else main(cli)
