"""Stochastic attention for attention computed by ``F.scaled_dot_product_attention`` (SDPA), timm and Hugging Face.

**The SDPA path.** A patched module runs its *own* forward inside a frame: a ``ContextVar`` holding the module and
its :class:`~stochattn.patch.SAState`. While at least one frame is open (in any thread),
``torch.nn.functional.scaled_dot_product_attention`` is a dispatcher: a call made in a context with an open frame is
computed with SA at that frame's nu (:meth:`SAState.sdpa`: :func:`stochattn.attention.scaled_dot_product_attention`,
the masked softmax then the same exact samplers); any other call goes to torch's function unchanged. The dispatcher
is installed when the first frame opens and torch's function is put back when the last one closes (a reference
count under a lock), so nothing outside a patched module's forward is touched; a thread that runs another model
during that window passes through to torch (one Python call more). The innermost frame wins, so nested patched
modules each use their own nu, per head as well (a per-head nu of shape (H, 1) is matched to the query's heads).
Code that bound the function before the patch (``from torch.nn.functional import scaled_dot_product_attention``)
or a ``torch.compile``'d forward does not see the dispatcher: such a module makes no draw, which warns.

SDPA semantics kept: boolean masks (True = attend) and additive float masks, ``is_causal`` (top-left), ``scale``,
``enable_gqa`` (K/V heads repeated per query group, as torch). A row with no attendable key (all False / all -inf)
gets zero weights and a zero output, as torch's SDPA returns for it; no key is drawn. An additive mask entry at or
below half the dtype's minimum (how Hugging Face's eager masks write "masked") counts as -inf: other rows are
unchanged (such keys already have probability exactly 0), and a row masked entirely that way (a left-padded query in
a causal decoder) gets zero weights, as with transformers' sdpa masks, where torch would average uniformly over the
masked keys. So no masked key is ever drawn (NOTE[DIFF] from torch, for those rows only). ``dropout_p`` is for
training: in eval mode it is ignored with a warning (NOTE[DIFF]: torch would drop at inference; SA is the only
randomness wanted), in training mode it raises.

**Which modules.** A module whose class's ``forward`` calls ``scaled_dot_product_attention`` (source inspection,
cached per class) is patched this way; a ``fused_attn`` flag (timm's ``Attention``, ``AttentionPoolLatent``, ...)
is forced on during the patched forward, since timm's explicit path is the same attention computed by hand.

**Hugging Face transformers (5.x).** Every attention module picks its function per call:
``ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)``. "sdpa" gives
``integrations.sdpa_attention.sdpa_attention_forward``, which calls SDPA; "eager" gives the *default argument*, a
private ``eager_attention_forward`` copied into each modeling file, which computes the softmax by hand. So the
registry alone cannot reach eager (its function is not in the registry), and wrapping the hundreds of per-file
copies would mean re-implementing their variants. The hook chosen: a module whose forward calls the registry (the
source test transformers itself uses to decide whether a model can switch implementations) is patched like any
SDPA module, and while its frame is open ``AttentionInterface.get_interface`` returns transformers' own
``sdpa_attention_forward`` for "eager", "sdpa" and None. That function handles GQA (``repeat_kv``, ``enable_gqa``,
``pack_gqa``), ``is_causal``, cache cropping and position bias, and its SDPA call lands in the dispatcher; eager's
4-D additive masks are valid SDPA masks, and transformers tests eager against sdpa. Other implementations (flash,
flex, paged) are left alone, make no draw and so warn. A family whose models all declare ``_supports_sdpa = False``
is patched only when its eager function is a copy of BERT's or Llama's (:func:`_routable`), else reported as
unpatched; eager-only features refuse loudly (softcapping raises in transformers' sdpa function, sinks raise here).
Under SA the attention weights are not returned (None, as with sdpa). Rejected: switching
``config._attn_implementation`` (shared by every layer, often by other models, and read when masks are built).
"""
from __future__ import annotations

import contextvars
import functools
import inspect
import sys
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .extras import requires
from .patch import _DETECTORS, AttentionAdapter, SAState


@dataclass(frozen=True)
class _Frame:
    module: nn.Module
    state: SAState
    hf: bool  # route Hugging Face's attention registry to its sdpa function


