"""Gradient updates per second: ``agents/sac_nap.py`` (NaP off) against Stable-Baselines3 SAC.

    python benchmarks/sac_vs_sb3.py                       # Hopper shapes, 256x256, batch 256, CPU
    python benchmarks/sac_vs_sb3.py --compile             # our losses compiled
    python benchmarks/sac_vs_sb3.py --device cuda --updates 2000

Both sides get the same network widths, batch size, observation/action sizes and torch threads, in
the same process. Each side's replay buffer is filled with the same random transitions, then each
runs ``--updates`` gradient steps (critic, actor and temperature, target update) per round; rounds
alternate between the two so that a busy machine slows both alike, and the median round counts.
What is timed is the training step only (sampling a batch included), not environment stepping.
With ``--compile`` our whole update runs compiled (one graph: ``Learner.whole_update``), beside the
eager update in the same rounds; the compile happens during the warm-up, outside the timed rounds.

Beside the two sides, in the same rounds: each side's FLOPs per update (``FlopCounterMode``), and
the **ceiling**, our update's matrix products replayed alone (``benchmarks/timing.py``). The
ceiling bounds what any rewrite of the rest could reach: it prints the fastest ratio over SB3 that
an update doing only these products would get, and the share of a 1.5x-SB3 update's time budget
the products alone fill.

``--mode loop`` times whole training runs instead, environment steps per second of the agent's own
loop (acting, stepping, storing, sampling, updating), one torch thread each, in alternating rounds:

    python benchmarks/sac_vs_sb3.py --mode loop --rounds 2 --leanrl ../LeanRL --leanrl-python ../LeanRL/.venv/bin/python

- **ours**: ``agents/sac_nap.py --no-nap --no-layer-norm --compile on`` (``--compile off`` with
  ``--no-compile``) on ``--env``, in a process of its own;
- **SB3**: ``SAC("MlpPolicy")`` on the Gymnasium env with the same widths, batch and
  ``learning_starts``, one gradient step per environment step, in this process;
- **LeanRL** (with ``--leanrl``, a checkout of pytorch-labs/LeanRL, not vendored here):
  ``leanrl/sac_continuous_action_torchcompile.py --compile --no-cuda`` under ``--leanrl-python``, an
  interpreter with the torch, tensordict and torchrl of its release (on torch 2.13 with tensordict
  0.14-0.15 dynamo fails in its update), on ``--leanrl-env`` (its gymnasium's Hopper, v4 under
  gymnasium 0.29). CleanRL's SAC as LeanRL has it does two actor and temperature steps every second
  environment step: the same gradient steps per environment step as the other two.

Each run is ``--learning-starts`` random steps then ``--loop-steps`` with updates. The figure is
the **steady** rate, steps per second after the updates start, without their first 1,000 steps
(which hold ours' compile): ours from its ``progress.csv`` clock (one row per 1,000 steps), SB3 from
a callback's clock; LeanRL's is the rate it prints itself, timed from the third step after its
updates start (its compiles happen on the first calls, about when its clock starts).
"""

from __future__ import annotations

import dataclasses
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import tyro
from torch.utils.flop_counter import FlopCounterMode

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from timing import alternating_rounds, record_matmuls, replay_matmuls, run_leanrl  # noqa: E402  (benchmarks/timing.py)

from cleanrl_style.blocks.replay import ReplayBuffer  # noqa: E402
from cleanrl_style.runs.evaluate import import_agent  # noqa: E402


