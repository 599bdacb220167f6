"""MC dropout (Gal & Ghahramani 2016): keep dropout on at test time, one predictive sample per stochastic pass.

Only ``nn.Dropout``-family modules are switched on; everything else (normalisation, any other train-time
behaviour) stays in eval mode. Dropout masks are drawn independently for every element of a batch, so the ``S``
passes are folded into the batch (``x`` tiled ``S`` times) where ``batch_size`` allows: this gives the same law as
``S`` separate passes for any model that treats batch rows independently in eval mode (FT-Transformer does).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import torch
from torch import Tensor, nn

from stochattn.patch import predictive_samples
from stochattn.training import (
    as_tensor,
    derive_seed,
    eval_mode,
    model_device,
    regression_output,
    resolve_device,
    seeded,
)

__all__ = ["DROPOUT_TYPES", "dropout_enabled", "dropout_modules", "mc_dropout_samples"]

DROPOUT_TYPES: tuple[type[nn.Module], ...] = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


def dropout_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` for every dropout module of ``model`` with a positive rate."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, DROPOUT_TYPES) and m.p > 0]


@contextlib.contextmanager
def dropout_enabled(model: nn.Module) -> Iterator[nn.Module]:
    """Eval mode for every module except dropout modules with ``p > 0`` (train mode); flags restored afterwards.

    Raises:
        ValueError: if the model has no dropout module with a positive rate (MC dropout would be deterministic).
    """
    active = dropout_modules(model)
    if not active:
        raise ValueError(
            "model: has no nn.Dropout module with p > 0, so MC dropout would return identical samples"
            " (build it with a positive dropout rate)"
        )
    with eval_mode(model):
        for _, m in active:
            m.train()
        yield model


@torch.no_grad()
def mc_dropout_samples(
    model: nn.Module,
    x: Tensor | np.ndarray,
    num_samples: int,
    generator: torch.Generator | int,
    *,
    batch_size: int = 4096,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> Tensor:
    """MC-dropout predictive samples ``(num_samples, n)`` (float32, CPU) for ``x: (n, n_features)``.

    Args:
        generator: a ``torch.Generator`` (one seed is drawn from it) or an int seed. ``nn.Dropout`` draws from the
            global RNG, so the draws run under that seed via :func:`stochattn.training.seeded`; the caller's global
            RNG state is left unchanged.
        batch_size: most rows per forward pass after tiling. With ``n <= batch_size`` every pass carries
            ``batch_size // n`` copies of ``x`` (one per sample); otherwise ``x`` is cut into chunks and each
            chunk is tiled ``batch_size // chunk`` times.
        device: ``None`` runs on the model's current device.
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples: must be a positive int, got {num_samples!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    x = as_tensor(x, "x", 2)
    dev = model_device(model) if device is None else resolve_device(device)
    model.to(dev)
    seed = derive_seed(generator)
    forward = lambda xb: regression_output(model(xb.to(dev)), len(xb)).float().cpu()  # noqa: E731
    with dropout_enabled(model), seeded(seed, dev):
        return predictive_samples(forward, x, num_samples=num_samples, max_rows=batch_size, progress=progress)
