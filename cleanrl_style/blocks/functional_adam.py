"""Adam as plain tensor arithmetic on a ``torch.optim.Adam``'s own state, for a compiled whole update.

``torch.compile`` cannot put ``optimizer.step()`` into the same graph as a loss and its gradient
without a break; :func:`adam_step_` is the same step written as tensor ops, so one graph can hold
the losses, their gradients (``torch.func.grad``), every optimizer step and the target update.

It reads and writes the optimizer's state tensors (``step``, ``exp_avg``, ``exp_avg_sq``), created
as ``torch.optim.Adam`` creates them, so checkpoints, ``state_dict`` and a switch between the eager
``optimizer.step()`` and this function see one optimizer. The arithmetic is Adam's (Kingma and Ba,
2014, arXiv:1412.6980) as torch implements it, bias corrections included; the test checks it
against ``torch.optim.Adam`` step by step.
"""

from __future__ import annotations

import torch


def adam_state(optimizer: torch.optim.Optimizer, param: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(step, exp_avg, exp_avg_sq)`` of ``param`` in ``optimizer``, created as Adam creates them if absent.

    Only plain Adam over one parameter tensor is supported: no weight decay, AMSGrad or maximize.
    """
    if not isinstance(optimizer, torch.optim.Adam) or isinstance(optimizer, torch.optim.AdamW):
        raise TypeError(f"adam_state needs a torch.optim.Adam, got {type(optimizer).__name__}")
    if len(optimizer.param_groups) != 1 or len(optimizer.param_groups[0]["params"]) != 1:
        raise ValueError("adam_state: the optimizer must hold exactly one parameter tensor (see FlatParameters)")
    group = optimizer.param_groups[0]
    if group["params"][0] is not param:
        raise ValueError("adam_state: param is not the tensor this optimizer updates")
    unsupported = [k for k in ("amsgrad", "maximize") if group[k]] + (["weight_decay"] if group["weight_decay"] else [])
    if unsupported:
        raise ValueError(f"adam_state: {', '.join(unsupported)} not supported; use optimizer.step() (eager) instead")
    state = optimizer.state[param]
    if not state:
        on_device = group["fused"] or group["capturable"]
        state["step"] = torch.zeros((), dtype=torch.float32, device=param.device if on_device else "cpu")
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    return state["step"], state["exp_avg"], state["exp_avg_sq"]


def adam_hyperparameters(optimizer: torch.optim.Optimizer) -> tuple[float, float, float]:
    """``(beta1, beta2, eps)`` of the optimizer's one parameter group."""
    group = optimizer.param_groups[0]
    beta1, beta2 = group["betas"]
    return float(beta1), float(beta2), float(group["eps"])


@torch.no_grad()
def adam_step_(
    param: torch.Tensor,
    grad: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    lr: torch.Tensor | float,
    betas_eps: tuple[float, float, float],
) -> None:
    """One Adam step of ``param`` in place; ``state`` from :func:`adam_state` is advanced in place.

    ``lr`` may be a 0-d tensor, so that a learning-rate schedule does not recompile a compiled caller.
    """
    step, exp_avg, exp_avg_sq = state
    beta1, beta2, eps = betas_eps
    step.add_(1)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    bias1 = 1 - beta1**step
    bias2 = 1 - beta2**step
    denom = exp_avg_sq.sqrt() / bias2.sqrt() + eps
    param.sub_((lr / bias1) * exp_avg / denom)
