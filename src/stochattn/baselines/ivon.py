"""IVON (Shen et al. 2024) for scalar regressors, through the ``ivon-opt`` package (import name ``ivon``).

IVON learns a diagonal Gaussian ``q(theta) = N(m, 1 / (ess * (h + weight_decay)))`` while training: ``m`` is what
the model's parameters hold between steps, ``h`` is kept by the optimizer. Each training step draws weights inside
``optimizer.sampled_params(train=True)``, back-propagates there, and then calls ``optimizer.step()``; each
predictive sample is one eval-mode forward pass inside ``optimizer.sampled_params()``.

Defaults are those of ``ivon.IVON`` 0.1.3 (= Shen et al. 2024): ``hess_init=1.0, beta1=0.9, beta2=0.99999,
weight_decay=1e-4, mc_samples=1, clip_radius=inf``, and ``ess`` = the number of training rows (the package
README's usage). ``lr`` has no default: the caller picks it on validation data (the README's example uses 0.1).
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stochattn.extras import requires
from stochattn.progress import progress as show_progress
from stochattn.training import (
    FitResult,
    LossFn,
    StepFn,
    as_tensor,
    derive_seed,
    fit_regressor,
    model_device,
    predict,
    regression_output,
    resolve_device,
    seeded,
)

with requires("uci"):
    import ivon as ivon_opt

__all__ = ["fit_ivon", "ivon_samples", "ivon_step", "make_ivon"]


def make_ivon(
    model: nn.Module,
    *,
    lr: float,
    ess: float,
    hess_init: float = 1.0,
    beta1: float = 0.9,
    beta2: float = 0.99999,
    weight_decay: float = 1e-4,
    mc_samples: int = 1,
    clip_radius: float = math.inf,
    rescale_lr: bool = True,
) -> ivon_opt.IVON:
    """``ivon.IVON`` over the model's trainable parameters (one group, in ``named_parameters()`` order).
    ``rescale_lr``: the package's default multiplies ``lr`` by ``hess_init + weight_decay``; IVON-LoRA (Cong et al.
    2024) turns that off and uses ``lr`` as given.

    NOTE[DIFF]: unlike the AdamW default (rtdl's groups without decay on norms/biases/embeddings), IVON gets one
    group: its ``weight_decay`` is the precision of the Gaussian prior and also sets the posterior noise scale
    ``1/sqrt(ess (h + weight_decay))``, so it is applied to every parameter as in Shen et al. (2024).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model: has no trainable parameters for IVON")
    if not lr > 0:
        raise ValueError(f"lr: must be > 0, got {lr}")
    if not ess > 0:
        raise ValueError(f"ess: must be > 0, got {ess}")
    if isinstance(mc_samples, bool) or not isinstance(mc_samples, (int, np.integer)) or mc_samples < 1:
        raise ValueError(f"mc_samples: must be a positive int, got {mc_samples!r}")
    return ivon_opt.IVON(
        params,
        lr=lr,
        ess=ess,
        hess_init=hess_init,
        beta1=beta1,
        beta2=beta2,
        weight_decay=weight_decay,
        mc_samples=int(mc_samples),
        clip_radius=clip_radius,
        rescale_lr=bool(rescale_lr),
    )


def ivon_step(mc_samples: int = 1) -> StepFn:
    """A :class:`stochattn.training.StepFn` for IVON: ``mc_samples`` times ``sampled_params(train=True)`` around
    zero_grad/forward/backward, then ``optimizer.step()``. Returns the mean sampled-weight loss."""
    if isinstance(mc_samples, bool) or not isinstance(mc_samples, (int, np.integer)) or mc_samples < 1:
        raise ValueError(f"mc_samples: must be a positive int, got {mc_samples!r}")

    def step(model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor, loss_fn: LossFn) -> Tensor:
        if not isinstance(optimizer, ivon_opt.IVON):
            raise TypeError(f"optimizer: ivon_step needs an ivon.IVON optimizer, got {type(optimizer).__name__}")
        total = torch.zeros((), device=x.device)
        for _ in range(mc_samples):
            with optimizer.sampled_params(train=True):
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(regression_output(model(x), len(x), tuple(y.shape[1:])), y)
                loss.backward()
                # IVON reads p.grad of every parameter it holds; an unused parameter would have none.
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        if p.requires_grad and p.grad is None:
                            p.grad = torch.zeros_like(p)
            total = total + loss.detach()
        optimizer.step()
        return total / mc_samples

    return step


def fit_ivon(
    model: nn.Module,
    x_train: Tensor | np.ndarray,
    y_train: Tensor | np.ndarray,
    x_val: Tensor | np.ndarray | None,
    y_val: Tensor | np.ndarray | None,
    *,
    lr: float,
    seed: int,
    ess: float | None = None,
    hess_init: float = 1.0,
    beta1: float = 0.9,
    beta2: float = 0.99999,
    weight_decay: float = 1e-4,
    mc_samples: int = 1,
    clip_radius: float = math.inf,
    rescale_lr: bool = True,
    batch_size: int = 256,
    max_epochs: int = 500,
    patience: int | None = 16,
    loss: LossFn = F.mse_loss,
    device: str | torch.device | None = None,
    progress: bool = True,
    checkpoint: str | Path | None = None,
) -> FitResult:
    """Train ``model`` from its current (fresh) weights with IVON through :func:`stochattn.training.fit_regressor`.

    ``ess=None`` uses the number of training rows. Early stopping is on the validation RMSE of the
    posterior-mean prediction (the parameters outside ``sampled_params``): cheap, deterministic, and the same
    criterion as the other methods' backbones; the model and the optimizer (its Hessian estimate, i.e. the
    posterior variance) are both restored to the best epoch. ``result.optimizer`` is the fitted ``ivon.IVON``
    to pass to :func:`ivon_samples`.

    ``checkpoint`` (or a :func:`stochattn.training.resumable` block) makes the fit resumable: the Hessian estimate
    and step counter are saved with the weights, and IVON's weight noise comes from the saved global RNG state.

    With the default MSE loss the implied likelihood is Gaussian with variance 1/2 in the target's units
    (MSE = 2 x NLL up to a constant); standardise targets so this is on a sensible scale.
    """
    n_train = len(x_train)
    ess = float(n_train) if ess is None else float(ess)

    def make(m: nn.Module) -> torch.optim.Optimizer:
        return make_ivon(
            m, lr=lr, ess=ess, hess_init=hess_init, beta1=beta1, beta2=beta2, weight_decay=weight_decay,
            mc_samples=mc_samples, clip_radius=clip_radius, rescale_lr=rescale_lr,
        )

    return fit_regressor(
        model,
        x_train,
        y_train,
        x_val,
        y_val,
        seed=seed,
        optimizer=make,
        step_fn=ivon_step(mc_samples),
        batch_size=batch_size,
        max_epochs=max_epochs,
        patience=patience,
        loss=loss,
        device=device,
        progress=progress,
        desc="ivon",
        checkpoint=checkpoint,
    )


@contextlib.contextmanager
def _restored_on_error(params: list[nn.Parameter]) -> Iterator[None]:
    """``ivon.IVON.sampled_params`` has no ``finally``: put the mean weights back if the block raises."""
    saved = [p.detach().clone() for p in params]
    try:
        yield
    except BaseException:
        with torch.no_grad():
            for p, v in zip(params, saved):
                p.data = v
        raise


@torch.no_grad()
def ivon_samples(
    model: nn.Module,
    optimizer: ivon_opt.IVON,
    x: Tensor | np.ndarray,
    num_samples: int,
    generator: torch.Generator | int,
    *,
    batch_size: int = 1024,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> Tensor:
    """IVON predictive samples ``(num_samples, n)`` or ``(num_samples, n, H)`` (float32, CPU): one eval-mode pass per
    weight draw.

    ``generator`` is a ``torch.Generator`` (one seed is drawn from it) or an int seed; IVON draws its noise from
    torch's global RNG, so the draws run under that seed (:func:`stochattn.training.seeded`), leaving the
    caller's global RNG state unchanged. The model keeps its mean weights afterwards. ``device`` defaults to
    the model's device (IVON's buffers live there; moving the model after fitting is not supported).
    """
    if not isinstance(optimizer, ivon_opt.IVON):
        raise TypeError(f"optimizer: expected an ivon.IVON, got {type(optimizer).__name__}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples: must be a positive int, got {num_samples!r}")
    x = as_tensor(x, "x", 2)
    dev = model_device(model)
    want = None if device is None else resolve_device(device)
    if want is not None and (want.type != dev.type or (want.index is not None and want.index != dev.index)):
        raise ValueError(f"device: the model and its IVON state live on {dev}, got {device}")
    seed = derive_seed(generator)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    out = []
    with seeded(seed, dev), _restored_on_error(params):
        for _ in show_progress(range(num_samples), desc="ivon samples", disable=not progress):
            with optimizer.sampled_params():
                out.append(predict(model, x, batch_size))
    return torch.stack(out)
