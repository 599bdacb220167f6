"""TimesFM 2.5 (Google's ``timesfm`` 3.0.2, torch) for the ETT experiment: builders, checkpoint, SA adapter.

* :func:`build_timesfm` builds a *reduced* module of the same class family (:class:`TimesFM2p5Module`, a subclass of
  ``timesfm``'s ``TimesFM_2p5_200M_torch_module`` with a smaller config made by ``dataclasses.replace``) that can be
  trained from scratch offline; :func:`build_timesfm_200m` builds the full 200M architecture (random weights, no
  download) for the public checkpoint.
* :func:`load_timesfm_checkpoint` loads a safetensors file in the public layout of
  ``google/timesfm-2.5-200m-pytorch`` strictly; :func:`fetch_timesfm_checkpoint` downloads it (Hugging Face Hub)
  and records / verifies its SHA-256.
* Importing this module registers a stochastic-attention adapter for ``timesfm.torch.transformer.MultiHeadAttention``
  with :func:`stochattn.patch.register_attention`, so :class:`stochattn.patch.StochasticAttention` works on these
  modules; :func:`point_forecast` and :func:`sa_forecast_samples` give point forecasts and SA predictive samples.

Importing ``timesfm`` needs no network (only loading a checkpoint downloads), so ``HF_HUB_OFFLINE`` is left alone:
setting it here would freeze ``huggingface_hub``'s offline flag for the whole process and stop
:func:`fetch_timesfm_checkpoint` from ever downloading.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any, Optional, Union

import torch
from torch import Tensor, nn

from stochattn.attention import Method
from stochattn.backbones.checkpoints import CheckpointMismatchError, state_dict_mismatch
from stochattn.extras import requires
from stochattn.io import atomic_path, sha256_file
from stochattn.patch import NuSpec, SAState, StochasticAttention, predictive_samples, register_attention
from stochattn.progress import progress as show_progress
from stochattn.training import seeded

with requires("timesfm"):
    from huggingface_hub import hf_hub_download
    from safetensors.torch import load_file

    # Imported from the submodules directly: ``timesfm/__init__`` swallows an ImportError of its torch part.
    from timesfm.timesfm_2p5 import timesfm_2p5_base
    from timesfm.timesfm_2p5.timesfm_2p5_torch import TimesFM_2p5_200M_torch_module
    from timesfm.torch import normalization as tfm_normalization
    from timesfm.torch import transformer as tfm_transformer
    from timesfm.torch import util as tfm_util

__all__ = [
    "TIMESFM_REPO_ID",
    "TIMESFM_FILENAME",
    "REDUCED_DEFAULTS",
    "CheckpointMismatchError",
    "CheckpointUnavailableError",
    "TimesFM2p5Module",
    "timesfm_config",
    "build_timesfm",
    "build_timesfm_200m",
    "load_timesfm_checkpoint",
    "module_of",
    "fetch_timesfm_checkpoint",
    "point_forecast",
    "sa_forecast_samples",
    "patch_outputs",
    "forecast",
    "TimesFMForecaster",
    "pretraining_loss",
    "pretrain_timesfm",
    "PretrainResult",
    "LORA_TARGETS",
]

#: LoRA targets of the paper (L1177): the fused QKV projection, the attention output and both FFN linears.
LORA_TARGETS = ("qkv_proj", "out", "ff0", "ff1")

TIMESFM_REPO_ID = "google/timesfm-2.5-200m-pytorch"
TIMESFM_FILENAME = "model.safetensors"  # TimesFM_2p5_200M_torch.WEIGHTS_FILENAME

#: The offline stand-in of shared/notes/facts.md: 4 layers, d 256, 4 heads (3.1 M parameters).
REDUCED_DEFAULTS = {"num_layers": 4, "model_dims": 256, "num_heads": 4}

Definition = timesfm_2p5_base.TimesFM_2p5_200M_Definition


# --------------------------------------------------------------------------------------------------------------
# builders
# --------------------------------------------------------------------------------------------------------------
def timesfm_config(
    num_layers: int,
    model_dims: int,
    num_heads: int,
    *,
    hidden_dims: Optional[int] = None,
    output_quantile_len: Optional[int] = None,
) -> Definition:
    """A TimesFM 2.5 definition with the given sizes; everything else (patch 32 -> 128, quantiles, RoPE, QK norm,
    fused QKV, swish) as in ``TimesFM_2p5_200M_Definition``.

    ``hidden_dims`` (feed-forward width) defaults to ``model_dims`` as in the 200M model; ``output_quantile_len``
    (length of the continuous-quantile head's output, 1024 in the 200M model) defaults to 1024.
    ``timesfm_config(20, 1280, 16)`` equals the 200M definition.
    """
    for name, value in (("num_layers", num_layers), ("model_dims", model_dims), ("num_heads", num_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if model_dims % num_heads or (model_dims // num_heads) % 2:
        raise ValueError(f"model_dims ({model_dims}) / num_heads ({num_heads}) must be an even integer (for RoPE)")
    base = Definition()
    hidden = model_dims if hidden_dims is None else hidden_dims
    quantile_len = base.output_quantile_len if output_quantile_len is None else output_quantile_len
    n_out = len(base.quantiles) + 1  # mean + 9 quantiles = 10 channels
    stacked = dataclasses.replace(
        base.stacked_transformers,
        num_layers=num_layers,
        transformer=dataclasses.replace(
            base.stacked_transformers.transformer, model_dims=model_dims, hidden_dims=hidden, num_heads=num_heads
        ),
    )
    # Sizes that disagree fail only at a reshape inside decode(): the tokenizer keeps input_dims = 2 x patch
    # (values and mask), the point head emits output_patch_len x 10, the quantile head output_quantile_len x 10.
    return dataclasses.replace(
        base,
        output_quantile_len=quantile_len,
        tokenizer=dataclasses.replace(base.tokenizer, hidden_dims=model_dims, output_dims=model_dims),
        stacked_transformers=stacked,
        output_projection_point=dataclasses.replace(
            base.output_projection_point,
            input_dims=model_dims,
            hidden_dims=model_dims,
            output_dims=base.output_patch_len * n_out,
        ),
        output_projection_quantiles=dataclasses.replace(
            base.output_projection_quantiles,
            input_dims=model_dims,
            hidden_dims=model_dims,
            output_dims=quantile_len * n_out,
        ),
    )


class TimesFM2p5Module(TimesFM_2p5_200M_torch_module):
    """``TimesFM_2p5_200M_torch_module`` with its own config (the parent reads ``self.config`` in ``__init__``).

    The config is an instance attribute (set before the parent's ``__init__``) instead of a class attribute of a
    class made per config, so instances pickle and deep-copy like any module. ``decode``, ``forward`` and the
    wrapper ``timesfm.TimesFM_2p5_200M_torch`` (assign ``wrapper.model = module``) work unchanged.
    """

    def __init__(self, config: Definition) -> None:
        object.__setattr__(self, "config", config)
        super().__init__()


def _scales_to_one(model: nn.Module) -> None:
    """Every timesfm ``RMSNorm.scale`` starts at zero (every branch would output zero); set them to one.
    ``PerDimScale`` at zero is already right: softplus(0) * 1.442695 / sqrt(d) = 1 / sqrt(d)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, tfm_normalization.RMSNorm):
                m.scale.fill_(1.0)


def build_timesfm(
    num_layers: int = REDUCED_DEFAULTS["num_layers"],
    model_dims: int = REDUCED_DEFAULTS["model_dims"],
    num_heads: int = REDUCED_DEFAULTS["num_heads"],
    seed: Optional[int] = None,
    *,
    hidden_dims: Optional[int] = None,
    output_quantile_len: int = 128,
) -> TimesFM2p5Module:
    """A reduced TimesFM 2.5 module for training from scratch (defaults: the offline stand-in, 4 layers, d 256,
    4 heads, 3.1 M parameters), in eval mode on the CPU.

    Linear layers keep torch's default initialisation (drawn under ``seed`` when given); every RMSNorm scale is set
    to one. ``output_quantile_len`` defaults to 128 here (1024 in the 200M model): the continuous-quantile head
    is not used for point forecasts, and at 1024 it would be most of a reduced model's parameters and time;
    ``use_continuous_quantile_head`` then supports horizons up to 128 only.
    """
    cfg = timesfm_config(
        num_layers, model_dims, num_heads, hidden_dims=hidden_dims, output_quantile_len=output_quantile_len
    )
    if seed is None:
        model = TimesFM2p5Module(cfg)
    else:
        with seeded(seed):
            model = TimesFM2p5Module(cfg)
    _scales_to_one(model)
    return model.eval()


def build_timesfm_200m(checkpoint: Union[None, str, os.PathLike] = None) -> TimesFM_2p5_200M_torch_module:
    """The full 200M architecture (20 layers, d 1280, 16 heads; timesfm's own class and config, no download), in
    eval mode on the CPU. Random weights with timesfm's initialisation (RMSNorm scales zero) unless
    ``checkpoint`` (a safetensors file or a folder holding ``model.safetensors``) is given, see
    :func:`fetch_timesfm_checkpoint`."""
    model = TimesFM_2p5_200M_torch_module()
    if checkpoint is not None:
        load_timesfm_checkpoint(model, checkpoint)
    return model.eval()


# --------------------------------------------------------------------------------------------------------------
# checkpoint
# --------------------------------------------------------------------------------------------------------------
class CheckpointUnavailableError(RuntimeError):
    """The public checkpoint can be neither found in the cache nor downloaded (offline, no access, ...)."""


def module_of(model: Any) -> nn.Module:
    """The torch module of ``model`` (a module, or the ``timesfm.TimesFM_2p5_200M_torch`` wrapper)."""
    if isinstance(model, nn.Module):
        return model
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module):
        return inner
    raise TypeError(f"expected a TimesFM torch module or its wrapper, got {type(model).__name__}")