@dataclass
class BenchArgs:
    env: str = "Hopper-v5"
    """environment whose observation/action sizes are used (no stepping is timed; --mode loop: the env trained on)"""
    hidden: int = 256
    """hidden width of both hidden layers, actor and critics (SB3's default net_arch)"""
    batch_size: int = 256
    """minibatch size"""
    updates: int = 300
    """gradient steps per timed round"""
    rounds: int = 5
    """alternating rounds per side; the median is reported"""
    layer_norm: bool = False
    """LayerNorm in sac_nap's networks (off: the very same networks as SB3's)"""
    threads: int = 1
    """torch threads for both sides (1 by default: on a shared CPU more threads than free cores thrash)"""
    device: str = "cpu"
    """torch device for both sides"""
    compile: bool = False
    """also time our whole update compiled (``--compile on`` in the agent), beside the eager one"""
    precision: str = "fp32"
    """our arithmetic: fp32, or bf16 autocast (SB3 stays fp32)"""
    mode: Literal["updates", "loop"] = "updates"
    """updates: gradient steps per second in this process; loop: whole training runs (see the module docstring)"""
    learning_starts: int = 5_000
    """--mode loop: random steps before the updates start"""
    loop_steps: int = 5_000
    """--mode loop: environment steps with updates per run (at least 2,000)"""
    leanrl: Path | None = None
    """--mode loop: a checkout of pytorch-labs/LeanRL, to time its compiled SAC as well"""
    leanrl_python: str = sys.executable
    """the Python that runs LeanRL (its own environment)"""
    leanrl_env: str = "Hopper-v4"
    """the env id LeanRL's gymnasium knows"""


