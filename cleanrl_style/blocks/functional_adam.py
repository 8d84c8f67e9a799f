"""Adam and AdamW as plain tensor arithmetic on the optimizer's own state, for a compiled whole update.

``torch.compile`` cannot put ``optimizer.step()`` into the same graph as a loss and its gradient
without a break; :func:`adam_step_` is the same step written as tensor ops, so one graph can hold
the losses, their gradients (``torch.func.grad``), every optimizer step and the target update.

It reads and writes the optimizer's state tensors (``step``, ``exp_avg``, ``exp_avg_sq``), created
as ``torch.optim.Adam`` creates them, so checkpoints, ``state_dict`` and a switch between the eager
``optimizer.step()`` and this function see one optimizer. The arithmetic is Adam's (Kingma and Ba,
2014, arXiv:1412.6980) as torch implements it, bias corrections included, with AdamW's decoupled
weight decay (Loshchilov and Hutter, 2017, arXiv:1711.05101); the tests check both against torch's
optimizers step by step.
"""

from __future__ import annotations

import torch


def adam_state(optimizer: torch.optim.Optimizer, param: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(step, exp_avg, exp_avg_sq)`` of ``param`` in ``optimizer``, created as Adam creates them if absent.

    Adam without weight decay, or AdamW (decoupled weight decay), over one parameter tensor; no
    AMSGrad or maximize.
    """
    if not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        raise TypeError(f"adam_state needs a torch.optim.Adam or AdamW, got {type(optimizer).__name__}")
    if len(optimizer.param_groups) != 1 or len(optimizer.param_groups[0]["params"]) != 1:
        raise ValueError("adam_state: the optimizer must hold exactly one parameter tensor (see FlatParameters)")
    group = optimizer.param_groups[0]
    if group["params"][0] is not param:
        raise ValueError("adam_state: param is not the tensor this optimizer updates")
    coupled_decay = group["weight_decay"] and not _decoupled(optimizer)
    unsupported = [k for k in ("amsgrad", "maximize") if group[k]] + (["Adam's weight_decay"] if coupled_decay else [])
    if unsupported:
        raise ValueError(f"adam_state: {', '.join(unsupported)} not supported; use optimizer.step() (eager) instead")
    state = optimizer.state[param]
    if not state:
        on_device = group["fused"] or group["capturable"]
        state["step"] = torch.zeros((), dtype=torch.float32, device=param.device if on_device else "cpu")
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    return state["step"], state["exp_avg"], state["exp_avg_sq"]


def _decoupled(optimizer: torch.optim.Optimizer) -> bool:
    """AdamW's weight decay (torch's AdamW, or Adam with ``decoupled_weight_decay=True``)."""
    return isinstance(optimizer, torch.optim.AdamW) or bool(optimizer.param_groups[0].get("decoupled_weight_decay", False))


def adam_hyperparameters(optimizer: torch.optim.Optimizer) -> tuple[float, float, float, float]:
    """``(beta1, beta2, eps, decoupled weight decay)`` of the optimizer's one parameter group (the
    decay is AdamW's, 0 for Adam)."""
    group = optimizer.param_groups[0]
    beta1, beta2 = group["betas"]
    decay = group["weight_decay"] if _decoupled(optimizer) else 0.0
    return float(beta1), float(beta2), float(group["eps"]), float(decay)


@torch.no_grad()
def adam_step_(
    param: torch.Tensor,
    grad: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    lr: torch.Tensor | float,
    hyperparameters: tuple[float, float, float, float],
) -> None:
    """One Adam (or AdamW) step of ``param`` in place; ``state`` from :func:`adam_state` advances in place.

    ``hyperparameters`` from :func:`adam_hyperparameters`. ``lr`` may be a 0-d tensor, so that a
    learning-rate schedule does not recompile a compiled caller.
    """
    step, exp_avg, exp_avg_sq = state
    beta1, beta2, eps, weight_decay = hyperparameters
    step.add_(1)
    if weight_decay:
        param.mul_(1 - lr * weight_decay)  # AdamW: decoupled decay, before the moments are applied
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    bias1 = 1 - beta1**step
    bias2 = 1 - beta2**step
    denom = exp_avg_sq.sqrt() / bias2.sqrt() + eps
    param.sub_((lr / bias1) * exp_avg / denom)


def adam_tensors(steps: dict[str, tuple[torch.Tensor, torch.optim.Optimizer]]) -> tuple[dict, dict]:
    """For a compiled whole update, from ``{name: (parameter tensor, its optimizer)}``:

    - ``{name: parameter, name + "_adam": its (step, exp_avg, exp_avg_sq)}``, the tensors the update
      reads and changes in place (:func:`adam_state`);
    - ``{name: (beta1, beta2, eps, decoupled weight decay)}``, its constants (:func:`adam_hyperparameters`).
    """
    tensors: dict = {}
    for name, (param, optimizer) in steps.items():
        tensors[name] = param
        tensors[f"{name}_adam"] = adam_state(optimizer, param)
    return tensors, {name: adam_hyperparameters(optimizer) for name, (_, optimizer) in steps.items()}


def every_tensor(state: dict) -> list[torch.Tensor]:
    """The tensors of a whole update's state (values, or tuples of them): ``compile_or_eager``'s ``mutated``."""
    return [t for value in state.values() for t in (value if isinstance(value, tuple) else (value,))]
