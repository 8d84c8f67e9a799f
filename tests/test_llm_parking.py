"""Parked training state (cleanrl_style/llm/parking.py): AdamW's moments and the frozen reference
kept in files between uses change nothing a run computes, and leave memory while parked."""

from __future__ import annotations

import pytest
import torch

from cleanrl_style.llm.parking import ParkedModule, ParkedOptimizerState, resident


def _steps(optimizer, weight, grads):
    for grad in grads:
        weight.grad = grad.clone()
        optimizer.step()


def test_parked_adamw_takes_the_same_steps_bit_for_bit(tmp_path):
    """Three AdamW steps with weight decay, the state written and read back around each, give the
    same weights and state as in memory; between steps nothing of the state stays resident."""
    torch.manual_seed(0)
    start, grads = torch.randn(5, 4), [torch.randn(5, 4) for _ in range(3)]
    runs = {}
    for parked in (False, True):
        weight = torch.nn.Parameter(start.clone())
        other = torch.nn.Parameter(torch.ones(3))  # never has a gradient: no state of its own
        optimizer = torch.optim.AdamW([weight, other], lr=1e-2, weight_decay=0.1)
        parking = ParkedOptimizerState(optimizer, tmp_path / "state.pt") if parked else None
        for grad in grads:
            _steps(optimizer, weight, [grad])
            if parking is not None:
                assert not optimizer.state and (tmp_path / "state.pt").exists()
        runs[parked] = (weight.detach().clone(), optimizer.state_dict())
    assert torch.equal(runs[True][0], runs[False][0])
    assert not torch.equal(runs[False][0], start)  # the steps moved it
    in_memory, from_file = runs[False][1]["state"], runs[True][1]["state"]
    assert in_memory.keys() == from_file.keys() == {0}
    for key in ("step", "exp_avg", "exp_avg_sq"):
        assert torch.equal(in_memory[0][key], from_file[0][key])