def make_ours(obs_dim, act_dim, low, high, args: BenchArgs):
    sac = import_agent(str(REPO / "agents" / "sac_nap.py"))
    agent_args = sac.Args(
        hidden_sizes=(args.hidden, args.hidden),
        batch_size=args.batch_size,
        nap=False,
        layer_norm=args.layer_norm,
        anneal_lr=False,
        device=args.device,
        precision=args.precision,
    )
    agent = sac.SoftActorCritic(obs_dim, act_dim, torch.as_tensor(low), torch.as_tensor(high), agent_args).to(args.device)
    device_type = torch.device(args.device).type
    autocast = lambda: torch.autocast(device_type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    learner = sac.Learner(agent, agent_args, autocast, compile=args.compile)
    update = learner.update
    rb = ReplayBuffer(100_000, (obs_dim,), (act_dim,), device=args.device)

    def train(n: int) -> None:
        for _ in range(n):
            update(rb.sample(args.batch_size))
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    return rb, train


def make_sb3(env, args: BenchArgs):
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import configure

    model = SAC(
        "MlpPolicy",
        env,
        policy_kwargs=dict(net_arch=[args.hidden, args.hidden]),
        batch_size=args.batch_size,
        learning_starts=0,
        buffer_size=100_000,
        device=args.device,
        verbose=0,
    )
    model.set_logger(configure(None, []))

    def train(n: int) -> None:
        model.train(gradient_steps=n, batch_size=args.batch_size)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    return model, train


def main(args: BenchArgs) -> float:
    import gymnasium as gym

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    env = gym.make(args.env)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    low, high = env.action_space.low, env.action_space.high

    # The same 10,000 random transitions on both sides.
    rng = np.random.default_rng(0)
    n = 10_000
    obs = rng.standard_normal((n, obs_dim)).astype(np.float32)
    next_obs = rng.standard_normal((n, obs_dim)).astype(np.float32)
    actions = rng.uniform(low, high, (n, act_dim)).astype(np.float32)
    rewards = rng.standard_normal(n).astype(np.float32)
    dones = rng.random(n) < 0.01

    rb, ours = make_ours(obs_dim, act_dim, low, high, args)
    rb.add(
        torch.from_numpy(obs),
        torch.from_numpy(actions),
        torch.from_numpy(rewards),
        torch.from_numpy(next_obs),
        torch.from_numpy(dones),
        torch.zeros(n, dtype=torch.bool),
    )
    model, sb3 = make_sb3(env, args)
    for i in range(n):
        model.replay_buffer.add(
            obs[i : i + 1], next_obs[i : i + 1], actions[i : i + 1], rewards[i : i + 1], dones[i : i + 1], [{}]
        )

    ours(20)  # warm-up (allocator, first-call overheads, the compile)
    sb3(20)
    # FLOPs and matrix products are counted on an eager twin of ours (same math): a compiled function
    # once called under a dispatch mode (FlopCounterMode) ran about 2x slower afterwards (measured).
    twin_rb, twin = (
        make_ours(obs_dim, act_dim, low, high, dataclasses.replace(args, compile=False)) if args.compile else (rb, ours)
    )
    if args.compile:
        twin_rb.add(*(torch.from_numpy(a) for a in (obs, actions, rewards, next_obs, dones)), torch.zeros(n, dtype=torch.bool))
    flops = {}
    for name, fn in (("sac_nap", twin), ("sb3", sb3)):
        with FlopCounterMode(display=False) as counter:
            fn(1)
        flops[name] = counter.get_total_flops()
    products = record_matmuls(lambda: twin(1))
    replay = replay_matmuls(products, args.device)

    def ceiling(n: int) -> None:
        for _ in range(n):
            replay()

    # One call of each per round, ``--updates`` updates each, in turn (the machine's speed drifts).
    contenders = {"sac_nap": ours, "sb3": sb3, "ceiling": ceiling}
    if args.compile:  # the eager update in the same rounds: what compiling gains
        contenders["sac_nap_eager"] = twin
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    seconds = alternating_rounds(
        {k: (lambda fn=fn: fn(args.updates)) for k, fn in contenders.items()}, args.rounds, 0.0, sync, min_calls=1
    )
    rates = {name: [args.updates / s for s in per_round] for name, per_round in seconds.items()}
    ours_rate, sb3_rate, ceiling_rate = (statistics.median(rates[k]) for k in ("sac_nap", "sb3", "ceiling"))
    ratio = ours_rate / sb3_rate
    print(
        f"{args.env} shapes, {args.hidden}x{args.hidden}, batch {args.batch_size}, device {args.device}, "
        f"torch threads {torch.get_num_threads()}, layer_norm={args.layer_norm}, ours compiled={args.compile}, "
        f"ours {args.precision}, torch {torch.__version__}"
    )
    rows = [("sac_nap", "sac_nap (NaP off):"), ("sb3", "SB3 SAC:")]
    if args.compile:
        rows = [("sac_nap", "sac_nap compiled:"), ("sac_nap_eager", "sac_nap eager:"), ("sb3", "SB3 SAC:")]
    for name, title in rows:
        per_round = [round(x, 1) for x in rates[name]]
        mflop = flops["sac_nap" if name == "sac_nap_eager" else name] / 1e6
        print(
            f"  {title:19s}{statistics.median(rates[name]):8.1f} updates/s   {mflop:6.1f} MFLOP per update  rounds {per_round}"
        )
    print(f"  ratio: {ratio:.2f}x")
    if args.compile:
        eager_rate = statistics.median(rates["sac_nap_eager"])
        print(f"  eager / SB3: {eager_rate / sb3_rate:.2f}x; compiled / eager: {ours_rate / eager_rate:.2f}x")
    budget_ms = 1e3 / (1.5 * sb3_rate)
    print(
        f"  ceiling, our update's {len(products)} matrix products alone: {1e3 / ceiling_rate:.2f} ms per update "
        f"({ceiling_rate / sb3_rate:.2f}x SB3 if nothing else cost time); 1.5x SB3 leaves {budget_ms:.2f} ms per update, "
        f"{1e3 / ceiling_rate / budget_ms:.0%} of it taken by the products, {budget_ms - 1e3 / ceiling_rate:.2f} ms for "
        f"everything else (ours now: {1e3 / ours_rate - 1e3 / ceiling_rate:.2f} ms)"
    )
    return ratio


STEADY_AFTER = 1_000  # steps after the updates start that the steady rate leaves out (ours' compile)


def ours_loop_sps(args: BenchArgs) -> float:
    """Steady steps/s of one run of agents/sac_nap.py (NaP and LayerNorm off) in its own process."""
    from cleanrl_style.runs.logger import read_progress

    total = args.learning_starts + args.loop_steps
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, str(REPO / "agents" / "sac_nap.py"), "--env", args.env, "--no-nap", "--no-layer-norm"]
        cmd += ["--hidden-sizes", str(args.hidden), str(args.hidden), "--batch-size", str(args.batch_size)]
        cmd += ["--learning-starts", str(args.learning_starts), "--total-timesteps", str(total)]
        cmd += ["--compile", "on" if args.compile else "off", "--precision", args.precision]
        cmd += ["--torch-threads", str(args.threads), "--device", args.device]
        cmd += ["--eval-episodes", "0", "--no-progress-bar", "--run-dir", str(run_dir)]
        subprocess.run(cmd, check=True, cwd=tmp, stdout=subprocess.DEVNULL)
        rows = [(step, t) for step, t, _ in read_progress(run_dir)["charts/SPS"]]
    start_step, start_time = next((step, t) for step, t in rows if step >= args.learning_starts + STEADY_AFTER)
    end_step, end_time = rows[-1]
    if end_step <= start_step:
        raise SystemExit(
            f"--loop-steps {args.loop_steps}: too few for two of ours' 1,000-step progress rows after the first 1,000"
        )
    return (end_step - start_step) / (end_time - start_time)


