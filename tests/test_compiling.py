"""compile_or_eager: a failed torch.compile falls back to the eager function, once, with a warning."""

import pytest
import torch

import cleanrl_style.blocks.compiling as compiling
from cleanrl_style import compile_or_eager


def _loss(x):
    return (x * x).sum()


def test_disabled_returns_the_function_itself():
    assert compile_or_eager(_loss, enabled=False) is _loss


def test_a_failing_compile_warns_with_the_reason_and_runs_eagerly(monkeypatch):
    calls = []

    def broken_compile(fn, **kwargs):
        def compiled(*args):
            calls.append("compiled")
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")

        return compiled

    monkeypatch.setattr(compiling.torch, "compile", broken_compile)
    loss = compile_or_eager(_loss, enabled=True)
    x = torch.tensor([1.0, 2.0])
    with pytest.warns(RuntimeWarning, match=r"_loss failed \(RuntimeError: InvalidCxxCompiler.*--compile off"):
        assert loss(x).item() == 5.0
    assert loss(x).item() == 5.0  # eager from now on: the compiled function is not tried again
    assert calls == ["compiled"]


def test_an_error_of_the_function_itself_still_raises():
    def bad(x):
        return x @ torch.ones(3)  # shape mismatch for a (2,) input

    loss = compile_or_eager(bad, enabled=True)
    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="inconsistent tensor size"):
        loss(torch.ones(2))


def test_a_compile_refused_up_front_also_falls_back(monkeypatch):
    def refusing_compile(fn, **kwargs):
        raise RuntimeError("torch.compile is not supported on this Python")

    monkeypatch.setattr(compiling.torch, "compile", refusing_compile)
    loss = compile_or_eager(_loss, enabled=True)  # nothing is compiled before the first call
    with pytest.warns(RuntimeWarning, match="not supported on this Python"):
        assert loss(torch.tensor([3.0])).item() == 9.0


def test_a_failing_compile_of_an_in_place_step_restores_the_mutated_tensors(monkeypatch):
    def half_done_compile(fn, **kwargs):
        def compiled(x):
            x.add_(100.0)  # a compiled step that changed its state, then failed
            raise RuntimeError("inductor: lowering failed")

        return compiled

    def step(x):
        x.mul_(2.0)

    monkeypatch.setattr(compiling.torch, "compile", half_done_compile)
    state = torch.tensor([1.0, 3.0])
    apply = compile_or_eager(step, enabled=True, mutated=lambda: [state])
    with pytest.warns(RuntimeWarning, match="lowering failed"):
        apply(state)
    assert state.tolist() == [2.0, 6.0]  # the eager step ran once, on the restored state
    apply(state)
    assert state.tolist() == [4.0, 12.0]
