"""Multi-turn text environments for LLM tool use (see docs/text_envs.md).

    from envs.text import ToolUseEnv, ExpertPolicy, rollout
    env = ToolUseEnv(split="train", seed=0)
    trajectory = rollout(env, ExpertPolicy(), seed=1)   # trajectory.messages, trajectory.reward

Also registered with Gymnasium: ``gym.make("text/ToolUse-v0")`` and
``gym.make("text/PythonReasoning-v0")``.
"""

import gymnasium as gym

from envs.text.checker import TurnChecker, TurnResult
from envs.text.env import SYSTEM_PROMPT, ToolUseEnv
from envs.text.parsing import CallParseError, ToolCall, format_calls, parse_tool_calls
from envs.text.policies import ExpertPolicy, NoisyPolicy, Trajectory, load_jsonl, rollout, save_jsonl
from envs.text.sandbox import PythonSandbox, SandboxLimits, SandboxResult
from envs.text.schema import function_schema
from envs.text.suites import SUITES, ToolSuite, World
from envs.text.tasks import VARIANTS, Task, TaskSet, Turn, generate_task, split_of
from envs.text.tir_env import Problem, ProblemSet, PythonReasoningEnv, PythonReasoningExpert
from envs.text.vector import TextVectorEnv, make_tool_use_vector_env

for _env_id, _entry_point in (
    ("text/ToolUse-v0", "envs.text.env:ToolUseEnv"),
    ("text/PythonReasoning-v0", "envs.text.tir_env:PythonReasoningEnv"),
):
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=_entry_point, disable_env_checker=True)  # the checker expects arrays

__all__ = [
    "SUITES",
    "SYSTEM_PROMPT",
    "VARIANTS",
    "CallParseError",
    "ExpertPolicy",
    "NoisyPolicy",
    "Problem",
    "ProblemSet",
    "PythonReasoningEnv",
    "PythonReasoningExpert",
    "PythonSandbox",
    "SandboxLimits",
    "SandboxResult",
    "Task",
    "TaskSet",
    "TextVectorEnv",
    "ToolCall",
    "ToolSuite",
    "ToolUseEnv",
    "Trajectory",
    "Turn",
    "TurnChecker",
    "TurnResult",
    "World",
    "format_calls",
    "function_schema",
    "generate_task",
    "load_jsonl",
    "make_tool_use_vector_env",
    "parse_tool_calls",
    "rollout",
    "save_jsonl",
    "split_of",
]