def sb3_loop_sps(args: BenchArgs) -> float:
    """Steady steps/s of one SB3 SAC run in this process (the same widths, batch and learning_starts)."""
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    class Clock(BaseCallback):
        def __init__(self, at: int):
            super().__init__()
            self.at, self.start = at, 0.0

        def _on_step(self) -> bool:
            if self.num_timesteps == self.at:
                self.start = time.perf_counter()
            return True

    at = args.learning_starts + STEADY_AFTER
    model = SAC(
        "MlpPolicy",
        gym.make(args.env),
        policy_kwargs=dict(net_arch=[args.hidden, args.hidden]),
        batch_size=args.batch_size,
        learning_starts=args.learning_starts,
        device=args.device,
        seed=1,
        verbose=0,
    )
    clock = Clock(at)
    model.learn(total_timesteps=args.learning_starts + args.loop_steps, callback=clock)
    return (args.learning_starts + args.loop_steps - at) / (time.perf_counter() - clock.start)


def leanrl_loop_sps(args: BenchArgs) -> float:
    """The steady steps/s LeanRL's compiled SAC prints at the end of one run."""
    flags = ["--env-id", args.leanrl_env, "--compile", "--no-cuda", "--batch-size", str(args.batch_size)]
    flags += ["--learning-starts", str(args.learning_starts), "--total-timesteps", str(args.learning_starts + args.loop_steps)]
    _, stderr = run_leanrl(args.leanrl, args.leanrl_python, "sac_continuous_action_torchcompile.py", flags, args.threads)
    speeds = re.findall(r"([0-9.]+) sps", stderr)
    if not speeds:
        raise SystemExit("LeanRL's SAC printed no speed: --loop-steps must be at least a few hundred")
    return float(speeds[-1])


def loop(args: BenchArgs) -> float:
    """Whole runs in alternating rounds; prints each contender's steady steps/s and ours / SB3."""
    if args.loop_steps < 2 * STEADY_AFTER:
        raise SystemExit(
            f"--loop-steps {args.loop_steps}: at least {2 * STEADY_AFTER} (the first {STEADY_AFTER} are left out)"
        )
    contenders = {"sac_nap": ours_loop_sps, "sb3": sb3_loop_sps}
    if args.leanrl is not None:
        contenders["leanrl"] = leanrl_loop_sps
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for round_index in range(args.rounds):
        for name, fn in contenders.items():
            rates[name].append(fn(args))
            print(f"[round {round_index + 1}] {name:8s} {rates[name][-1]:7.1f} steps/s", flush=True)
    median = {name: statistics.median(r) for name, r in rates.items()}
    print(
        f"{args.env}, {args.hidden}x{args.hidden}, batch {args.batch_size}, {args.learning_starts:,} random steps then "
        f"{args.loop_steps:,} with updates, torch threads {args.threads}, ours compiled={args.compile}, "
        f"torch {torch.__version__}"
    )
    titles = {"sac_nap": "sac_nap (NaP off):", "sb3": "SB3 SAC:", "leanrl": "LeanRL SAC (compiled):"}
    for name in contenders:
        print(f"  {titles[name]:24s}{median[name]:8.1f} steps/s (steady)   rounds {[round(x, 1) for x in rates[name]]}")
    ratio = median["sac_nap"] / median["sb3"]
    line = f"  ours / SB3: {ratio:.2f}x"
    if "leanrl" in median:
        lean = median["leanrl"]
        line += f"; ours / LeanRL: {median['sac_nap'] / lean:.2f}x; LeanRL / SB3: {lean / median['sb3']:.2f}x"
    print(line)
    return ratio


if __name__ == "__main__":
    bench_args = tyro.cli(BenchArgs)
    if bench_args.mode == "loop":
        loop(bench_args)
    else:
        main(bench_args)
