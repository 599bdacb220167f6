"""Stochastic attention for attention computed by ``F.scaled_dot_product_attention`` (SDPA), timm and Hugging Face.

**The SDPA path.** A patched module runs its *own* forward inside a frame: a ``torch.overrides.TorchFunctionMode``
(:class:`SAMode`) holding the module and its :class:`~stochattn.patch.SAState`, entered around the forward. Every
call of ``torch._C._nn.scaled_dot_product_attention`` made while the mode is on the stack reaches it, however the
function was bound (``F.scaled_dot_product_attention``, an alias imported before the patch, ``torch._C._nn``'s own
name, a reference stored on the module), and is computed with SA at the frame's nu (:meth:`SAState.sdpa`: the
operator ``torch.ops.stochattn.sdpa``, the masked softmax then the same exact samplers; the fused kernel on CUDA);
every other torch call passes through unchanged. Nothing global is swapped: torch's function modes are per thread,
so another thread (or code outside a patched forward) never sees the frame. The innermost frame wins, so nested
patched modules each use their own nu, per head as well (a per-head nu of shape (H, 1) is matched to the query's
heads). Dynamo traces through the mode (no graph break): a ``torch.compile``'d model reaches SA too, whichever of
compiling and patching came first (see :class:`~stochattn.patch.StochasticAttention`).

SDPA semantics kept: boolean masks (True = attend) and additive float masks, ``is_causal`` (top-left), ``scale``,
``enable_gqa`` (K/V heads repeated per query group, as torch). A row with no attendable key (all False / all -inf)
gets zero weights and a zero output, as torch's SDPA returns for it; no key is drawn. An additive mask entry at or
below half the dtype's minimum (how Hugging Face's eager masks write "masked") counts as -inf: other rows are
unchanged (such keys already have probability exactly 0), and a row masked entirely that way (a left-padded query in
a causal decoder) gets zero weights, as with transformers' sdpa masks, where torch would average uniformly over the
masked keys. So no masked key is ever drawn (NOTE[DIFF] from torch, for those rows only). ``dropout_p`` is for
training: in eval mode it is ignored with a warning (NOTE[DIFF]: torch would drop at inference; SA is the only
randomness wanted), in training mode it raises.

**Which modules.** A module whose class's ``forward`` calls ``scaled_dot_product_attention`` is patched this way.
The call is found in the forward's *code object*, not its source (:func:`calls_sdpa`): a name
``scaled_dot_product_attention`` among the names it loads, or a global / closure variable bound to torch's function
under any name, also in the functions of its own module that it calls (one level). So a class defined through
``exec``, in a script fed on standard input or shipped as bytecode only is found as well as one in a file. A
``fused_attn`` flag (timm's ``Attention``, ``AttentionPoolLatent``, ...) is forced on during the patched forward,
since timm's explicit path is the same attention computed by hand. What no code object says (SDPA reached only
through an attribute set at run time, e.g. ``self.attn_fn = F.scaled_dot_product_attention``) is not found; such a
module, when its class name says attention, is reported unpatched (:class:`~stochattn.patch.SACoverageWarning`);
:func:`register_sdpa_caller` puts its class on this path.

**Hugging Face transformers (5.x).** Every attention module picks its function per call:
``ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)``. "sdpa" gives
``integrations.sdpa_attention.sdpa_attention_forward``, which calls SDPA; "eager" gives the *default argument*, a
private ``eager_attention_forward`` copied into each modeling file, which computes the softmax by hand. So the
registry alone cannot reach eager (its function is not in the registry), and wrapping the hundreds of per-file
copies would mean re-implementing their variants. The hook chosen: a module whose forward loads the registry is
patched like any SDPA module, and while a patch with such a module is applied ``AttentionInterface.get_interface``
is wrapped: inside a Hugging Face frame (the innermost :class:`SAMode` on this thread's stack) it returns
transformers' own ``sdpa_attention_forward`` for "eager", "sdpa" and None, elsewhere the registry's answer. That
function handles GQA (``repeat_kv``, ``enable_gqa``, ``pack_gqa``), ``is_causal``, cache cropping and position
bias, and its SDPA call lands in the frame; eager's 4-D additive masks are valid SDPA masks, and transformers tests
eager against sdpa. Other implementations (flash, flex, paged) are left alone, make no draw and so warn. A family
whose models all declare ``_supports_sdpa = False`` is patched only when its eager function is a copy of BERT's or
Llama's (:func:`_routable`), else reported as unpatched; eager-only features refuse loudly (softcapping raises in
transformers' sdpa function, sinks raise here). Under SA the attention weights are not returned (None, as with
sdpa). Rejected: switching ``config._attn_implementation`` (shared by every layer, often by other models, and read
when masks are built).
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
import types
import warnings
from typing import Any, Callable, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from .extras import requires
from .patch import _DETECTORS, _REGISTRY, AttentionAdapter, SAState


#: torch's SDPA: ``F.scaled_dot_product_attention`` is this builtin, which consults the function modes on every call
TORCH_SDPA: Callable[..., Tensor] = torch._C._nn.scaled_dot_product_attention


class SAMode(TorchFunctionMode):
    """The frame of one patched forward: SDPA calls made while it is on this thread's function-mode stack are
    computed with SA at ``state``'s nu; ``hf`` routes Hugging Face's attention registry to its sdpa function."""

    def __init__(self, module: nn.Module, state: SAState, hf: bool = False) -> None:
        super().__init__()
        self.module, self.state, self.hf = module, state, hf

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if func is TORCH_SDPA and self.state.nu is not None:
            return _sa_sdpa(self, *args, **kwargs)
        return func(*args, **kwargs)


def sa_frame(module: nn.Module, state: SAState, hf: bool = False) -> SAMode:
    """SDPA calls made inside this block (on this thread) are computed with SA at ``state``'s nu."""
    return SAMode(module, state, hf)


