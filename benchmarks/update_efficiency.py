"""How close each off-policy agent's gradient update comes to the matrix-product speed of the device it runs on.

    python benchmarks/update_efficiency.py                                # defaults, fp32, eager and compiled
    python benchmarks/update_efficiency.py --precision bf16
    python benchmarks/update_efficiency.py --agents sac_simba --set sac_simba.critic_width=64 sac_simba.actor_width=64

For each agent (``sac_nap``, ``sac_simba``, ``symphony`` at their defaults unless ``--set`` changes
them), on Hopper-v5's shapes, fed batches from the same random transitions, in one process:

- **FLOPs per update**, counted by ``torch.utils.flop_counter.FlopCounterMode`` over one eager
  update (forward, backward and optimizer arithmetic of the matrix products it sees);
- **seconds per update**, eager and compiled (``--compile``: the agents' ``--compile on``, the whole
  update as one graph for sac_nap and sac_simba, the losses and the gradient step for symphony), in
  alternating rounds (the machine's speed drifts), the median round reported; **achieved GFLOP/s** = FLOPs / seconds;
- **the ceiling**: every matrix product one update runs (recorded with their shapes, dtypes and
  transposes), replayed back to back on fresh tensors, nothing else; ceiling GFLOP/s = their FLOPs
  / their time, measured in the same rounds;
- **achieved / ceiling**: the share of the update's time that is matrix products at the speed the
  same products reach alone;
- the peak of a 256x256x256 product in float32 and bfloat16: the hardware's rate for each precision
  (a CPU without AVX-512 BF16 or AMX emulates bfloat16, far below its float32 rate).

Also prints the hours 100k environment steps of updates take at that rate (updates per env step x
100k x seconds per update).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import tyro
from torch.utils.flop_counter import FlopCounterMode

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from timing import alternating_rounds, matmul_peak, record_matmuls, replay_matmuls  # noqa: E402  (benchmarks/timing.py)

import envs  # noqa: E402
from cleanrl_style.blocks.replay import ReplayBuffer  # noqa: E402
from cleanrl_style.runs.evaluate import import_agent  # noqa: E402
from cleanrl_style.runs.provenance import cpu_has_native_bf16, cpu_model  # noqa: E402


@dataclass
class BenchArgs:
    agents: tuple[str, ...] = ("sac_nap", "sac_simba", "symphony")
    """agent files to measure"""
    set: tuple[str, ...] = ()
    """Args overrides, AGENT.FIELD=VALUE (e.g. sac_simba.critic_width=64)"""
    env: str = "Hopper"
    """whose observation and action shapes to use"""
    precision: Literal["fp32", "bf16"] = "fp32"
    """fp32, or bf16 autocast (the agents' --precision)"""
    compile: bool = True
    """also time the compiled update (torch.compile, as the agents' --compile on)"""
    rounds: int = 5
    """alternating rounds; the median is reported"""
    seconds_per_round: float = 2.0
    """time each contender gets per round (at least 3 calls)"""
    threads: int = 1
    """torch threads (0: torch's default)"""
    device: str = "cpu"
    data: int = field(default=20_000)
    """random transitions in the replay buffer"""


def parse_overrides(specs: tuple[str, ...]) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for spec in specs:
        target, sep, value = spec.partition("=")
        agent, dot, key = target.partition(".")
        if not sep or not dot:
            raise SystemExit(f"--set {spec!r}: expected AGENT.FIELD=VALUE, e.g. sac_simba.critic_width=64")
        parsed: object = value
        for cast in (int, float):
            try:
                parsed = cast(value)
                break
            except ValueError:
                pass
        if value.lower() in ("true", "false"):
            parsed = value.lower() == "true"
        out.setdefault(agent, {})[key.replace("-", "_")] = parsed
    return out


def build(name: str, overrides: dict, args: BenchArgs, vec_env, compile: bool = False) -> tuple:
    module = import_agent(str(REPO / "agents" / f"{name}.py"))
    agent_args = module.Args(env=args.env, device=args.device, precision=args.precision, **overrides)
    if getattr(agent_args, "gamma", 0.0) is None:  # sac_simba's discount rule
        agent_args.gamma = module.horizon_discount(envs.time_limit(args.env))
    agent = module.make_agent(agent_args, vec_env)
    if hasattr(agent, "reward_scale"):  # Symphony fixes it after its warm-up
        agent.reward_scale.fill_(1.0)

    def autocast():
        return torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16, enabled=args.precision == "bf16")

    learner = module.Learner(agent, agent_args, autocast, compile=compile)
    return module, agent, agent_args, learner