_FRAME: contextvars.ContextVar[Optional[_Frame]] = contextvars.ContextVar("stochattn_sdpa_frame", default=None)
_LOCK = threading.Lock()
_open_frames = 0
_torch_sdpa: Callable[..., Tensor] = F.scaled_dot_product_attention
_hf_get_interface: Optional[Callable[..., Callable]] = None


def _hf_interface_class() -> Optional[type]:
    """transformers' ``AttentionInterface`` if transformers is already imported (never imported from here)."""
    modeling_utils = sys.modules.get("transformers.modeling_utils")
    return getattr(modeling_utils, "AttentionInterface", None)


def _install() -> None:
    global _open_frames, _torch_sdpa, _hf_get_interface
    with _LOCK:
        if _open_frames == 0:
            if F.scaled_dot_product_attention is not _dispatch_sdpa:
                _torch_sdpa = F.scaled_dot_product_attention
            F.scaled_dot_product_attention = _dispatch_sdpa
            interface = _hf_interface_class()
            if interface is not None:
                _hf_get_interface = interface.get_interface
                interface.get_interface = _get_interface
        _open_frames += 1


def _uninstall() -> None:
    global _open_frames, _hf_get_interface
    with _LOCK:
        _open_frames -= 1
        if _open_frames == 0:
            if F.scaled_dot_product_attention is _dispatch_sdpa:
                F.scaled_dot_product_attention = _torch_sdpa
            interface = _hf_interface_class()
            if _hf_get_interface is not None and interface is not None:
                interface.get_interface = _hf_get_interface
            _hf_get_interface = None


@contextmanager
def sa_frame(module: nn.Module, state: SAState, hf: bool = False) -> Iterator[None]:
    """SDPA calls made inside this block (in this context) are computed with SA at ``state``'s nu."""
    _install()
    token = _FRAME.set(_Frame(module, state, hf))
    try:
        yield
    finally:
        _FRAME.reset(token)
        _uninstall()


# --------------------------------------------------------------------------------------------------------------
# the dispatcher
# --------------------------------------------------------------------------------------------------------------
def _dispatch_sdpa(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
) -> Tensor:
    """Stands in for ``F.scaled_dot_product_attention`` while a frame is open anywhere (same signature)."""
    frame = _FRAME.get()
    if frame is None or frame.state.nu is None:
        return _torch_sdpa(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            enable_gqa=enable_gqa,
        )
    if dropout_p > 0.0:
        if frame.module.training:
            raise NotImplementedError(
                f"stochastic attention through SDPA runs at inference, but {type(frame.module).__qualname__} is in "
                f"training mode with attention dropout {dropout_p}: call model.eval()"
            )
        warnings.warn(
            f"{type(frame.module).__qualname__} calls SDPA with dropout_p={dropout_p} in eval mode; stochastic "
            "attention ignores it", stacklevel=2,
        )
    nu = frame.state.nu
    if isinstance(nu, Tensor):
        nu = _per_head(nu, query, frame.module)
    if attn_mask is not None and attn_mask.is_floating_point():
        # NOTE[DIFF]: "masked" written as a finite minimum (Hugging Face's eager masks) counts as -inf, so a row with
        # no attendable key gets zero weights and no draw instead of torch's uniform average over masked keys.
        attn_mask = attn_mask.masked_fill(attn_mask <= torch.finfo(attn_mask.dtype).min / 2, float("-inf"))
    return frame.state.sdpa(query, key, value, attn_mask, is_causal, scale, enable_gqa, nu)


def _per_head(nu: Tensor, query: Tensor, module: nn.Module) -> Tensor:
    """Per-head nu (H, 1) laid out for query (..., Hq, L, E): as is when Hq = H; (Hq, L) when the heads of a
    group are folded into L (transformers' ``pack_gqa`` for one-token decoding: head = kv_head * L + row)."""
    heads = nu.shape[0]
    if query.dim() >= 3 and query.shape[-3] == heads:
        return nu
    if query.dim() >= 3 and query.shape[-3] * query.shape[-2] == heads:
        return nu.view(query.shape[-3], query.shape[-2])
    raise ValueError(
        f"per-head nu for {heads} heads, but {type(module).__qualname__} calls SDPA with a query of shape "
        f"{tuple(query.shape)} (heads on dim -3)"
    )