def _innermost_frame() -> Optional[SAMode]:
    """The innermost :class:`SAMode` on this thread's function-mode stack (None outside every patched forward)."""
    for mode in reversed(torch.overrides._get_current_function_mode_stack()):
        if isinstance(mode, SAMode):
            return mode
    return None


def _sa_sdpa(
    frame: SAMode,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
) -> Tensor:
    """An SDPA call inside ``frame`` (same signature as torch's), computed with SA at the frame's nu."""
    if dropout_p > 0.0:
        if frame.module.training:
            raise NotImplementedError(
                f"stochastic attention through SDPA runs at inference, but {type(frame.module).__qualname__} is in "
                f"training mode with attention dropout {dropout_p}: call model.eval()"
            )
        warnings.warn(
            f"{type(frame.module).__qualname__} calls SDPA with dropout_p={dropout_p} in eval mode; stochastic "
            "attention ignores it", stacklevel=3,
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
# Hugging Face: route eager and sdpa to transformers' sdpa function inside an HF frame
# --------------------------------------------------------------------------------------------------------------
_HF_LOCK = threading.Lock()
_hf_users = 0
_hf_get_interface: Optional[Callable[..., Callable]] = None


def _hf_sa_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask, **kwargs):
    """transformers' ``sdpa_attention_forward`` (its SDPA call then reaches the frame)."""
    with requires("hf"):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
    if kwargs.get("s_aux") is not None or kwargs.get("sinks") is not None:
        raise NotImplementedError(f"stochastic attention does not support attention sinks ({type(module).__name__})")
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _get_interface(self: Any, attn_implementation: Optional[str], default: Callable) -> Callable:
    frame = _innermost_frame()
    if frame is not None and frame.hf and attn_implementation in (None, "eager", "sdpa"):
        return _hf_sa_attention
    return _hf_get_interface(self, attn_implementation, default)