def test_parked_state_is_in_the_checkpoint_and_a_resume_continues_exactly(tmp_path):
    """state_dict() of a parked optimizer holds the moments (a checkpoint needs them) and leaves them
    parked; load_state_dict() into a fresh parked optimizer, then a step, matches the run that never
    stopped."""
    torch.manual_seed(1)
    start, grads = torch.randn(6), [torch.randn(6) for _ in range(3)]
    weight = torch.nn.Parameter(start.clone())
    optimizer = torch.optim.AdamW([weight], lr=1e-2)
    _steps(optimizer, weight, grads)

    weight_p = torch.nn.Parameter(start.clone())
    optimizer_p = torch.optim.AdamW([weight_p], lr=1e-2)
    ParkedOptimizerState(optimizer_p, tmp_path / "a.pt")
    _steps(optimizer_p, weight_p, grads[:2])
    checkpoint = optimizer_p.state_dict()
    assert set(checkpoint["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    assert not optimizer_p.state  # still parked after the checkpoint

    resumed_weight = torch.nn.Parameter(weight_p.detach().clone())
    resumed = torch.optim.AdamW([resumed_weight], lr=1e-2)
    ParkedOptimizerState(resumed, tmp_path / "b.pt")
    resumed.load_state_dict(checkpoint)
    assert not resumed.state and (tmp_path / "b.pt").exists()
    _steps(resumed, resumed_weight, grads[2:])
    assert torch.equal(resumed_weight.detach(), weight.detach())


def test_a_stale_parked_file_is_not_read(tmp_path):
    """A file left by an earlier process (a crash) is not this optimizer's state: the first step
    starts AdamW from zero moments, as without parking."""
    path = tmp_path / "state.pt"
    torch.save({0: {"step": torch.tensor(50.0), "exp_avg": torch.full((2,), 9.0), "exp_avg_sq": torch.full((2,), 9.0)}}, path)
    weight = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.AdamW([weight], lr=0.1, weight_decay=0.0)
    ParkedOptimizerState(optimizer, path)
    _steps(optimizer, weight, [torch.tensor([1.0, -1.0])])
    torch.testing.assert_close(weight.detach(), torch.tensor([-0.1, 0.1]))  # Adam's first step: lr * sign(g)


def test_parked_module_computes_as_the_module_and_holds_no_weights_outside(tmp_path):
    torch.manual_seed(2)
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    module[2].weight = torch.nn.Parameter(module[0].weight.T.detach().clone())  # shapes fit: a second tensor
    tied = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5, bias=False))
    tied[1].weight = tied[0].weight  # one parameter in two modules, as a tied head
    x, ids = torch.randn(3, 4), torch.tensor([0, 3, 1])
    expected, expected_tied = module(x), tied(ids)
    parked, parked_tied = ParkedModule(module, tmp_path / "m.pt"), ParkedModule(tied, tmp_path / "t.pt")
    assert all(p.numel() == 0 for p in module.parameters())
    with resident(parked) as m, resident(parked_tied) as t:
        assert torch.equal(m(x), expected)
        assert torch.equal(t(ids), expected_tied)
        assert t[1].weight is t[0].weight
    assert all(p.numel() == 0 for p in module.parameters()) and all(p.numel() == 0 for p in tied.parameters())
    with resident(module) as same:  # an unparked module passes through
        assert same is module
    parked.discard()
    assert not (tmp_path / "m.pt").exists()


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_build_policy_parks_a_full_fine_tune_and_its_updates_match(tmp_path, kl_coef):
    """Two GRPO updates (with the KL term: the reference read back from its file) give the same
    weights with ``park_dir`` as without it; between updates the moments and the reference are out of
    memory, and release_training_state removes their files."""
    from llm_tiny_model import build_tokenizer, save_tiny_model

    from cleanrl_style.llm.rollout import encode
    from cleanrl_style.llm.train import (
        PARKED_REFERENCE_FILE,
        PARKED_STATE_FILE,
        build_policy,
        policy_update,
        release_training_state,
    )

    tokenizer = build_tokenizer()
    folder = save_tiny_model(tmp_path / "tiny")
    rows = [encode(tokenizer, f"<|im_start|>user\nsend {k} to Bob<|im_end|>\n<|im_start|>assistant\nok {k}") for k in (5, 70)]
    masks = [[j >= len(r) - 3 for j in range(len(r))] for r in rows]
    advantages = [torch.full((len(r),), a) for r, a in zip(rows, (1.0, -0.5))]

    def loss_fn(logp, extras):
        loss = -logp * extras["advantages"]
        if "ref_logp" in extras:
            d = extras["ref_logp"] - logp
            loss = loss + kl_coef * (d.exp() - d - 1)
        return loss, {"clipfrac": torch.zeros_like(logp), "approx_kl": torch.zeros_like(logp)}

    weights = {}
    for park in (False, True):
        park_dir = tmp_path / "park" if park else None
        if park_dir is not None:
            park_dir.mkdir()
        setup = build_policy(str(folder), "cpu", 1e-2, with_reference=kl_coef > 0, park_dir=park_dir)
        for _ in range(2):
            policy_update(
                setup,
                rows,
                masks,
                advantages,
                loss_fn,
                kl_coef=kl_coef,
                update_epochs=1,
                micro_batch_size=4,
                max_grad_norm=1.0,
                aggregation="sequence",
                temperature=1.0,
                precision="fp32",
            )
            if park:
                assert not setup.optimizer.state and (park_dir / PARKED_STATE_FILE).exists()
                if kl_coef > 0:
                    assert all(p.numel() == 0 for p in setup.reference.module.parameters())
                    assert (park_dir / PARKED_REFERENCE_FILE).exists()
        weights[park] = {k: v.clone() for k, v in setup.policy.state_dict().items()}
        if park:
            release_training_state(setup)
            assert not any(park_dir.iterdir())
    for name, value in weights[False].items():
        assert torch.equal(weights[True][name], value), name


def test_discarding_forgets_the_state_and_can_be_repeated(tmp_path):
    """discard() drops the moments from memory and their file; a second discard (the files already
    gone, or removed by hand) is not an error, for the optimizer state and a parked module alike."""
    weight = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.AdamW([weight], lr=0.1)
    parking = ParkedOptimizerState(optimizer, tmp_path / "state.pt")
    _steps(optimizer, weight, [torch.ones(3)])
    parking.load()  # resident again, as while a step runs
    assert optimizer.state
    parking.discard()
    assert not optimizer.state and not (tmp_path / "state.pt").exists()
    parking.discard()
    module = ParkedModule(torch.nn.Linear(2, 2), tmp_path / "module.pt")
    module.discard()
    assert not (tmp_path / "module.pt").exists()
    module.discard()