def load_timesfm_checkpoint(model: Any, path: Union[str, os.PathLike]) -> nn.Module:
    """Load a safetensors checkpoint in the public layout of ``google/timesfm-2.5-200m-pytorch`` strictly.

    ``path`` is the file or a folder holding ``model.safetensors``. The public layout is the module's own
    ``state_dict`` names (timesfm's ``TimesFM_2p5_200M_torch_module.load_checkpoint`` calls
    ``load_state_dict(load_file(path), strict=True)`` with no renaming): ``tokenizer.{hidden,output,residual}_layer.
    {weight,bias}``; per layer ``stacked_xf.{i}.`` + ``pre_attn_ln.scale``, ``post_attn_ln.scale``,
    ``attn.qkv_proj.weight``, ``attn.out.weight``, ``attn.query_ln.scale``, ``attn.key_ln.scale``,
    ``attn.per_dim_scale.per_dim_scale``, ``pre_ff_ln.scale``, ``post_ff_ln.scale``, ``ff0.weight``, ``ff1.weight``;
    ``output_projection_{point,quantiles}.{hidden,output,residual}_layer.weight``.

    Raises :class:`CheckpointMismatchError` naming every missing / unexpected key and shape mismatch (nothing is
    loaded then). Returns the module (``model`` itself, or the wrapper's ``.model``) in eval mode; its device and
    dtype are kept.
    """
    module = module_of(model)
    file = Path(path)
    if file.is_dir():
        file = file / TIMESFM_FILENAME
    if not file.is_file():
        raise FileNotFoundError(f"TimesFM checkpoint {str(file)!r} does not exist")
    tensors = load_file(str(file))
    expected = module.state_dict()
    problems, _, _ = state_dict_mismatch(expected, tensors)
    if problems:
        raise CheckpointMismatchError(
            f"TimesFM checkpoint {str(file)!r} does not match the module ({type(module).__name__}, "
            f"{len(expected)} tensors): " + "; ".join(problems) + ". The public google/timesfm-2.5-200m-pytorch "
            "file fits build_timesfm_200m(); a reduced module needs a checkpoint of its own sizes."
        )
    module.load_state_dict(tensors, strict=True)
    return module.eval()