def _hf_acquire() -> None:
    """Wrap ``AttentionInterface.get_interface`` while any patch with a Hugging Face module is applied (counted)."""
    global _hf_users, _hf_get_interface
    with requires("hf"):
        from transformers.modeling_utils import AttentionInterface
    with _HF_LOCK:
        if _hf_users == 0:
            _hf_get_interface = AttentionInterface.get_interface
            AttentionInterface.get_interface = _get_interface
        _hf_users += 1


def _hf_release() -> None:
    global _hf_users, _hf_get_interface
    with requires("hf"):
        from transformers.modeling_utils import AttentionInterface
    with _HF_LOCK:
        _hf_users -= 1
        if _hf_users == 0:
            if _hf_get_interface is not None:
                AttentionInterface.get_interface = _hf_get_interface
            _hf_get_interface = None


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
HF_ADAPTER = AttentionAdapter(forward=_hf_forward, n_heads=n_heads, calls_original=True, kind="transformers",
                              acquire=_hf_acquire, release=_hf_release)


def _is_torch_sdpa(obj: Any) -> bool:
    return obj is TORCH_SDPA or obj is F.scaled_dot_product_attention


def _names(code: types.CodeType) -> set:
    """The global / attribute names a code object loads, its nested code objects (lambdas, comprehensions)
    included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def calls_sdpa(fn: Any, _depth: int = 1) -> bool:
    """Whether ``fn``'s code calls ``scaled_dot_product_attention``, read from its code object (no source needed):
    the name among the names it loads (``F.``, ``torch.nn.functional.``, ``torch._C._nn.``), a global or closure
    variable bound to torch's function under any name, or (``_depth`` levels) a Python function of ``fn``'s own
    module that it loads by name and that does so."""
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    names = _names(code)
    if "scaled_dot_product_attention" in names:
        return True
    cells = [c.cell_contents for c in fn.__closure__ or () if c.cell_contents is not None] if fn.__closure__ else []
    if any(_is_torch_sdpa(c) for c in cells):
        return True
    scope = getattr(fn, "__globals__", {})
    bound = [scope[n] for n in names if n in scope]
    if any(_is_torch_sdpa(b) for b in bound):
        return True
    if _depth > 0:
        own = getattr(fn, "__module__", None)
        return any(isinstance(b, types.FunctionType) and b.__module__ == own and calls_sdpa(b, _depth - 1)
                   for b in bound + cells)  # fmt: skip
    return False


def _code(fn: Callable) -> tuple:
    code = fn.__code__
    return code.co_code, code.co_consts, code.co_names


@functools.cache
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


def register_sdpa_caller(cls: type) -> type:
    """Patch ``cls`` (and its subclasses) on the SDPA path although its code does not show the call (SDPA reached
    through an attribute set at run time, or a function of another module): its forward then runs inside a frame
    like any detected SDPA caller. Usable as a class decorator."""
    _REGISTRY[cls] = SDPA_ADAPTER
    return cls


@functools.cache
def _forward_calls_sdpa(forward: Callable) -> bool:
    return calls_sdpa(forward)


def detect(cls: type) -> Union[None, AttentionAdapter]:
    """HF_ADAPTER for a forward loading transformers' attention registry (when :func:`_routable`), SDPA_ADAPTER for
    one calling ``scaled_dot_product_attention`` (:func:`calls_sdpa`), else None. Read from the forward's code
    object, so a class whose source cannot be read (``exec``, standard input, bytecode only) is decided the same."""
    forward = getattr(cls, "forward", None)
    if forward is None or forward is nn.Module.forward:
        return None
    forward = inspect.unwrap(forward)  # decorators (functools.wraps): the function they wrap
    if getattr(forward, "__code__", None) is None:
        return None
    if "ALL_ATTENTION_FUNCTIONS" in _names(forward.__code__):
        return HF_ADAPTER if _routable(cls) else None
    return SDPA_ADAPTER if _forward_calls_sdpa(forward) else None


_DETECTORS.append(detect)
