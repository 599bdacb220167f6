"""Contextual Dropout (Fan et al., ICLR 2021), Gaussian variant, as a generic add-on for ``nn.Linear`` sites.

Method. Every dropout *site* gets a small network on the site's (detached) input that outputs sample-dependent
dropout rates; a multiplicative mask ``z`` is drawn from ``q(z | x)`` at every forward pass, in training *and* at
test time (the mask noise is the method's predictive uncertainty), and the whole model is trained by an ELBO:
data negative log-likelihood plus ``KL(q(z | x) || p(z))``.

Choices made here (the benchmark's paper only names the method and its ELBO):

* Mask family: the **Gaussian** variant of Fan et al., ``z = 1 + sqrt(alpha(x)) * eps`` with ``eps ~ N(0, 1)``
  (reparameterised), ``alpha = p / (1 - p)`` the variance of Gaussian dropout that matches Bernoulli dropout with
  rate ``p`` (Srivastava et al. 2014). Since ``alpha = p / (1 - p)``, the network's "dropout-rate logits" are
  exactly ``log alpha`` and ``p = sigmoid(log alpha)``.
* Dropout network (Fan et al.'s fully-connected design): ``Linear(d, d // gamma) -> LeakyReLU ->
  Linear(d // gamma, d)`` on ``x.detach()``, reduction ``gamma = 8`` by default. Inputs ``(..., d)`` with any
  leading dims: for a token sequence ``(B, L, d)`` the rates are computed per (sample, token) from that token's
  own features (NOTE[DIFF] Fan et al. describe per-sample rates for fully-connected layers; no pooling over
  tokens here, so a site works on any ``(..., d)`` input), and every element gets its own mask value.
* Rate bound: ``log alpha = M - softplus(M - logits)`` with ``M = logit(max_rate)`` (``max_rate = 0.9``, i.e.
  noise std <= 3): a smooth upper bound, ``~ logits`` well below it, so gradients never vanish at a hard clip.
* Init: default ``nn.Linear`` init, the last layer's weight scaled by 0.1 and its bias set so that every rate
  starts at ``init_rate = 0.1`` (up to the small input-dependent part): the masked model starts close to the
  deterministic one and the rates are contextual from the first step.
* Prior: fixed per unit, ``p(z) = N(1, alpha0)``, ``alpha0 = p0 / (1 - p0)``, ``p0 = prior_rate = 0.1``.
  For a fixed activation ``x`` the masked value is ``N(x, alpha x^2)`` under ``q`` and ``N(x, alpha0 x^2)``
  under the prior, so the KL per unit is independent of ``x``::

      KL = 0.5 * (alpha / alpha0 - 1 - log(alpha / alpha0))      (0 iff alpha == alpha0)

* KL reduction: summed over units (and tokens), averaged over the batch rows: ``last_kl`` of a module is the
  mini-batch estimate of the per-data-point KL. :func:`kl_divergence` sums it over all sites.
* Objective (:func:`contextual_dropout_step`): ``loss_fn(pred, y) + kl_weight * KL / n_train``, with mean squared
  error standing in for the Gaussian NLL (equal up to the factor ``1 / (2 sigma^2)`` and a constant).
  The ``1 / n_train`` scaling treats the KL as a dataset-level complexity term, as weight-space variational
  methods do; ``kl_weight`` tempers it. (The masks are local latents, so the untempered per-data-point ELBO with
  noise variance ``sigma^2`` corresponds to ``kl_weight = 2 * sigma^2 * n_train``.)
* Test time: masks are sampled in eval mode too (``ContextualDropout.sample_in_eval = True``); :func:`mean_masks`
  switches eval-mode passes to the mean mask ``z = 1`` (the deterministic network), which
  :func:`fit_contextual_dropout` uses for early-stopping validation.

Installation (:func:`add_contextual_dropout`): for each named ``nn.Linear`` the dropout module is registered as
its child ``contextual_dropout`` and a forward pre-hook multiplies the Linear's *input* by the mask. The Linear
keeps its class, its ``forward`` and its parameter names (``...fc.weight`` stays), and the dropout parameters
appear in ``model.named_parameters()`` / ``state_dict()`` as ``...fc.contextual_dropout.net.*``. This works the
same for a Linear inside a peft LoRA layer (its ``base_layer``, an adapter) and for the LoRA layer itself.
A site whose ``forward`` is bypassed (e.g. ``nn.MultiheadAttention.out_proj``, used through its weights only)
gets no mask; :func:`kl_divergence` (hence the training step) reports it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stochattn.patch import predictive_samples
from stochattn.training import (
    FitResult,
    LossFn,
    StepFn,
    attribute_set,
    eval_mode,
    fit_regressor,
    model_device,
    seeded,
)

__all__ = [
    "ContextualDropout",
    "add_contextual_dropout",
    "contextual_dropout_generator",
    "contextual_dropout_modules",
    "contextual_dropout_samples",
    "contextual_dropout_step",
    "elbo_kl_weight",
    "fit_contextual_dropout",
    "gaussian_mask_kl",
    "kl_divergence",
    "mean_masks",
]

SITE_CHILD = "contextual_dropout"
"""Name under which the dropout module is registered as a child of its ``nn.Linear`` site."""


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _check_rate(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0.0 < value < 1.0:
        raise ValueError(f"{name}: must be a dropout rate in (0, 1), got {value!r}")
    return float(value)


def gaussian_mask_kl(log_alpha: Tensor, log_alpha0: float) -> Tensor:
    """Per-unit ``KL(N(1, alpha) || N(1, alpha0))`` for multiplicative Gaussian masks, elementwise.

    ``0.5 * (r - 1 - log r)`` with ``r = alpha / alpha0``, computed from ``log r`` (finite for any ``log_alpha``
    short of overflow in ``exp``). Same shape as ``log_alpha``.
    """
    log_r = log_alpha - log_alpha0
    return 0.5 * (torch.exp(log_r) - 1.0 - log_r)


class ContextualDropout(nn.Module):
    """Sample-dependent multiplicative Gaussian dropout on features of size ``d`` (see the module docstring).

    ``forward(x (..., d)) -> x * z (..., d)``, ``z = 1 + sqrt(alpha(x)) * eps``, a fresh mask at every call in
    training mode and, while ``sample_in_eval`` is True (the default), in eval mode too; otherwise ``z = 1``.
    Every call stores ``last_kl``: the KL to the prior summed over units (and any token dims), averaged over the
    rows of dim 0 (a scalar tensor, with autograd graph to the dropout network). ``generator`` (on ``x``'s
    device), when set, drives the mask noise; ``None`` draws from torch's global RNG.
    """

    def __init__(
        self,
        d: int,
        *,
        gamma: int = 8,
        init_rate: float = 0.1,
        prior_rate: float = 0.1,
        max_rate: float = 0.9,
    ) -> None:
        for name, value in (("d", d), ("gamma", gamma)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")
        init_rate = _check_rate("init_rate", init_rate)
        prior_rate = _check_rate("prior_rate", prior_rate)
        max_rate = _check_rate("max_rate", max_rate)
        if not init_rate < max_rate:
            raise ValueError(f"init_rate: must be below max_rate={max_rate}, got {init_rate}")
        super().__init__()
        d, gamma = int(d), int(gamma)
        hidden = max(1, d // gamma)
        self.d = d
        self.gamma = gamma
        self.prior_rate = prior_rate
        self.max_rate = max_rate
        # NOTE[DIFF] fixed, input-independent prior N(1, alpha0) per unit (closed-form KL, no prior network),
        # rather than a learnt (contextual) prior over the masks.
        self.log_alpha0 = _logit(prior_rate)
        self.log_alpha_max = _logit(max_rate)
        self.net = nn.Sequential(nn.Linear(d, hidden), nn.LeakyReLU(), nn.Linear(hidden, d))
        self.generator: torch.Generator | None = None
        self.sample_in_eval = True
        self.last_kl: Tensor | None = None
        self.reset_parameters(init_rate)

    @torch.no_grad()
    def reset_parameters(self, init_rate: float = 0.1) -> None:
        """Default ``nn.Linear`` init (global RNG), last weight x 0.1, last bias giving rate ``init_rate``."""
        init_rate = _check_rate("init_rate", init_rate)
        target = _logit(init_rate)
        if not target < self.log_alpha_max:
            raise ValueError(f"init_rate: must be below max_rate={self.max_rate}, got {init_rate}")
        first, last = self.net[0], self.net[2]
        first.reset_parameters()
        last.reset_parameters()
        last.weight.mul_(0.1)
        # invert log_alpha = M - softplus(M - b):  b = M - log(expm1(M - target))
        m = self.log_alpha_max
        last.bias.fill_(m - math.log(math.expm1(m - target)))

    def extra_repr(self) -> str:
        return (
            f"d={self.d}, gamma={self.gamma}, prior_rate={self.prior_rate}, max_rate={self.max_rate}, "
            f"sample_in_eval={self.sample_in_eval}"
        )

    def __getstate__(self) -> dict[str, Any]:
        # last_kl is a non-leaf tensor after a forward with autograd, which deepcopy/pickle refuse; drop it.
        state = dict(super().__getstate__())
        state["last_kl"] = None
        return state

    def _check_input(self, x: Tensor) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"x: expected a Tensor, got {type(x).__name__}")
        if x.ndim < 1 or x.shape[-1] != self.d:
            raise ValueError(f"x: expected shape (..., {self.d}), got {tuple(x.shape)}")

    def log_alpha(self, x: Tensor) -> Tensor:
        """``log alpha(x)`` (..., d), from ``x.detach()`` (..., d); ``alpha`` = mask variance = ``p / (1 - p)``."""
        self._check_input(x)
        ref = self.net[0].weight
        logits = self.net(x.detach().to(ref.dtype))
        # NOTE[DIFF] smooth upper bound on the rate (max_rate); the paper's Bernoulli rates need none.
        return self.log_alpha_max - F.softplus(self.log_alpha_max - logits)

    def rate(self, x: Tensor) -> Tensor:
        """Dropout rates ``p(x) = sigmoid(log alpha(x))`` (..., d) in ``(0, max_rate)``."""
        return torch.sigmoid(self.log_alpha(x))

    def kl(self, log_alpha: Tensor) -> Tensor:
        """Scalar KL to the prior: per-unit closed form summed over all but dim 0, averaged over dim 0."""
        per_unit = gaussian_mask_kl(log_alpha.float(), self.log_alpha0)
        if per_unit.ndim == 1:
            return per_unit.sum()
        return per_unit.reshape(per_unit.shape[0], -1).sum(dim=1).mean()

    def forward(self, x: Tensor) -> Tensor:
        """x (..., d) -> x * z (..., d); sets ``last_kl``."""
        log_alpha = self.log_alpha(x)
        self.last_kl = self.kl(log_alpha)
        if not (self.training or self.sample_in_eval):
            return x
        gen = self.generator
        if gen is not None and gen.device.type != x.device.type:
            raise ValueError(
                f"generator is on device {gen.device} but x is on {x.device}; create it on the model's device"
            )
        # NOTE[DIFF] Gaussian multiplicative mask with the reparameterisation trick instead of Fan et al.'s
        # Bernoulli masks trained with the ARM estimator: pathwise gradients, no second (antithetic) forward
        # pass per step, and a low-variance, stable objective on the benchmark's CPU budgets.
        eps = torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)
        z = 1.0 + torch.exp(0.5 * log_alpha).to(x.dtype) * eps
        return x * z


def _site_linear(module: nn.Module) -> nn.Linear | None:
    """The ``nn.Linear`` a site module is or wraps (peft tuner layers: ``get_base_layer()``), else ``None``."""
    if isinstance(module, nn.Linear):
        return module
    get_base_layer = getattr(module, "get_base_layer", None)
    if callable(get_base_layer):
        base = get_base_layer()
        if isinstance(base, nn.Linear):
            return base
    return None


def _pre_hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Forward pre-hook of a site: multiply its input (first positional argument or ``input=``) by the mask."""
    dropout = getattr(module, SITE_CHILD)
    if args:
        return (dropout(args[0]), *args[1:]), kwargs
    if "input" in kwargs:
        return args, {**kwargs, "input": dropout(kwargs["input"])}
    return None


