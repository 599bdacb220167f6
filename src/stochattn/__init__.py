"""stochattn: Stochastic Attention (SA) for calibrated predictive ensembles from frozen transformers.

Modules (one concept each):
    attention   exact Multinomial(nu, pi)/nu attention weights and a drop-in for scaled_dot_product_attention
    patch       enable SA on any model (global, per-layer or per-head nu), predictive sampling
    sdpa        SA for attention computed by F.scaled_dot_product_attention, timm and Hugging Face transformers
    calibrate   target scale, EvalStats and the BO-under-uncertainty calibration of nu (paper App. A); in one call:
                ``stochattn.calibrate_sampler(model, x_cal, y_cal)``
    metrics     PIT, W1, coverage/width, CRPS, Energy Score, accuracy and latitude-weighted scores
    scaling     temperature and conformal post-hoc scaling of ensembles
    extras      the optional dependencies: ``pip install "stochattn[extra]"`` (README "Install")

``stochattn.calibrate`` stays the module of the low-level pieces; the one-call entry point has its own name,
``calibrate_sampler``, imported on first use so that ``import stochattn`` does not import torch.
"""

__version__ = "0.1.0"  # the one source of the version: pyproject.toml reads it (setuptools dynamic); CHANGELOG.md

_LAZY = {"calibrate_sampler": "calibrate", "CalibratedSampler": "calibrate"}


def __getattr__(name: str):
    """``stochattn.calibrate_sampler`` / ``CalibratedSampler``, imported from their module on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