def describe(agent_args) -> str:
    keys = ("hidden_sizes", "actor_width", "actor_blocks", "critic_width", "critic_blocks", "hidden", "critic_nodes")
    parts = [f"{k}={getattr(agent_args, k)}" for k in keys if hasattr(agent_args, k)]
    return ", ".join(parts + [f"batch={agent_args.batch_size}", f"UTD={agent_args.updates_per_step:g}"])


def main(args: BenchArgs) -> None:
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    overrides = parse_overrides(args.set)
    vec_env = envs.make(args.env, 1, backend="gymnasium", device=args.device)
    obs_dim, act_dim = vec_env.single_observation_space.shape[0], vec_env.single_action_space.shape[0]
    n = args.data
    data = (
        torch.randn(n, obs_dim),
        torch.rand(n, act_dim) * 2 - 1,
        torch.randn(n),
        torch.randn(n, obs_dim),
        torch.rand(n) < 0.01,
        torch.zeros(n, dtype=torch.bool),
    )
    contenders: dict[str, callable] = {}
    info: dict[str, dict] = {}
    for name in args.agents:
        module, agent, agent_args, learner = build(name, overrides.get(name, {}), args, vec_env)
        rb = ReplayBuffer(n, (obs_dim,), (act_dim,), device=args.device)
        rb.add(*(x.to(args.device) for x in data))
        batch_size = agent_args.batch_size
        eager = lambda learner=learner, rb=rb, bs=batch_size: learner.update(rb.sample(bs))  # noqa: E731
        eager()  # warm-up (lazy state, allocator)
        with FlopCounterMode(display=False) as counter:
            eager()
        products = record_matmuls(eager)
        matmul_flops = FlopCounterMode(display=False)
        ceiling = replay_matmuls(products, args.device)
        with matmul_flops:
            ceiling()
        info[name] = dict(
            flops=counter.get_total_flops(),
            matmul_flops=matmul_flops.get_total_flops(),
            matmuls=len(products),
            utd=agent_args.updates_per_step,
            config=describe(agent_args),
        )
        contenders[f"{name} eager"] = eager
        contenders[f"{name} ceiling"] = ceiling
        if args.compile:  # the same agent and data, compiled (the agents' --compile on)
            compiled = build(name, overrides.get(name, {}), args, vec_env, compile=True)[3]
            for _ in range(3):  # compile, then let any recompilation settle
                compiled.update(rb.sample(batch_size))
            contenders[f"{name} compiled"] = lambda compiled=compiled, rb=rb, bs=batch_size: compiled.update(rb.sample(bs))

    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    seconds = alternating_rounds(contenders, args.rounds, args.seconds_per_round, sync)

    peaks = {dtype: matmul_peak(dtype, args.device) for dtype in (torch.float32, torch.bfloat16)}
    cpu = cpu_model()
    print(
        f"{args.env} shapes (obs {obs_dim}, act {act_dim}), {args.device} ({cpu}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), {args.precision}, median of {args.rounds} alternating rounds"
    )
    print(
        f"peak of a 256x256x256 matrix product: float32 {peaks[torch.float32]:.1f} GFLOP/s, "
        f"bfloat16 {peaks[torch.bfloat16]:.1f} GFLOP/s (native bf16 arithmetic: {cpu_has_native_bf16()})"
    )
    for name in args.agents:
        i = info[name]
        ceiling_s = statistics.median(seconds[f"{name} ceiling"])
        ceiling_gflops = i["matmul_flops"] / ceiling_s / 1e9
        print(f"\n{name} ({i['config']}): {i['flops'] / 1e9:.3f} GFLOP per update ({i['matmuls']} matrix products)")
        print(f"  ceiling: its matrix products alone  {ceiling_s * 1e3:8.2f} ms   {ceiling_gflops:6.1f} GFLOP/s")
        for mode in ("eager", "compiled"):
            key = f"{name} {mode}"
            if key not in seconds:
                continue
            s = statistics.median(seconds[key])
            achieved = i["flops"] / s / 1e9
            hours = s * i["utd"] * 100_000 / 3600
            print(
                f"  {mode:8s} update                      {s * 1e3:8.2f} ms   {achieved:6.1f} GFLOP/s   "
                f"{achieved / ceiling_gflops:5.0%} of ceiling   100k env steps of updates: {hours:5.2f} h"
            )


if __name__ == "__main__":
    main(tyro.cli(BenchArgs))