# --------------------------------------------------------------------------------------------------------------
# Hugging Face: route eager and sdpa to transformers' sdpa function while an HF frame is open
# --------------------------------------------------------------------------------------------------------------
def _hf_sa_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask, **kwargs):
    """transformers' ``sdpa_attention_forward`` (its SDPA call then goes through the dispatcher)."""
    with requires("hf"):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
    if kwargs.get("s_aux") is not None or kwargs.get("sinks") is not None:
        raise NotImplementedError(f"stochastic attention does not support attention sinks ({type(module).__name__})")
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _get_interface(self: Any, attn_implementation: Optional[str], default: Callable) -> Callable:
    frame = _FRAME.get()
    if frame is not None and frame.hf and attn_implementation in (None, "eager", "sdpa"):
        return _hf_sa_attention
    return _hf_get_interface(self, attn_implementation, default)


# --------------------------------------------------------------------------------------------------------------
# detection and adapters
# --------------------------------------------------------------------------------------------------------------
def n_heads(module: nn.Module) -> Optional[int]:
    """The module's head count from the usual attribute names (None if none is found)."""
    for owner, attr in ((module, "num_heads"), (module, "num_attention_heads"), (module, "n_heads"),
                        (module, "n_head"), (getattr(module, "config", None), "num_attention_heads")):
        value = getattr(owner, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _sdpa_forward(module: nn.Module, state: SAState, original: Callable, *args, **kwargs):
    # timm's modules choose between SDPA and a hand-written softmax with ``fused_attn``: take the SDPA path
    unfused = getattr(module, "fused_attn", None) is False
    own = "fused_attn" in module.__dict__
    with sa_frame(module, state):
        if unfused:
            module.fused_attn = True
        try:
            return original(*args, **kwargs)
        finally:
            if unfused:
                if own:
                    module.fused_attn = False
                else:
                    del module.fused_attn


def _hf_forward(module: nn.Module, state: SAState, original: Callable, *args, **kwargs):
    with sa_frame(module, state, hf=True):
        return original(*args, **kwargs)


SDPA_ADAPTER = AttentionAdapter(forward=_sdpa_forward, n_heads=n_heads, calls_original=True, kind="sdpa")
HF_ADAPTER = AttentionAdapter(forward=_hf_forward, n_heads=n_heads, calls_original=True, kind="transformers")


@functools.lru_cache(maxsize=None)
def _forward_source(cls: type) -> str:
    forward = getattr(cls, "forward", None)
    if forward is None or forward is nn.Module.forward:
        return ""
    try:
        return inspect.getsource(forward)
    except (OSError, TypeError):
        return ""


def _code(fn: Callable) -> tuple:
    code = fn.__code__
    return code.co_code, code.co_consts, code.co_names


@functools.lru_cache(maxsize=None)
def _routable(cls: type) -> bool:
    """Whether transformers' sdpa function computes what ``cls``'s family computes: yes when one of the models of its
    modeling file supports sdpa (transformers tests those against eager), or when the file's
    ``eager_attention_forward`` is a copy (same bytecode) of BERT's or Llama's (e.g. TimeSeriesTransformer, which
    declares ``_supports_sdpa = False`` for test reasons only); not for families whose eager function differs
    (softcapping, sinks, ...)."""
    base = getattr(sys.modules.get("transformers.modeling_utils"), "PreTrainedModel", None)
    module = sys.modules.get(cls.__module__)
    if base is None or module is None:
        return True
    models = [v for v in vars(module).values()
              if isinstance(v, type) and issubclass(v, base) and v.__module__ == module.__name__]
    if not models or any(getattr(m, "_supports_sdpa", False) for m in models):
        return True
    eager = getattr(module, "eager_attention_forward", None)
    if eager is None:
        return False
    with requires("hf"):
        from transformers.models.bert import modeling_bert
        from transformers.models.llama import modeling_llama
    return _code(eager) in (_code(modeling_bert.eager_attention_forward), _code(modeling_llama.eager_attention_forward))


def detect(cls: type) -> Union[None, AttentionAdapter]:
    """HF_ADAPTER for a forward calling transformers' attention registry (when :func:`_routable`), SDPA_ADAPTER for
    one calling ``scaled_dot_product_attention``, else None."""
    source = _forward_source(cls)
    if "ALL_ATTENTION_FUNCTIONS.get_interface(" in source or "ALL_ATTENTION_FUNCTIONS[" in source:
        return HF_ADAPTER if _routable(cls) else None
    if "scaled_dot_product_attention(" in source:
        return SDPA_ADAPTER
    return None


_DETECTORS.append(detect)
