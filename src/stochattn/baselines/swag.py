"""SWAG (Maddox et al. 2019) and MultiSWAG (Wilson & Izmailov 2020) for scalar regressors.

SWAG fits ``q(theta) = N(theta_SWA, 0.5 * (Sigma_diag + D D^T / (K - 1)))`` to the iterates of constant-rate SGD:
``theta_SWA`` and ``Sigma_diag = diag(mean(theta^2) - theta_SWA^2)`` come from running first and second moments,
and the ``K`` columns of ``D`` are the last deviations ``theta_i - theta_SWA,i`` (the running mean *after* adding
``theta_i``, as in Maddox et al.'s Algorithm 1). A draw is (paper App. "Baseline Method Summaries")

    theta = theta_SWA + sqrt(scale) * ( (1/sqrt 2) Sigma_diag^(1/2) z1 + (1/sqrt(2 (K - 1))) D z2 ),
    z1 ~ N(0, I_P), z2 ~ N(0, I_K),

so ``scale`` multiplies the whole covariance. The public reference code's ``sample(scale)`` leaves out the 1/2,
so its ``scale=0.5`` (its recommended setting) is this module's ``scale=1``. The moments cover the trainable
parameters (``requires_grad``) or a given list of parameter names (e.g. LoRA adapters); they are identified by
name, so a posterior can be applied to any copy of the same architecture.

FT-Transformer uses LayerNorm only, so no batch-norm statistics need recomputing after a weight draw (the
reference code's ``bn_update``); a model with BatchNorm would need that step, which is not done here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stochattn.progress import progress as show_progress
from stochattn.training import (
    LossFn,
    as_generator,
    as_tensor,
    fit_regressor,
    model_device,
    parameter_groups,
    predict,
    resolve_device,
    standard_step,
)

__all__ = ["SWAG", "fit_swag", "multiswag_samples", "swag_samples"]


class SWAG:
    """SWAG posterior over a fixed, named set of parameters (flattened to ``P`` numbers in registration order).

    Args:
        max_rank: ``K``, the number of most recent deviation columns kept (20 in Maddox et al.'s code).
        param_names: names (as in ``model.named_parameters()``) of the parameters to cover; ``None`` takes every
            parameter with ``requires_grad=True`` at the first :meth:`collect`.
        var_clamp: lower bound on the diagonal variance (round-off can make ``E[theta^2] - E[theta]^2 < 0``).

    Attributes:
        n_collected: number of snapshots collected.
        mean, sq_mean: ``(P,)`` float64 running first and second moments.
    """

    def __init__(self, max_rank: int = 20, param_names: Sequence[str] | None = None, var_clamp: float = 1e-30):
        if isinstance(max_rank, bool) or not isinstance(max_rank, (int, np.integer)) or max_rank < 1:
            raise ValueError(f"max_rank: must be a positive int, got {max_rank!r}")
        if param_names is not None:
            param_names = list(param_names)
            if not param_names or not all(isinstance(n, str) for n in param_names):
                raise ValueError("param_names: must be a non-empty sequence of parameter names")
            if len(set(param_names)) != len(param_names):
                raise ValueError("param_names: contains duplicates")
        if not var_clamp >= 0:
            raise ValueError(f"var_clamp: must be >= 0, got {var_clamp}")
        self.max_rank = int(max_rank)
        self.param_names: list[str] | None = param_names
        self.var_clamp = float(var_clamp)
        self.n_collected = 0
        self.mean: Tensor | None = None
        self.sq_mean: Tensor | None = None
        self._shapes: list[torch.Size] | None = None
        self._dev: Tensor | None = None  # (K, P) ring buffer of deviations
        self._dev_next = 0  # slot the next deviation goes to
        self._dev_count = 0

    # -- parameter access -------------------------------------------------------------------------------------

    def params_of(self, model: nn.Module) -> list[nn.Parameter]:
        """The covered parameters of ``model``, in this posterior's flattening order (checks names and shapes)."""
        named = dict(model.named_parameters())
        if self.param_names is None:
            names = [n for n, p in model.named_parameters() if p.requires_grad]
            if not names:
                raise ValueError("model: has no parameter with requires_grad=True for SWAG to cover")
            self.param_names = names
        missing = [n for n in self.param_names if n not in named]
        if missing:
            raise ValueError(f"model: lacks the SWAG parameters {missing[:5]} (different architecture?)")
        params = [named[n] for n in self.param_names]
        shapes = [p.shape for p in params]
        if self._shapes is not None and shapes != self._shapes:
            raise ValueError("model: parameter shapes differ from those this SWAG posterior was collected on")
        return params

    @property
    def num_params(self) -> int:
        """``P``, the number of covered scalars (0 before the first collect)."""
        return 0 if self.mean is None else self.mean.numel()

    @property
    def rank(self) -> int:
        """Current number of deviation columns, ``min(n_collected, max_rank)``."""
        return self._dev_count

    @property
    def deviations(self) -> Tensor:
        """``D^T``: ``(rank, P)``, oldest first."""
        if self._dev is None:
            return torch.empty(0, 0)
        if self._dev_count < self.max_rank:
            return self._dev[: self._dev_count].clone()
        return torch.roll(self._dev, -self._dev_next, dims=0)

    def variance(self) -> Tensor:
        """``diag(Sigma_diag)``: ``(P,)`` float64, ``max(sq_mean - mean^2, var_clamp)``."""
        self._require(1)
        return torch.clamp(self.sq_mean - self.mean**2, min=self.var_clamp)

    def _require(self, n: int) -> None:
        if self.n_collected < n:
            raise RuntimeError(f"SWAG: needs at least {n} collected snapshot(s), has {self.n_collected}")

    # -- fitting ----------------------------------------------------------------------------------------------

    @torch.no_grad()
    def collect(self, model: nn.Module) -> None:
        """Add the model's current parameters ``theta`` as one SWAG snapshot (moments and a deviation column)."""
        params = self.params_of(model)
        theta = torch.cat([p.detach().reshape(-1) for p in params])
        theta64 = theta.double()
        if self.mean is None:
            self._shapes = [p.shape for p in params]
            self.mean = torch.zeros_like(theta64)
            self.sq_mean = torch.zeros_like(theta64)
            self._dev = torch.zeros(self.max_rank, theta.numel(), dtype=theta.dtype, device=theta.device)
        elif self.mean.device != theta.device:  # moments loaded on the CPU (a resumed phase), the model elsewhere
            self.mean, self.sq_mean, self._dev = (t.to(theta.device) for t in (self.mean, self.sq_mean, self._dev))
        n = self.n_collected
        self.mean.mul_(n / (n + 1)).add_(theta64 / (n + 1))
        self.sq_mean.mul_(n / (n + 1)).add_(theta64**2 / (n + 1))
        self._dev[self._dev_next] = (theta64 - self.mean).to(self._dev.dtype)
        self._dev_next = (self._dev_next + 1) % self.max_rank
        self._dev_count = min(self._dev_count + 1, self.max_rank)
        self.n_collected = n + 1

    # -- sampling ---------------------------------------------------------------------------------------------

    def sample_vector(
        self, generator: torch.Generator | int | None = None, scale: float = 1.0, diag_only: bool = False
    ) -> Tensor:
        """One flat draw ``theta: (P,)`` (float64, on the posterior's device) from the SWAG Gaussian.

        ``diag_only`` leaves out the low-rank term (covariance ``0.5 * scale * Sigma_diag``). The low-rank term
        uses the current number of columns ``K = rank`` (needs ``rank >= 2``).
        """
        if not scale >= 0:
            raise ValueError(f"scale: must be >= 0, got {scale}")
        self._require(1)
        gen = None if generator is None else as_generator(generator)
        gdev = gen.device if gen is not None else torch.device("cpu")
        P = self.num_params
        z1 = torch.randn(P, generator=gen, device=gdev, dtype=torch.float64).to(self.mean.device)
        eps = self.variance().sqrt() * z1 / math.sqrt(2.0)
        if not diag_only:
            k = self.rank
            if k < 2:
                raise RuntimeError(
                    f"SWAG: the low-rank term needs at least 2 deviation columns, has {k}; collect more"
                    " snapshots or pass diag_only=True"
                )
            # NOTE[DIFF]: K is the current number of columns; the reference code divides by max_rank - 1 even
            # before max_rank snapshots exist. The two agree once n_collected >= max_rank (the usual case).
            z2 = torch.randn(k, generator=gen, device=gdev, dtype=torch.float64).to(self.mean.device)
            eps = eps + (self.deviations.double().T @ z2) / math.sqrt(2.0 * (k - 1))
        return self.mean + math.sqrt(scale) * eps

    @torch.no_grad()
    def _write(self, model: nn.Module, flat: Tensor) -> None:
        offset = 0
        for p in self.params_of(model):
            k = p.numel()
            p.copy_(flat[offset : offset + k].view(p.shape).to(device=p.device, dtype=p.dtype))
            offset += k

    def sample(
        self,
        model: nn.Module,
        generator: torch.Generator | int | None = None,
        scale: float = 1.0,
        diag_only: bool = False,
    ) -> None:
        """Overwrite the covered parameters of ``model`` with one draw (see :meth:`sample_vector`)."""
        self._write(model, self.sample_vector(generator, scale=scale, diag_only=diag_only))

    def load_mean(self, model: nn.Module) -> None:
        """Overwrite the covered parameters of ``model`` with the SWA mean ``theta_SWA``."""
        self._require(1)
        self._write(model, self.mean)

    # -- persistence ------------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Everything needed to rebuild the posterior (for ``torch.save``)."""
        return {
            "max_rank": self.max_rank,
            "param_names": self.param_names,
            "var_clamp": self.var_clamp,
            "n_collected": self.n_collected,
            "mean": self.mean,
            "sq_mean": self.sq_mean,
            "shapes": None if self._shapes is None else [tuple(s) for s in self._shapes],
            "deviations": None if self._dev is None else self.deviations,
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "SWAG":  # noqa: UP037 - keeps the code hash
        """Inverse of :meth:`state_dict`."""
        swag = cls(state["max_rank"], state["param_names"], state["var_clamp"])
        swag.load_state_dict(state)
        return swag

    def load_state_dict(self, state: dict) -> None:
        """Make this posterior the one of :meth:`state_dict` (in place); collecting continues from there exactly."""
        self.max_rank, self.param_names = int(state["max_rank"]), state["param_names"]
        self.var_clamp = float(state["var_clamp"])
        self.n_collected = int(state["n_collected"])
        self.mean, self.sq_mean = state["mean"], state["sq_mean"]
        self._shapes = None if state["shapes"] is None else [torch.Size(s) for s in state["shapes"]]
        dev = state["deviations"]
        self._dev, self._dev_count, self._dev_next = None, 0, 0
        if dev is not None:  # oldest first: the ring buffer restarts at slot 0 with the same columns in order
            self._dev = torch.zeros(self.max_rank, dev.shape[1], dtype=dev.dtype, device=dev.device)
            self._dev[: len(dev)] = dev
            self._dev_count = len(dev)
            self._dev_next = len(dev) % self.max_rank


def fit_swag(
    model: nn.Module,
    x_train: Tensor | np.ndarray,
    y_train: Tensor | np.ndarray,
    *,
    lr: float,
    epochs: int,
    seed: int,
    max_rank: int = 20,
    collect_every: int = 1,
    collect_per_epoch: int = 1,
    optimizer: str = "sgd",
    anneal_epochs: int = 0,
    start_lr: float | None = None,
    momentum: float = 0.9,
    weight_decay: float = 1e-5,
    batch_size: int = 256,
    param_names: Sequence[str] | None = None,
    x_val: Tensor | np.ndarray | None = None,
    y_val: Tensor | np.ndarray | None = None,
    loss: LossFn = F.mse_loss,
    device: str | torch.device | None = None,
    progress: bool = True,
    checkpoint: str | Path | None = None,
) -> SWAG:
    """Run the SWAG phase from the model's current (pre-trained) weights and return the fitted posterior.

    Two published recipes, through :func:`stochattn.training.fit_regressor`:

    * ``optimizer="sgd"`` (Maddox et al. 2019): SGD with momentum ``momentum`` (0.9) at the constant learning rate
      ``lr``;
    * ``optimizer="adamw"`` (SWAG-LoRA, Onal et al. 2024): the adapter's own optimiser, AdamW, continued from the
      trained adapter; with ``anneal_epochs`` > 0 its rate is annealed linearly from ``start_lr`` (the adapter's
      training rate; default ``lr``) to the SWAG rate ``lr`` over ``anneal_epochs`` epochs
      (``torch.optim.swa_utils.SWALR``) before any snapshot is taken.

    Then ``epochs`` collection epochs; in every ``collect_every``-th of them, ``collect_per_epoch`` snapshots
    (:meth:`SWAG.collect`) evenly spaced over its steps, the last at its end: ``epochs // collect_every *
    collect_per_epoch`` snapshots in all (several per epoch where epochs are few, as on LoRA adapters with little
    data). ``lr`` has no default: pick it on validation data (the CRPS of the resulting samples).
    ``weight_decay`` defaults to the AdamW pre-training value of :func:`fit_regressor` (rtdl's parameter groups:
    none on norms/biases/embeddings). ``param_names`` restricts both the updates and the posterior to those
    parameters (e.g. LoRA). ``x_val, y_val`` only fill the training history (no early stopping: the trajectory
    must be a fixed-rate chain). The model is trained in place and holds the last iterate on return; use
    :meth:`SWAG.load_mean` for the SWA solution. The returned posterior's ``trajectory`` records the optimiser,
    the learning rate of every epoch and the step of every snapshot. ``checkpoint`` (or a
    :func:`stochattn.training.resumable` block) makes the phase resumable: the moments, deviations, trajectory and
    clock are saved with the weights and optimizer, and a rerun ends with the same posterior, bit for bit on the CPU.
    """
    for name, value, low in (("epochs", epochs, 1), ("collect_every", collect_every, 1),
                             ("collect_per_epoch", collect_per_epoch, 1),
                             ("anneal_epochs", anneal_epochs, 0)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name}: must be an int >= {low}, got {value!r}")
    steps_per_epoch = math.ceil(len(x_train) / batch_size)
    if epochs // collect_every * min(collect_per_epoch, steps_per_epoch) < 2:
        raise ValueError(
            f"epochs: {epochs} epochs with collect_every={collect_every}, collect_per_epoch={collect_per_epoch} "
            f"and {steps_per_epoch} steps per epoch ({len(x_train)} rows, batch_size {batch_size}) give fewer than "
            "2 SWAG snapshots"
        )
    if optimizer not in ("sgd", "adamw"):
        raise ValueError(f"optimizer: 'sgd' (Maddox et al.) or 'adamw' (SWAG-LoRA), got {optimizer!r}")
    start_lr = lr if start_lr is None else start_lr
    if not lr > 0 or not start_lr > 0:
        raise ValueError(f"lr, start_lr: must be > 0, got {lr}, {start_lr}")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum: must be in [0, 1), got {momentum}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay: must be >= 0, got {weight_decay}")
    if param_names is None:
        param_names = [n for n, p in model.named_parameters() if p.requires_grad]
    swag = SWAG(max_rank=max_rank, param_names=param_names)
    trajectory: dict = {"optimizer": optimizer, "lr_per_epoch": [], "snapshot_steps": []}
    clock = {"epoch": 1, "step": 0, "scheduler": None}
    settings = {"epochs": epochs, "anneal_epochs": anneal_epochs, "collect_every": collect_every,
                "collect_per_epoch": collect_per_epoch, "max_rank": max_rank,
                "param_names": list(param_names)}  # fmt: skip

    def make_optimizer(m: nn.Module) -> torch.optim.Optimizer:
        groups = parameter_groups(m, weight_decay, param_names)
        if optimizer == "sgd":
            opt = torch.optim.SGD(groups, lr=start_lr, momentum=momentum)
        else:
            opt = torch.optim.AdamW(groups, lr=start_lr, weight_decay=weight_decay)
        if anneal_epochs > 0:
            from torch.optim.swa_utils import SWALR

            clock["scheduler"] = SWALR(opt, swa_lr=lr, anneal_epochs=anneal_epochs, anneal_strategy="linear")
        return opt

    def step(m, opt, xb, yb, loss_fn):
        if clock["step"] == 0:
            trajectory["lr_per_epoch"].append(float(opt.param_groups[0]["lr"]))
        out = standard_step(m, opt, xb, yb, loss_fn)
        clock["step"] += 1
        e, i = clock["epoch"] - anneal_epochs, clock["step"]  # collection epoch (1-based), step in the epoch
        if e >= 1 and e % collect_every == 0 and (i * collect_per_epoch) // steps_per_epoch > (
            (i - 1) * collect_per_epoch
        ) // steps_per_epoch:
            swag.collect(m)
            trajectory["snapshot_steps"].append((clock["epoch"], i))
        return out

    def end_epoch(epoch: int, m: nn.Module) -> None:
        clock["epoch"], clock["step"] = epoch + 1, 0
        if clock["scheduler"] is not None:
            clock["scheduler"].step()

    fit_regressor(
        model,
        x_train,
        y_train,
        x_val,
        y_val,
        seed=seed,
        optimizer=make_optimizer,
        batch_size=batch_size,
        max_epochs=anneal_epochs + epochs,
        patience=None,
        loss=loss,
        step_fn=step,
        on_epoch_end=end_epoch,
        device=device,
        progress=progress,
        desc="swag",
        restore_best=False,
        checkpoint=checkpoint,
        hook_state=_PhaseState(swag, trajectory, clock, settings),
    )
    swag.trajectory = trajectory
    return swag


class _PhaseState:
    """What :func:`fit_swag`'s hooks keep (:class:`stochattn.training.HookState`, saved in the phase's checkpoints):
    the posterior, the trajectory and the clock (epoch, step in it, the annealing scheduler); ``settings`` (the
    collection schedule) is part of the checkpoint's fingerprint."""

    def __init__(self, swag: SWAG, trajectory: dict, clock: dict, settings: dict):
        self.swag, self.trajectory, self.clock, self.settings = swag, trajectory, clock, settings

    def state_dict(self) -> dict[str, Any]:
        scheduler = self.clock["scheduler"]
        return {"swag": self.swag.state_dict(), "trajectory": self.trajectory, "epoch": self.clock["epoch"],
                "step": self.clock["step"],
                "scheduler": None if scheduler is None else scheduler.state_dict()}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.swag.load_state_dict(state["swag"])
        self.trajectory.update(state["trajectory"])
        self.clock["epoch"], self.clock["step"] = state["epoch"], state["step"]
        if self.clock["scheduler"] is not None:
            self.clock["scheduler"].load_state_dict(state["scheduler"])


@torch.no_grad()
def swag_samples(
    model: nn.Module,
    swag: SWAG,
    x: Tensor | np.ndarray,
    num_samples: int,
    generator: torch.Generator | int,
    *,
    scale: float = 1.0,
    diag_only: bool = False,
    batch_size: int = 1024,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> Tensor:
    """SWAG predictive samples ``(num_samples, n)`` or ``(num_samples, n, H)`` (float32, CPU): one weight draw, one
    eval-mode pass each.

    The covered parameters of ``model`` are restored to their values before the call afterwards (also on error).
    ``generator`` is a ``torch.Generator`` or an int seed.
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 0:
        raise ValueError(f"num_samples: must be a non-negative int, got {num_samples!r}")
    x = as_tensor(x, "x", 2)
    gen = as_generator(generator)
    dev = model_device(model) if device is None else resolve_device(device)
    model.to(dev)
    params = swag.params_of(model)
    saved = [p.detach().clone() for p in params]
    out = []
    try:
        for _ in show_progress(range(num_samples), desc="swag samples", disable=not progress):
            swag.sample(model, gen, scale=scale, diag_only=diag_only)
            out.append(predict(model, x, batch_size))
    finally:
        for p, v in zip(params, saved):
            p.copy_(v)
    return torch.stack(out) if out else torch.empty(0, len(x))


def component_counts(num_samples: int, components: int) -> list[int]:
    """How MultiSWAG splits ``num_samples`` draws over ``components`` posteriors: component ``l`` (0-based) gets
    ``S // L + (1 if l < S % L else 0)``, so every component contributes when ``S >= L``."""
    return [num_samples // components + (1 if c < num_samples % components else 0) for c in range(components)]


def multiswag_samples(
    members: Sequence[tuple[nn.Module, SWAG]],
    x: Tensor | np.ndarray,
    num_samples: int,
    generator: torch.Generator | int,
    *,
    scale: float = 1.0,
    diag_only: bool = False,
    batch_size: int = 1024,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> Tensor:
    """MultiSWAG predictive samples ``(num_samples, n)``: samples pooled from ``L`` independent SWAG posteriors.

    ``members`` is a sequence of ``(model, swag)`` pairs (each model trained from its own initialisation and its
    own SWAG phase). The sample budget is split as evenly as possible (:func:`component_counts`): every
    component contributes when ``S >= L``, the first ``S`` components one draw each when ``S < L``. Rows are
    ordered component by component (component 0 first); that order carries no meaning for the pooled predictive
    distribution (an equal-weight mixture).
    """
    members = list(members)
    if not members:
        raise ValueError("members: need at least one (model, swag) pair")
    for i, m in enumerate(members):
        if not (isinstance(m, (tuple, list)) and len(m) == 2 and isinstance(m[1], SWAG)):
            raise TypeError(f"members[{i}]: expected a (model, SWAG) pair")
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples: must be a positive int, got {num_samples!r}")
    gen = as_generator(generator)
    counts = component_counts(num_samples, len(members))
    parts = [
        swag_samples(
            model, swag, x, c, gen, scale=scale, diag_only=diag_only, batch_size=batch_size, device=device,
            progress=progress,
        )
        for (model, swag), c in zip(members, counts)
        if c > 0
    ]
    return torch.cat(parts, dim=0)