_SHA256 = re.compile(r"[0-9a-f]{64}")


def hub_blob_id(snapshot_file: Union[str, os.PathLike]) -> Optional[str]:
    """The Hub's LFS id (the file's SHA-256) of a file in Hugging Face's cache, read from the cache layout: a
    snapshot file is a link ``snapshots/<commit>/<file> -> ../../blobs/<etag>``, and an LFS file's etag is its
    SHA-256. Exactly one link level: in a Xet-backed repository's cache (huggingface_hub's shared blob store,
    2025-) ``blobs/<etag>`` is itself a link to ``<cache>/blobs/<2 hex>/<xet hash>``, 64 hex digits that are not
    the SHA-256. None where the cache holds a copy (no symlinks) or the name is no SHA-256 (a git file's etag)."""
    path = Path(snapshot_file)
    if not path.is_symlink():
        return None
    name = Path(os.readlink(path)).name
    return name if _SHA256.fullmatch(name) else None


def fetch_timesfm_checkpoint(
    cache_dir: Union[str, os.PathLike],
    *,
    repo_id: str = TIMESFM_REPO_ID,
    filename: str = TIMESFM_FILENAME,
    revision: Optional[str] = None,
    sha256: Optional[str] = None,
    local_files_only: bool = False,
) -> Path:
    """Path of the public TimesFM 2.5 checkpoint in ``cache_dir`` (Hugging Face's cache layout), downloaded with
    ``huggingface_hub.hf_hub_download`` when not cached, its SHA-256 verified.

    The expected SHA-256 is ``sha256`` when given, else the one recorded by an earlier fetch in
    ``<cache_dir>/<repo>--<filename>--<revision>.sha256.json`` (the first fetch writes it). The file's Hub LFS id,
    which is its SHA-256 and names its blob in the cache, is checked as well. Raises
    :class:`CheckpointUnavailableError` when the file is neither cached nor downloadable (e.g. offline, or
    ``HF_HUB_OFFLINE=1``), and ``ValueError`` on a SHA-256 mismatch.
    """
    cache = Path(cache_dir)
    rev = revision or "main"
    try:
        local = Path(
            hf_hub_download(
                repo_id=repo_id,
                filename=filename,
                revision=revision,
                cache_dir=cache,
                local_files_only=local_files_only,
            )
        )
    except Exception as err:  # offline (LocalEntryNotFoundError), HTTP / auth errors, ...
        offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
        raise CheckpointUnavailableError(
            f"the TimesFM 2.5 checkpoint {repo_id}/{filename} (revision {rev}) cannot be reached: it is not in the "
            f"cache {str(cache)!r} and the Hugging Face Hub could not deliver it"
            + (" (HF_HUB_OFFLINE is set)" if offline else "")
            + f" [{type(err).__name__}: {err}]. Fetch it once on a machine with network access into this cache "
            "folder, or use the offline reduced model (build_timesfm)."
        ) from err

    got = sha256_file(local)
    blob = hub_blob_id(local)
    if blob is not None and blob != got:
        raise ValueError(f"TimesFM checkpoint {str(local)!r} has SHA-256 {got}, but the Hub's LFS id is {blob}: "
                         "the cached file is corrupt; delete it and fetch again")  # fmt: skip
    record_path = cache / f"{repo_id.replace('/', '--')}--{filename}--{rev}.sha256.json"
    recorded = json.loads(record_path.read_text())["sha256"] if record_path.is_file() else None
    expected = sha256 or recorded
    if expected is not None and got != expected.lower():
        source = "the sha256 argument" if sha256 else f"the record {str(record_path)!r}"
        raise ValueError(
            f"TimesFM checkpoint {str(local)!r} has SHA-256 {got}, expected {expected} ({source}); "
            "if the repository changed on purpose, pin a revision or remove the record"
        )
    if recorded is None:
        record = {"repo_id": repo_id, "filename": filename, "revision": rev, "sha256": got,
                  "bytes": local.stat().st_size}  # fmt: skip
        with atomic_path(record_path) as tmp:
            tmp.write_text(json.dumps(record, indent=2) + "\n")
    return local


