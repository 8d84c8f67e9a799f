"""The agents' compiled updates (each a whole update or minibatch step as one graph) update as the eager
ones do, from the same seed."""

from __future__ import annotations

import warnings

import pytest
import torch

import envs
from cleanrl_style.blocks.replay import ReplayBuffer
from cleanrl_style.runs.evaluate import import_agent

SMALL = {
    "sac_nap": dict(hidden_sizes=(32, 32), batch_size=32),
    "sac_simba": dict(actor_width=16, critic_width=16, critic_blocks=1, batch_size=32, gamma=0.99),
    "symphony": dict(hidden=32, critic_nodes=8, batch_size=24),
}


def build(name: str, vec_env, compile: bool = False, seed: int = 0):
    module = import_agent(f"agents/{name}.py")
    torch.manual_seed(seed)
    args = module.Args(env="Hopper", **SMALL[name])
    agent = module.make_agent(args, vec_env)
    if hasattr(agent, "reward_scale"):
        agent.reward_scale.fill_(1.0)
    return agent, module.Learner(agent, args, compile=compile), args


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_compiled_update_equals_the_eager_one(name):
    import torch._inductor.config as inductor_config

    # Inductor draws its own random numbers unless told to call torch's: same draws, same updates.
    # The config's own patch(), not monkeypatch: pytest 9.2 restores a module attribute by deleting
    # it, which removes the option from inductor's config module for the tests that follow.
    with inductor_config.patch(fallback_random=True), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compare_compiled_and_eager(name)
    fallbacks = [str(w.message) for w in caught if "torch.compile of" in str(w.message)]
    assert not fallbacks, f"the compiled update fell back to eager: {fallbacks}"  # else the test compares eager to eager


def compare_compiled_and_eager(name: str) -> None:
    vec_env = envs.make("Hopper", 1, backend="gymnasium")
    n = 512
    generator = torch.Generator().manual_seed(1)
    rb = ReplayBuffer(n, (11,), (3,))
    rb.add(
        torch.randn(n, 11, generator=generator),
        torch.rand(n, 3, generator=generator) * 2 - 1,
        torch.randn(n, generator=generator),
        torch.randn(n, 11, generator=generator),
        torch.rand(n, generator=generator) < 0.05,
        torch.zeros(n, dtype=torch.bool),
    )
    torch.manual_seed(2)
    batches = [rb.sample(SMALL[name]["batch_size"]) for _ in range(4)]
    results = []
    for compiled in (False, True):
        agent, learner, _ = build(name, vec_env, compile=compiled)
        torch.manual_seed(3)
        for i, batch in enumerate(batches):
            if i == 2 and hasattr(learner, "set_lr_fraction"):
                learner.set_lr_fraction(0.5)  # a schedule must reach the compiled graph (a tensor, no recompile)
            losses = learner.update(batch)
        results.append(([p.detach().clone() for p in agent.parameters()], {k: float(v) for k, v in losses.items()}))
    (eager_params, eager_losses), (compiled_params, compiled_losses) = results
    for a, b in zip(eager_params, compiled_params):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-3, abs=1e-5)
    assert any(not torch.equal(a, b) for a, b in zip(eager_params, build(name, vec_env)[0].parameters()))  # it learned


@pytest.mark.slow
def test_ppo_compiled_minibatch_step_equals_the_eager_one():
    """ppo_nap's Learner.whole_step (loss, gradient, clipping, Adam, projection in one graph) against
    its eager step: four minibatch steps, a learning-rate change between them, a clipped gradient."""
    import torch._inductor.config as inductor_config

    module = import_agent("agents/ppo_nap.py")
    vec_env = envs.make("Hopper", 1, backend="gymnasium")
    generator = torch.Generator().manual_seed(1)
    n = 64
    minibatches = [
        (
            torch.randn(n, 11, generator=generator),
            torch.randn(n, 3, generator=generator),
            torch.randn(n, generator=generator) - 3.0,
            torch.randn(n, generator=generator),
            torch.randn(n, generator=generator) * 5,
            torch.randn(n, generator=generator),
        )
        for _ in range(4)
    ]
    results = []
    with inductor_config.patch(fallback_random=True), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for compiled in (False, True):
            torch.manual_seed(0)
            args = module.Args(env="Hopper", hidden_sizes=(32, 32), max_grad_norm=0.1)
            agent = module.make_agent(args, vec_env)
            learner = module.Learner(agent, args, compile=compiled)
            for i, minibatch in enumerate(minibatches):
                if i == 2:
                    learner.set_lr(1e-4)
                outputs = learner.step(*minibatch)
            norms = learner.projector.layer_stats(1e-4)
            results.append(([p.detach().clone() for p in agent.parameters()], [float(o) for o in outputs], norms))
    assert not [str(w.message) for w in caught if "torch.compile of" in str(w.message)]  # no eager fallback
    (eager_params, eager_out, eager_norms), (compiled_params, compiled_out, compiled_norms) = results
    for a, b in zip(eager_params, compiled_params):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    assert compiled_out == pytest.approx(eager_out, rel=1e-3, abs=1e-5)
    assert compiled_norms == pytest.approx(eager_norms, rel=1e-4)
    torch.manual_seed(0)
    start = list(module.make_agent(args, vec_env).parameters())
    assert all(not torch.equal(a, b) for a, b in zip(eager_params, start))  # every parameter moved