def add_contextual_dropout(
    model: nn.Module,
    site_names: Iterable[str],
    *,
    gamma: int = 8,
    init_rate: float = 0.1,
    prior_rate: float = 0.1,
    max_rate: float = 0.9,
    seed: int | None = None,
) -> dict[str, ContextualDropout]:
    """Install contextual dropout (in place) on the input of every named ``nn.Linear`` of ``model``.

    Each site ``name`` (a qualified module name, as in ``model.named_modules()``) gets a
    :class:`ContextualDropout` of size ``in_features``, registered as ``name + ".contextual_dropout"`` and applied
    by a forward pre-hook. A site is an ``nn.Linear`` or a peft LoRA layer around one (then the mask multiplies
    the input of the adapted layer: base and adapter paths alike); for a LoRA model install contextual dropout
    after ``stochattn.lora.add_lora``, which freezes every parameter that is not an adapter's.

    ``seed`` makes the dropout networks' init reproducible (the caller's global RNG state is left unchanged);
    ``None`` draws it from the global RNG. The new modules take the site's device, dtype and train/eval flag, and
    are trainable (``requires_grad``). Returns ``{site name: module}`` in the given order.

    Raises:
        ValueError: no names, a duplicate name, a name that is not a module of ``model``, or a site that
            already has contextual dropout.
        TypeError: a site that is neither an ``nn.Linear`` nor a peft layer around one.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    names = [site_names] if isinstance(site_names, str) else list(site_names)
    if not names:
        raise ValueError("site_names: give at least one nn.Linear name")
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"site_names: expected module names (str), got {names!r}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"site_names: duplicate names {dupes}")
    modules = dict(model.named_modules())
    sites: list[tuple[nn.Module, nn.Linear]] = []  # (hooked module, the Linear giving d / device / dtype)
    for name in names:
        if name not in modules:
            linears = [n for n, m in modules.items() if _site_linear(m) is not None]
            raise ValueError(f"site_names: {name!r} is not a module of the model; its nn.Linear modules: {linears}")
        site = modules[name]
        linear = _site_linear(site)
        if linear is None:
            raise TypeError(
                f"site_names: {name!r} is a {type(site).__name__}, not an nn.Linear (or a peft layer around one)"
            )
        if SITE_CHILD in dict(site.named_children()):
            raise ValueError(f"site_names: {name!r} already has a child {SITE_CHILD!r} (contextual dropout installed?)")
        sites.append((site, linear))

    installed: dict[str, ContextualDropout] = {}
    fork = seeded(int(seed)) if seed is not None else contextlib.nullcontext()
    with fork:
        for name, (site, linear) in zip(names, sites, strict=True):
            with torch.device("cpu"):
                dropout = ContextualDropout(
                    linear.in_features, gamma=gamma, init_rate=init_rate, prior_rate=prior_rate, max_rate=max_rate
                )
            w = linear.weight
            dropout.to(device=w.device, dtype=w.dtype if w.is_floating_point() else None)
            dropout.train(site.training)
            site.add_module(SITE_CHILD, dropout)
            site.register_forward_pre_hook(_pre_hook, with_kwargs=True)
            installed[name] = dropout
    return installed


def contextual_dropout_modules(model: nn.Module) -> list[ContextualDropout]:
    """Every :class:`ContextualDropout` of ``model``, in ``model.modules()`` order."""
    return [m for m in model.modules() if isinstance(m, ContextualDropout)]


def _modules_or_raise(model: nn.Module) -> list[ContextualDropout]:
    modules = contextual_dropout_modules(model)
    if not modules:
        raise ValueError("model: has no ContextualDropout module (install them with add_contextual_dropout)")
    return modules


@contextlib.contextmanager
def contextual_dropout_generator(model: nn.Module, generator: torch.Generator | None) -> Iterator[nn.Module]:
    """Context in which every :class:`ContextualDropout` of ``model`` draws its masks from ``generator``."""
    with attribute_set(contextual_dropout_modules(model), "generator", generator):
        yield model


@contextlib.contextmanager
def mean_masks(model: nn.Module) -> Iterator[nn.Module]:
    """Context in which eval-mode passes use the mean mask ``z = 1`` (``sample_in_eval = False``).

    Training-mode passes still sample. The modules' previous flags are restored afterwards.
    """
    with attribute_set(contextual_dropout_modules(model), "sample_in_eval", False):
        yield model


def kl_divergence(model: nn.Module) -> Tensor:
    """Sum of ``last_kl`` over every :class:`ContextualDropout` of ``model`` (scalar, per data point).

    Call it after a forward pass. A site called several times in one forward counts its last call only.

    Raises:
        ValueError: no module, or a module that has not run (its site's ``forward`` was bypassed or not called).
    """
    total: Tensor | None = None
    for name, m in model.named_modules():
        if not isinstance(m, ContextualDropout):
            continue
        if m.last_kl is None:
            raise ValueError(
                f"kl_divergence: ContextualDropout {name!r} has no KL: its site did not run in the forward pass"
                " (a Linear used only through its weights, e.g. nn.MultiheadAttention.out_proj, is no valid site)"
            )
        total = m.last_kl if total is None else total + m.last_kl.to(total.device)
    if total is None:
        raise ValueError("model: has no ContextualDropout module (install them with add_contextual_dropout)")
    return total


def _prediction(out: Tensor, y: Tensor) -> Tensor:
    """Model output matched to the targets: ``(B,)`` (a trailing singleton dim dropped) or ``(B, H)``."""
    if y.ndim == 1 and out.ndim == 2 and out.shape[1] == 1:
        out = out[:, 0]
    if out.shape != y.shape:
        raise ValueError(f"model: output of shape {tuple(out.shape)} does not match targets {tuple(y.shape)}")
    return out


def contextual_dropout_step(n_train: int, kl_weight: float = 1.0) -> StepFn:
    """A :class:`stochattn.training.StepFn` minimising ``loss_fn(pred, y) + kl_weight * KL / n_train``.

    ``KL`` is :func:`kl_divergence` after the step's forward pass (one mask sample per row). Returns that total
    (detached). Only parameters the optimizer holds are updated (freeze the backbone with ``requires_grad``).
    """
    if isinstance(n_train, bool) or not isinstance(n_train, (int, np.integer)) or n_train < 1:
        raise ValueError(f"n_train: must be a positive integer, got {n_train!r}")
    if isinstance(kl_weight, bool) or not isinstance(kl_weight, (int, float)) or not kl_weight >= 0:
        raise ValueError(f"kl_weight: must be a number >= 0, got {kl_weight!r}")
    scale = float(kl_weight) / int(n_train)

    def step(model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor, loss_fn: LossFn) -> Tensor:
        modules = _modules_or_raise(model)
        for m in modules:
            m.last_kl = None  # so that a site bypassed in this pass is detected, not a stale KL reused
        optimizer.zero_grad(set_to_none=True)
        data_loss = loss_fn(_prediction(model(x), y), y)
        loss = data_loss + scale * kl_divergence(model).to(data_loss.device)
        loss.backward()
        optimizer.step()
        for m in modules:
            m.last_kl = None  # release the graph
        return loss.detach()

    return step


def elbo_kl_weight(noise_variance: float, n_train: int, n_outputs: int = 1) -> float:
    """The ``kl_weight`` at which :func:`contextual_dropout_step`'s objective is the untempered ELBO: with a
    Gaussian likelihood of variance ``noise_variance`` (sigma^2, in the target's units) on each of ``n_outputs``
    outputs, the negative ELBO per data point is ``n_outputs * MSE / (2 sigma^2) + KL`` (masks are local latents),
    i.e. ``(n_outputs / (2 sigma^2)) * (MSE + kl_weight * KL / n_train)`` with ``kl_weight = 2 sigma^2 n_train /
    n_outputs``."""
    if not noise_variance > 0 or n_train < 1 or n_outputs < 1:
        raise ValueError(f"need noise_variance > 0, n_train >= 1, n_outputs >= 1; got {noise_variance}, {n_train}, "
                         f"{n_outputs}")  # fmt: skip
    return 2.0 * float(noise_variance) * int(n_train) / int(n_outputs)


def fit_contextual_dropout(
    model: nn.Module,
    x_train: Tensor | np.ndarray,
    y_train: Tensor | np.ndarray,
    x_val: Tensor | np.ndarray | None = None,
    y_val: Tensor | np.ndarray | None = None,
    *,
    seed: int,
    lr: float = 1e-3,
    kl_weight: float = 1.0,
    **fit_kwargs: Any,
) -> FitResult:
    """Train a model with contextual dropout installed by :func:`stochattn.training.fit_regressor`.

    AdamW (``fit_regressor``'s default ``"adamw"``, over the parameters with ``requires_grad``) on the objective
    of :func:`contextual_dropout_step` with ``n_train = len(x_train)``. During the fit eval-mode passes use the
    mean mask (:func:`mean_masks`), so the early-stopping validation RMSE is deterministic (the usual choice for
    dropout networks); ``sample_in_eval`` is restored afterwards. Masks come from the global RNG under ``seed``
    unless a module has its own ``generator``. ``fit_kwargs`` go to ``fit_regressor`` (``max_epochs``,
    ``batch_size``, ``patience``, ``weight_decay``, ``progress``, ...), except ``step_fn``.
    """
    _modules_or_raise(model)
    if "step_fn" in fit_kwargs:
        raise ValueError("fit_kwargs: step_fn is set by fit_contextual_dropout; use fit_regressor for another one")
    step = contextual_dropout_step(len(x_train), kl_weight)
    with mean_masks(model):
        return fit_regressor(model, x_train, y_train, x_val, y_val, seed=seed, lr=lr, step_fn=step, **fit_kwargs)


@torch.no_grad()
def contextual_dropout_samples(
    model: nn.Module,
    x: Tensor | np.ndarray,
    num_samples: int,
    *,
    generator: torch.Generator | int | None = None,
    batch_size: int = 8192,
    progress: bool = False,
) -> Tensor:
    """``num_samples`` stochastic eval-mode passes: x (n, ...) -> (S, n, *out) for outputs (n, *out).

    Scalar models give ``(S, n)`` (or ``(S, n, 1)`` if they output ``(n, 1)``), multi-output models ``(S, n, H)``.
    Masks are sampled whatever ``sample_in_eval`` says. The passes are folded into the batch
    (:func:`stochattn.patch.predictive_samples`, at most ``batch_size`` rows per call). ``generator``: a
    ``torch.Generator`` on the model's device or an int seed; ``None`` uses the global RNG. The modules' flags
    are restored afterwards; the result is on the model's device.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    modules = _modules_or_raise(model)
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples: must be a positive integer, got {num_samples!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size: must be a positive integer, got {batch_size!r}")
    if not isinstance(x, Tensor):
        x = torch.as_tensor(np.asarray(x, dtype=np.float32))
    if x.ndim < 1 or x.shape[0] < 1:
        raise ValueError(f"x: expected at least one row on dim 0, got shape {tuple(x.shape)}")
    device = model_device(model)
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        generator = torch.Generator(device=device).manual_seed(int(generator))
    elif generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator, an int seed or None, got {type(generator).__name__}")
    if generator is not None and generator.device.type != device.type:
        raise ValueError(f"generator: is on {generator.device} but the model is on {device}")

    flags = [m.sample_in_eval for m in modules]
    try:
        for m in modules:
            m.sample_in_eval = True
        with eval_mode(model), contextual_dropout_generator(model, generator):
            return predictive_samples(
                model, x.to(device), num_samples=int(num_samples), max_rows=int(batch_size), progress=progress
            )
    finally:
        for m, flag in zip(modules, flags, strict=True):
            m.sample_in_eval = flag
            m.last_kl = None