# --------------------------------------------------------------------------------------------------------------
# stochastic attention adapter
# --------------------------------------------------------------------------------------------------------------
# The two attention functions timesfm 3.0.2 ships (transformer.py); tensors (B, L, H, D), boolean mask (B, 1, L, S)
# with True = attend, no 1/sqrt(d) scaling (scale 1.0: PerDimScale has already scaled the query).
_ATTENTION_FNS = {
    # default: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0); a fully masked query row (left
    # padding) gets a zero output from torch's SDPA, i.e. zero probabilities
    tfm_transformer._torch_dot_product_attention: "sdpa",
    # explicit version: masked logits set to -finfo.max / 2, so a fully masked row is uniform over all keys
    tfm_transformer._dot_product_attention: "explicit",
}


def _explicit_probs(query: Tensor, key: Tensor, mask: Optional[Tensor]) -> Tensor:
    """Probabilities (B, H, L, S) of timesfm's explicit attention function; query, key (B, L|S, H, D). (Its SDPA
    function goes through :func:`stochattn.attention.scaled_dot_product_attention`: -inf masking and NaN -> 0 for a
    fully masked row, i.e. zero weights, as SDPA's zero output; NaN must never reach V: the padded rows' outputs are
    keys / values of the next layer, and 0 * NaN is NaN.)"""
    logits = query.permute(0, 2, 1, 3) @ key.permute(0, 2, 3, 1)
    if mask is not None:
        logits = torch.where(mask, logits, -torch.finfo(logits.dtype).max / 2)
    return torch.softmax(logits, dim=-1)


@register_attention(tfm_transformer.MultiHeadAttention, n_heads=lambda m: m.num_heads)
def _timesfm_attention_forward(module, state: SAState, original, *args, **kwargs):
    # Hooked at the smallest piece: timesfm's forward runs unchanged (QKV projection, RoPE with the padding-aware
    # positions, query/key RMSNorm, PerDimScale, decode-cache writes, mask construction, output projection); only
    # the attention function it calls - the one timesfm itself makes swappable (``attention_fn``) - is replaced,
    # for the duration of this call, by the masked softmax followed by SA (stochattn.attention's SDPA for timesfm's
    # SDPA function: the fused kernel on CUDA, the explicit path elsewhere). So the adapter is exact by
    # construction and cannot drift from timesfm's forward. (Not safe for concurrent calls of one module from
    # several threads.) A forward compiled by timesfm's loader (``TimesFM_2p5_200M_torch(torch_compile=True)``:
    # ``model.forward = torch.compile(model.forward)``) is traced through this swap: the patch is guarded, so the
    # graph is rebuilt with SA's operator in it (tests/test_compile.py).
    fn = module.attention_fn
    kind = _ATTENTION_FNS.get(fn)
    if kind is None:
        raise NotImplementedError(
            f"stochastic attention for timesfm supports its two attention functions "
            f"(_torch_dot_product_attention, _dot_product_attention), not {getattr(fn, '__qualname__', fn)!r}"
        )

    def stochastic_attention_fn(query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        value = value.permute(0, 2, 1, 3)
        if kind == "sdpa":  # SDPA's semantics: the fused kernel where it can run, else the explicit path
            q, k = query.permute(0, 2, 1, 3), key.permute(0, 2, 1, 3)
            return state.sdpa(q, k, value, mask, False, 1.0, False, state.nu).permute(0, 2, 1, 3)  # (B, L, H, D)
        return state.attend(_explicit_probs(query, key, mask), value).permute(0, 2, 1, 3)

    swap = module.__dict__  # a plain attribute: set without nn.Module.__setattr__'s checks (host time per call)
    swap["attention_fn"] = stochastic_attention_fn
    try:
        return original(*args, **kwargs)
    finally:
        swap["attention_fn"] = fn


# --------------------------------------------------------------------------------------------------------------
# point forecasts and SA predictive samples
# --------------------------------------------------------------------------------------------------------------
def _check_horizon(horizon: Any) -> None:
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
        raise ValueError(f"horizon must be a positive int, got {horizon!r}")


def _left_pad(module: nn.Module, context: Tensor, mask: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    """(B, T) context and bool padding mask (True = padding), left-padded to a multiple of the patch length."""
    if context.dim() != 2:
        raise ValueError(f"context must have shape (B, T), got {tuple(context.shape)}")
    context = context.float()
    mask = torch.zeros_like(context, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    if mask.shape != context.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} differs from context shape {tuple(context.shape)}")
    if (pad := (-context.shape[1]) % module.p) != 0:
        context = torch.nn.functional.pad(context, (pad, 0))
        mask = torch.nn.functional.pad(mask, (pad, 0), value=True)
    return context, mask


@torch.no_grad()
def point_forecast(model: Any, context: Tensor, mask: Optional[Tensor] = None, *, horizon: int) -> Tensor:
    """Point forecast (B, horizon) of the raw series ``context`` (B, T), through the module's ``decode`` (its
    ``forward(inputs, masks, caches)`` with per-patch running normalisation and autoregressive steps beyond 128).

    ``mask`` (B, T) bool marks padded steps (True = padding; left padding); a context whose length is not a
    multiple of 32 is left-padded like timesfm's ``forecast_naive``. The point forecast is output channel
    ``decode_index`` = 5, the median (the paper, L1165; channel 0 is the mean, 1-9 the quantiles 0.1-0.9).

    NOTE[DIFF]: timesfm's ``forecast()`` defaults (``force_flip_invariance=True``, ``infer_is_positive=True``) are
    not applied: flip invariance averages f(x) and -f(-x), i.e. two independent stochastic passes per SA sample
    (halving SA's variance), and the clamp at zero biases the SA ensemble. This equals ``compiled_decode`` with
    both off, ``normalize_inputs=False`` and ``use_continuous_quantile_head=False``.
    """
    module = module_of(model)
    _check_horizon(horizon)
    context, mask = _left_pad(module, context, mask)
    batch = context.shape[0]
    pf, _, ar = module.decode(horizon, context, mask)
    parts = [pf[:, -1, :, module.aridx]]
    if ar is not None:
        parts.append(ar[..., module.aridx].reshape(batch, -1))
    return torch.cat(parts, dim=1)[:, :horizon]


def sa_forecast_samples(
    model: Any,
    context: Tensor,
    mask: Optional[Tensor] = None,
    *,
    horizon: int,
    nu: NuSpec,
    num_samples: int,
    generator: Optional[torch.Generator] = None,
    method: Method = "auto",
    max_rows: Union[None, int, str] = "auto",
) -> Tensor:
    """SA predictive samples (num_samples, B, horizon) of :func:`point_forecast` (median channel, flip invariance
    and positivity clamp off, see its NOTE[DIFF]), with stochastic attention at ``nu`` in every attention module
    (any form :class:`~stochattn.patch.StochasticAttention` accepts); passes are folded into the batch by
    :func:`~stochattn.patch.predictive_samples`. The patch is removed afterwards."""
    module = module_of(model)
    if mask is None:
        mask = torch.zeros_like(context, dtype=torch.bool)
    with StochasticAttention(module, nu, generator=generator, method=method):
        return predictive_samples(
            lambda c, m: point_forecast(module, c, m, horizon=horizon),
            context,
            mask,
            num_samples=num_samples,
            max_rows=max_rows,
        )


# --------------------------------------------------------------------------------------------------------------
# differentiable forecasts (training, LoRA, weight-space baselines)
# --------------------------------------------------------------------------------------------------------------
def patch_outputs(model: Any, context: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Renormalised outputs (B, N, 128, 10) of every input patch of ``context`` (B, T), with autograd.

    The prefill of timesfm's ``decode`` without its cache: patches normalised with the running statistics of
    the patches up to them (``util.update_running_stats``), masked steps zeroed, ``forward`` (causal attention),
    outputs de-normalised with the same statistics. Output patch i forecasts the 128 steps after input patch i;
    channel 0 is the mean, 1-9 the quantiles 0.1-0.9 (5: the median, the point forecast).
    """
    module = module_of(model)
    context, mask = _left_pad(module, context, mask)
    batch = context.shape[0]
    patches = context.reshape(batch, -1, module.p)
    patch_masks = mask.reshape(batch, -1, module.p)
    n = mu = sigma = torch.zeros(batch, device=context.device)
    mus, sigmas = [], []
    for i in range(patches.shape[1]):
        (n, mu, sigma), _ = tfm_util.update_running_stats(n, mu, sigma, patches[:, i], patch_masks[:, i])
        mus.append(mu)
        sigmas.append(sigma)
    mu, sigma = torch.stack(mus, dim=1), torch.stack(sigmas, dim=1)
    normed = torch.where(patch_masks, 0.0, tfm_util.revin(patches, mu, sigma, reverse=False))
    (_, _, out, _), _ = module(normed, patch_masks)
    return tfm_util.revin(out, mu, sigma, reverse=True).reshape(batch, patches.shape[1], module.o, module.q)


def forecast(model: Any, context: Tensor, mask: Optional[Tensor] = None, *, horizon: int) -> Tensor:
    """Point forecast (B, horizon) of ``context`` (B, T) with autograd: the median channel of the last patch's
    output, then, beyond 128 steps, that forecast appended as context and the model run again (timesfm's
    autoregressive decode, recomputed without its cache: the same running statistics, positions and causal
    attention, so it equals :func:`point_forecast` up to round-off; tests check it)."""
    module = module_of(model)
    _check_horizon(horizon)
    context, mask = _left_pad(module, context, mask)
    parts: list[Tensor] = []
    while True:
        step = patch_outputs(module, context, mask)[:, -1, :, module.aridx]  # (B, 128)
        parts.append(step)
        if len(parts) * module.o >= horizon:
            return torch.cat(parts, dim=1)[:, :horizon]
        context = torch.cat([context, step], dim=1)
        mask = torch.nn.functional.pad(mask, (0, module.o), value=False)


class TimesFMForecaster(nn.Module):
    """``context (B, T) -> point forecast (B, horizon)`` (:func:`forecast`) of a TimesFM module: the form every
    training loop and sampler of the library takes (``fit_regressor``, SWAG, IVON, HSA, Contextual Dropout, SA).

    ``backbone`` is the timesfm module (LoRA layers may be injected into it); flip invariance and the positivity
    clamp of ``timesfm``'s ``forecast()`` are off (see :func:`point_forecast`'s NOTE[DIFF]).
    """

    def __init__(self, backbone: nn.Module, horizon: int) -> None:
        super().__init__()
        _check_horizon(horizon)
        self.backbone = backbone
        self.horizon = horizon

    def forward(self, context: Tensor) -> Tensor:
        return forecast(self.backbone, context, horizon=self.horizon)


def pretraining_loss(model: Any, series: Tensor, context: int) -> Tensor:
    """Multi-position training loss of a TimesFM module on ``series`` (B, context + 128): every input patch of the
    first ``context`` steps forecasts the next 128 steps (teacher forcing, as TimesFM is pretrained), scored on
    the de-normalised outputs: squared error of the mean channel plus the pinball loss of the nine quantile
    channels (the median, channel 5, is the point forecast), averaged over positions, steps and channels.

    NOTE[DIFF]: TimesFM 2.5's own pretraining recipe (data mix, masking of context lengths, loss weights) is not
    public in timesfm 3.0.2; this objective trains the heads the forecasts read, on full-length contexts.
    """
    module = module_of(model)
    if series.dim() != 2 or series.shape[1] != context + module.o:
        raise ValueError(f"series must have shape (B, context + {module.o}), got {tuple(series.shape)}")
    if context % module.p:
        raise ValueError(f"context ({context}) must be a multiple of the patch length {module.p}")
    out = patch_outputs(module, series[:, :context])  # (B, N, 128, 10)
    n_patches = out.shape[1]
    # target of position i: the 128 steps after input patch i, i.e. series[(i+1) p : (i+1) p + 128]
    targets = series[:, module.p :].unfold(1, module.o, module.p)[:, :n_patches]  # (B, N, 128)
    loss = torch.mean((out[..., 0] - targets) ** 2)
    quantiles = torch.tensor(module.config.quantiles, dtype=out.dtype, device=out.device)
    err = targets.unsqueeze(-1) - out[..., 1:]
    return loss + torch.mean(torch.maximum(quantiles * err, (quantiles - 1) * err))


@dataclasses.dataclass
class PretrainResult:
    """Outcome of :func:`pretrain_timesfm`: the step whose weights the module holds (lowest validation loss),
    that loss, the steps run, seconds, and the history (``step``, ``train_loss`` averaged since the previous
    check, ``val_loss``)."""

    best_step: int
    best_val_loss: float
    steps: int
    seconds: float
    history: dict


def _val_loss(module: nn.Module, series: Tensor, context: int, batch_size: int) -> float:
    with torch.no_grad():
        losses = [float(pretraining_loss(module, b, context)) * len(b) for b in series.split(batch_size)]
    return sum(losses) / len(series)


def pretrain_timesfm(
    module: nn.Module,
    train_series: Tensor,
    val_series: Tensor,
    *,
    context: int,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    weight_decay: float = 0.0,
    warmup: int = 0,
    eval_every: int = 100,
    progress: bool = True,
) -> PretrainResult:
    """Pretrain a TimesFM module in place on windows ``train_series`` (n, context + 128) with
    :func:`pretraining_loss`: AdamW, linear warm-up over ``warmup`` steps then cosine decay to zero, mini-batches
    drawn with replacement under ``seed``; every ``eval_every`` steps the loss on ``val_series`` (m, context + 128)
    is computed and the module ends with the weights of the best check (in eval mode)."""
    for name, value in (("steps", steps), ("batch_size", batch_size), ("eval_every", eval_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if len(train_series) == 0 or len(val_series) == 0:
        raise ValueError("train_series and val_series need at least one window each")
    opt = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    gen = torch.Generator().manual_seed(int(seed))
    history: dict = {"step": [], "train_loss": [], "val_loss": []}
    best = (math.inf, 0, None)
    running, count, t0 = 0.0, 0, time.perf_counter()
    with seeded(int(seed)):
        bar = show_progress(range(1, steps + 1), desc="pretrain", unit="step", disable=not progress)
        for step in bar:
            module.train()
            idx = torch.randint(len(train_series), (batch_size,), generator=gen).to(train_series.device)
            opt.zero_grad(set_to_none=True)
            loss = pretraining_loss(module, train_series[idx], context)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"pretraining loss became {float(loss)} at step {step}; lower lr")
            loss.backward()
            opt.step()
            sched.step()
            running, count = running + float(loss.detach()), count + 1
            if step % eval_every == 0 or step == steps:
                module.eval()
                val = _val_loss(module, val_series, context, 4 * batch_size)
                history["step"].append(step)
                history["train_loss"].append(running / count)
                history["val_loss"].append(val)
                bar.set_postfix(loss=f"{running / count:.4g}", val=f"{val:.4g}")
                running, count = 0.0, 0
                if val < best[0]:
                    best = (val, step, copy.deepcopy(module.state_dict()))
        bar.close()
    module.load_state_dict(best[2])
    module.eval()
    return PretrainResult(best_step=best[1], best_val_loss=best[0], steps=steps,
                          seconds=time.perf_counter() - t0, history=history)  # fmt: skip
