"""Enable stochastic attention on any model without retraining, and draw predictive ensembles.

The model is left untouched except for the ``forward`` of its attention modules, which is replaced on the
instance (never on the class) by an adapter that computes the same attention with stochastic weights on the
masked-softmax probabilities (:func:`stochattn.attention.stochastic_attention`, or
:func:`~stochattn.attention.stochastic_weights` where the weights themselves are needed). Removing the patch deletes the
instance attribute, so the original bound method is back and outputs are bit-identical to the unpatched model.
With ``nu=None`` an adapter calls the original forward, so a deterministic layer is bit-identical too.

Which modules are attention, and how each is run with SA, is decided per class (subclasses included):

* a small registry (:func:`register_attention`) of adapters: built in are ``rtdl_revisiting_models.MultiheadAttention``
  (FT-Transformer) and ``torch.nn.MultiheadAttention`` (so ``nn.TransformerEncoder`` / ``Decoder`` too); TimesFM and
  ClimaX adapters register themselves the same way (``import stochattn.backbones.timesfm`` / ``.climax``). A
  registered adapter covers subclasses, except those that override ``forward`` when the adapter re-implements it;
* then detectors (:mod:`stochattn.sdpa`): a module whose forward calls ``F.scaled_dot_product_attention`` (timm, most
  hand-written transformers) or the Hugging Face attention registry runs its own forward with the SDPA calls made
  inside it computed with SA.

Nothing is silently left deterministic: :attr:`StochasticAttention.patched` / ``repr`` report what was patched,
attention-like modules that could not be patched warn (:class:`SACoverageWarning`; ``strict=True`` raises), as does a
patched module whose forward made no stochastic draw, and :func:`predictive_samples` warns when every pass is identical.

``nu`` may be given as
    * ``None`` or a positive int (numpy and 0-dim torch integers included): the same for every attention module;
    * a list with one entry per attention module (model order, see :func:`attention_modules`);
    * a mapping from module name pattern (``fnmatch`` glob on the qualified name, e.g. ``"*blocks.0.*"``) or
      module index (int) to a value; modules matched by no key stay deterministic; later keys override earlier;
    * and any per-module value may itself be a per-head sequence (``[4, None, 16, ...]``, one per head) or a
      1-D integer tensor of length n_heads (0 = deterministic head).
The paper uses one global ``nu``; per-layer / per-head values lift its stated limitation (§7).
"""

from __future__ import annotations

import fnmatch
import math
import numbers
import re
import sys
import threading
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import (
    _FUSED_CODE,
    Method,
    _call_seed,
    _sa_sdpa,
    call_generator,
    check_nu,
    device_stream,
    host_stream,
    is_device_stream,
    new_stream,
    stochastic_attention,
    stochastic_weights,
)

NuSpec = Union[None, int, Sequence, Mapping, Tensor]


class SACoverageWarning(UserWarning):
    """Stochastic attention does not reach part of the model (an unpatched attention-like module, a patched module
    that made no draw, or samples that are all identical)."""


def generator_on(
    generator: Optional[torch.Generator], device: torch.device, derived: Dict[str, torch.Generator]
) -> Optional[torch.Generator]:
    """``generator`` itself where it lives on ``device`` (or is None); otherwise a generator on ``device`` seeded
    once from ``generator`` and kept in ``derived``, so that a CPU generator (the one that also draws batches and
    seeds) gives reproducible draws for a model on a GPU."""
    if generator is None or generator.device == device:
        return generator
    key = str(device)
    if key not in derived:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
        derived[key] = torch.Generator(device=device).manual_seed(seed)
    return derived[key]


class _Call:
    """One patched forward in progress: whether it made a stochastic draw (an object created per call, so that a
    compiled forward records the draw without reading a counter that changes between calls)."""

    def __init__(self) -> None:
        self.drew = False


def _needs_grad(*tensors: Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


@dataclass
class SAState:
    """What one patched attention module needs at call time.

    Random numbers: every call draws from a generator seeded from the module's *stream* ``rng`` (an int64 CPU tensor
    ``[seed, offset]``, or a device stream, :meth:`StochasticAttention.streams_to`; the seed drawn from
    ``generator`` when the patch is made or the generator set, the offset advanced per call;
    :func:`stochattn.attention.call_generator`). The stream is an explicit input of SA's operators
    (``torch.ops.stochattn.sdpa`` / ``attend`` / ``weights``), so a ``torch.compile``'d forward, which cannot call a
    ``torch.Generator``, draws fresh weights on every call, and the same generator seed reproduces a run, compiled
    or not (both draw the same weights)."""

    nu: Union[None, int, Tensor]  # None, an int, or an int64 tensor of shape (n_heads, 1) (0 = deterministic head)
    generator: Optional[torch.Generator]
    method: Method
    derived: Dict[str, torch.Generator] = field(default_factory=dict)  # generators on other devices (shared)
    fused: Optional[bool] = None  # the fused Triton kernel on the SDPA path: None where it can run, True / False forced
    draws: int = 0  # stochastic draws made so far in eager calls (one per weights / attend / sdpa call)
    rng: Optional[Tensor] = None  # the stream [seed, offset]; drawn from ``generator`` on first use when not set
    call: Optional[_Call] = None  # the record of the patched forward in progress

    def _stream(self) -> Tensor:
        if self.rng is None:
            self.rng = new_stream(self.generator)[0]
        return self.rng

    def _drew(self) -> None:
        if self.call is not None:
            self.call.drew = True
        if not torch.compiler.is_compiling():
            self.draws += 1

    @staticmethod
    def _nu_args(nu: Union[int, Tensor]) -> tuple:
        return (0, nu) if isinstance(nu, Tensor) else (nu, None)

    def weights(self, probs: Tensor) -> Tensor:
        """probs (B, H, L, S) -> stochastic weights of the same shape (identity when nu is None)."""
        if self.nu is None:
            return probs
        self._drew()
        if torch.compiler.is_compiling() and not _needs_grad(probs):
            return torch.ops.stochattn.weights(probs, *self._nu_args(self.nu), self._stream(), self.method)
        gen = call_generator(self._stream(), probs.device)
        return stochastic_weights(probs, self.nu, generator=gen, method=self.method, validate=False)

    def attend(self, probs: Tensor, value: Tensor) -> Tensor:
        """probs (B, H, L, S), value (B, H, S, D) -> stochastic attention output (B, H, L, D)."""
        if self.nu is None:
            return probs @ value
        self._drew()
        if torch.compiler.is_compiling() and not _needs_grad(probs, value):
            return torch.ops.stochattn.attend(probs, value, *self._nu_args(self.nu), self._stream(), self.method)
        gen = call_generator(self._stream(), probs.device)
        return stochastic_attention(probs, value, self.nu, generator=gen, method=self.method)

    def sdpa(
        self, query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor], is_causal: bool,
        scale: Optional[float], enable_gqa: bool, nu: Union[int, Tensor],
    ) -> Tensor:
        """``F.scaled_dot_product_attention`` semantics (no dropout) with SA at ``nu`` (an int or a tensor
        broadcastable to (..., Hq, L)): query (..., Hq, L, E), key (..., Hk, S, E), value (..., Hk, S, Ev) ->
        (..., Hq, L, Ev). Explicit path on the CPU, the fused kernel on CUDA. Under ``torch.compile`` through the
        operator ``torch.ops.stochattn.sdpa``; in eager mode the function the operator wraps, called directly (the
        same draws: the operator's dispatch cost about 100 us of host time per call, which a launch-bound model such
        as TimesFM 2.5 pays at every layer, benchmarks/profile_sa.py)."""
        self._drew()
        if torch.compiler.is_compiling() and not _needs_grad(query, key, value):
            return torch.ops.stochattn.sdpa(query, key, value, attn_mask, is_causal, scale, enable_gqa,
                                            *self._nu_args(nu), self._stream(), self.method,
                                            _FUSED_CODE[self.fused])  # fmt: skip
        rng = self._stream()
        return _sa_sdpa(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa, nu=nu, generator=None,
                        method=self.method, fused=self.fused,
                        call_seed=rng if is_device_stream(rng) else _call_seed(rng))  # fmt: skip


@dataclass(frozen=True)
class AttentionAdapter:
    """How to run one attention module class with stochastic weights.

    ``forward(module, state, original_forward, *args, **kwargs)`` recomputes the module's forward with
    ``state.attend(probs, value)`` (or ``state.weights(probs)`` where the weights themselves are needed, e.g.
    under attention dropout) on its (B, H, L, S) attention probabilities. ``n_heads(module)`` gives H (None where
    unknown: per-head nu is then refused). ``calls_original``: the adapter runs ``original_forward`` (with a swapped
    attention function) rather than re-implementing it, so it also serves subclasses that override ``forward``.
    ``kind`` names the mechanism in reports; ``acquire`` / ``release`` (optional) set up and tear down what the
    adapter needs process-wide while a patch using it is applied.
    """

    forward: Callable[..., Any]
    n_heads: Callable[[nn.Module], Optional[int]]
    calls_original: bool = False
    kind: str = "adapter"
    #: called once per applied patch that has a module of this adapter, and again when the patch is removed
    acquire: Optional[Callable[[], None]] = None
    release: Optional[Callable[[], None]] = None


_REGISTRY: Dict[type, AttentionAdapter] = {}
#: Fallbacks tried in order for classes with no registered adapter: class -> adapter or None (see stochattn.sdpa).
_DETECTORS: List[Callable[[type], Optional[AttentionAdapter]]] = []


def register_attention(
    module_type: type, *, n_heads: Callable[[nn.Module], Optional[int]], calls_original: bool = False
):
    """Decorator registering ``forward(module, state, original_forward, *args, **kwargs)`` for a module class (and
    its subclasses; see :class:`AttentionAdapter` for ``calls_original``)."""

    def decorate(forward: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY[module_type] = AttentionAdapter(forward=forward, n_heads=n_heads, calls_original=calls_original)
        return forward

    return decorate


def adapter_for(module: nn.Module) -> Optional[AttentionAdapter]:
    """The adapter that runs ``module`` with SA: the nearest registered class in its MRO (skipped when the module's
    class overrides ``forward`` and the adapter re-implements it), else the first detector that accepts the class."""
    cls = type(module)
    for base in cls.__mro__:
        adapter = _REGISTRY.get(base)
        if adapter is not None:
            if base is cls or adapter.calls_original or cls.forward is base.forward:
                return adapter
            break
    for detect in _DETECTORS:
        adapter = detect(cls)
        if adapter is not None:
            return adapter
    return None


def _named_modules(model: nn.Module) -> Iterator[tuple]:
    """``model.named_modules()`` with the wrapper of ``torch.compile`` (``OptimizedModule._orig_mod``) left out of
    the names, so a compiled model and its original report (and match ``nu`` patterns) under the same names."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # none exists before torch.compile is first used
    wrapper = getattr(eval_frame, "OptimizedModule", ())
    for name, module in model.named_modules():
        if isinstance(module, wrapper):
            continue
        yield re.sub(r"(^|\.)_orig_mod(\.|$)", lambda m: m.group(1) if m.group(2) else "", name).strip("."), module


def attention_modules(model: nn.Module) -> Dict[str, nn.Module]:
    """Qualified name -> module, for every module SA can patch (:func:`adapter_for`), in model order. A module
    compiled with ``torch.compile`` (an ``OptimizedModule``) is seen through: its names are the original model's."""
    return {name: m for name, m in _named_modules(model) if adapter_for(m) is not None}


_ATTENTION_LIKE = re.compile(r"attention|attn", re.IGNORECASE)


def unpatched_attention(model: nn.Module, patched: Mapping[str, nn.Module]) -> Dict[str, str]:
    """Qualified name -> class of the attention-like modules (a class in the MRO named "...Attention..."/"...Attn...")
    that SA cannot patch and that neither contain nor sit inside a patched module (a wrapper such as Hugging Face's
    ``BertAttention`` around the patched ``BertSelfAttention`` is covered)."""
    names = list(patched)
    out = {}
    for name, module in _named_modules(model):
        if name in patched or not any(_ATTENTION_LIKE.search(c.__name__) for c in type(module).__mro__):
            continue
        inside = any(p == "" or name.startswith(p + ".") for p in names)
        around = any(name == "" or p.startswith(name + ".") for p in names)
        if not inside and not around:
            out[name] = type(module).__module__ + "." + type(module).__qualname__
    return out


def _no_attention_message(unpatched: Mapping[str, str]) -> str:
    known = ", ".join(t.__module__ + "." + t.__qualname__ for t in _REGISTRY)
    found = f" Attention-like modules found but not supported: {dict(unpatched)}." if unpatched else ""
    return (
        "the model has no supported attention module. Supported: modules whose forward calls "
        "torch.nn.functional.scaled_dot_product_attention (e.g. timm), Hugging Face transformers attention "
        "(eager and sdpa), and the registered classes and their subclasses "
        f"({known}); TimesFM and ClimaX register theirs on `import stochattn.backbones.timesfm` / "
        "`import stochattn.backbones.climax`. Register any other class with "
        f"stochattn.patch.register_attention(cls, n_heads=...).{found}"
    )


# --------------------------------------------------------------------------------------------------------------
# nu specification
# --------------------------------------------------------------------------------------------------------------
def _scalar(value: Any) -> Any:
    """numpy scalars / 0-d arrays and 0-dim tensors -> Python scalars; anything else unchanged."""
    if isinstance(value, (Tensor, np.ndarray)) and value.ndim == 0 or isinstance(value, np.generic):
        return value.item()
    return value


def _per_module_value(value: Any, n_heads: Optional[int], where: str) -> Union[None, int, Tensor]:
    """A module's nu: None, int, or per-head (n_heads, 1) int64 tensor (0 = deterministic head)."""
    value = _scalar(value)
    if value is None or isinstance(value, numbers.Real) and not isinstance(value, bool):
        return check_nu(value, name=f"nu[{where}]")
    if isinstance(value, (Tensor, np.ndarray)) or isinstance(value, Sequence) and not isinstance(value, str):
        if isinstance(value, (Tensor, np.ndarray)):
            heads = [None if h == 0 else h for h in value.tolist()]  # 0 in a tensor = deterministic head
        else:
            heads = list(value)
        if n_heads is None:
            raise ValueError(f"nu[{where}] is per-head but the module's head count is unknown")
        if len(heads) != n_heads:
            raise ValueError(f"nu[{where}] has {len(heads)} per-head values but the module has {n_heads} heads")
        checked = [check_nu(_scalar(h), name=f"nu[{where}][head {i}]") for i, h in enumerate(heads)]
        if all(h is None for h in checked):
            return None
        if len(set(checked)) == 1:
            return checked[0]
        return torch.tensor([0 if h is None else h for h in checked], dtype=torch.int64).view(n_heads, 1)
    raise TypeError(f"nu[{where}] must be None, an int, or a per-head sequence/tensor; got {type(value).__name__}")


def resolve_nu(model_modules: Mapping[str, nn.Module], nu: NuSpec) -> Dict[str, Union[None, int, Tensor]]:
    """Map every attention module name to its nu (see the module docstring for the accepted forms)."""
    names = list(model_modules)
    heads = {name: adapter_for(m).n_heads(m) for name, m in model_modules.items()}
    nu = _scalar(nu)
    if isinstance(nu, Mapping):
        resolved: Dict[str, Any] = {name: None for name in names}
        for key, value in nu.items():
            key = _scalar(key)
            if isinstance(key, int) and not isinstance(key, bool):
                if not -len(names) <= key < len(names):
                    raise ValueError(f"nu key {key} is out of range: the model has {len(names)} attention modules")
                matched = [names[key]]
            elif isinstance(key, str):
                matched = [n for n in names if fnmatch.fnmatchcase(n, key)]
                if not matched:
                    raise ValueError(f"nu key {key!r} matches no attention module; known modules: {names}")
            else:
                raise TypeError(f"nu keys must be module name patterns (str) or indices (int), got {key!r}")
            for name in matched:
                resolved[name] = _per_module_value(value, heads[name], name)
        return resolved
    if isinstance(nu, Sequence) and not isinstance(nu, str):
        if len(nu) != len(names):
            raise ValueError(f"nu has {len(nu)} per-layer values but the model has {len(names)} attention modules")
        return {name: _per_module_value(v, heads[name], name) for name, v in zip(names, nu)}
    if isinstance(nu, (Tensor, np.ndarray)):
        raise TypeError("a tensor nu is per-head: give it per module, e.g. {'*': tensor}")
    value = check_nu(nu)
    return {name: value for name in names}


# --------------------------------------------------------------------------------------------------------------
# torch's MHA fast path, off while any patch with an nn.MultiheadAttention is applied (reference-counted)
# --------------------------------------------------------------------------------------------------------------
_FASTPATH_LOCK = threading.Lock()
_fastpath_users = 0
_fastpath_before: Optional[bool] = None


def _fastpath_off() -> None:
    """nn.TransformerEncoderLayer's inference fast path calls a fused kernel instead of self_attn.forward: turn it off
    while any patch needs it; the first user saves the setting and the last one to leave restores it."""
    global _fastpath_users, _fastpath_before
    with _FASTPATH_LOCK:
        if _fastpath_users == 0:
            _fastpath_before = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(False)
        _fastpath_users += 1


def _fastpath_release() -> None:
    global _fastpath_users, _fastpath_before
    with _FASTPATH_LOCK:
        _fastpath_users -= 1
        if _fastpath_users == 0 and _fastpath_before is not None:
            torch.backends.mha.set_fastpath_enabled(_fastpath_before)
            _fastpath_before = None


# --------------------------------------------------------------------------------------------------------------
# the patch
# --------------------------------------------------------------------------------------------------------------
class StochasticAttention:
    """Stochastic attention enabled on ``model`` until :meth:`remove` (or the end of a ``with`` block).

    Example::

        with StochasticAttention(model, nu=8, generator=torch.Generator().manual_seed(0)):
            samples = predictive_samples(model, x, num_samples=32)   # (32, B, ...)

    ``strict=True`` raises (``RuntimeError``) where a :class:`SACoverageWarning` would be issued: attention-like
    modules left unpatched (at construction), a patched module with nu set whose forward made no draw (per call).
    ``fused``: modules on the SDPA path (Hugging Face, timm, any caller of ``F.scaled_dot_product_attention``) run
    the fused Triton kernel (:mod:`stochattn.triton_sa`) where it can (``None``: CUDA, fp32 / bf16 / fp16, nu per
    module or head), always (``True``: an error where it cannot) or never (``False``). Adapters that form the
    probabilities themselves (``nn.MultiheadAttention``, rtdl, the TimesFM / ClimaX adapters) keep the explicit path.

    ``torch.compile``: patch then compile, or compile then patch (``torch.compile(model)``, ``model.compile()``, a
    compiled ``forward`` as TimesFM's loader makes): a patched forward is an instance attribute, which Dynamo guards
    on, so applying or removing the patch recompiles; SA runs as registered operators (``torch.ops.stochattn.*``)
    whose random stream is a graph input, so every call of the compiled graph draws fresh weights, the same ones as
    eager calls from the same generator seed. A new ``nu`` (an int) recompiles too. Names are the original model's
    (``torch.compile``'s ``_orig_mod`` is left out).
    """

    def __init__(
        self,
        model: nn.Module,
        nu: NuSpec,
        *,
        generator: Optional[torch.Generator] = None,
        method: Method = "auto",
        strict: bool = False,
        fused: Optional[bool] = None,
    ) -> None:
        self.model = model
        self.fused = fused
        self.strict = strict
        self.modules = attention_modules(model)
        self.unpatched = unpatched_attention(model, self.modules)
        if not self.modules:
            raise ValueError(_no_attention_message(self.unpatched))
        if self.unpatched:
            self._coverage(
                f"stochastic attention cannot patch {len(self.unpatched)} attention-like module(s), which stay "
                f"deterministic: {self.unpatched}; register their class with stochattn.patch.register_attention"
            )
        self.generator = generator
        self.method = method
        self._derived: Dict[str, torch.Generator] = {}  # one stream per other device, shared by every module
        self._states: Dict[str, SAState] = {}
        self._applied = False
        self._fastpath = any(isinstance(m, nn.MultiheadAttention) for m in self.modules.values())
        self._silent: set = set()  # modules already reported for a forward without a draw
        self.set_nu(nu)
        self._seed_streams()
        self.apply()

    def _seed_streams(self) -> None:
        """One random stream per module (:class:`SAState`), the seeds drawn from the generator in model order."""
        for state, rng in zip(self._states.values(), new_stream(self.generator, len(self._states))):
            state.rng = rng

    @property
    def patched(self) -> Dict[str, str]:
        """Qualified name -> how it is run with SA (``adapter: <class>``, ``sdpa: <class>``, ...)."""
        return {name: f"{adapter_for(m).kind}: {type(m).__qualname__}" for name, m in self.modules.items()}

    def __repr__(self) -> str:
        nus = sorted({str(v.view(-1).tolist()) if isinstance(v, Tensor) else str(v) for v in self.nu.values()})
        return (
            f"StochasticAttention({type(self.model).__name__}, applied={self._applied}, nu={{{', '.join(nus)}}}, "
            f"patched={len(self.modules)}: {self.patched}, unpatched={len(self.unpatched)}: {self.unpatched})"
        )

    def _coverage(self, message: str) -> None:
        if self.strict:
            raise RuntimeError(message)
        warnings.warn(message, SACoverageWarning, stacklevel=3)

    def set_nu(self, nu: NuSpec) -> None:
        """Change nu (any accepted form) without re-patching."""
        resolved = resolve_nu(self.modules, nu)
        for name, value in resolved.items():
            if name in self._states:
                self._states[name].nu = value
            else:
                self._states[name] = SAState(nu=value, generator=self.generator, method=self.method,
                                              derived=self._derived, fused=self.fused)

    def set_generator(self, generator: Optional[torch.Generator]) -> None:
        """Draw from ``generator`` from now on (every module; streams derived on other devices start anew)."""
        self.generator = generator
        self._derived.clear()
        for state in self._states.values():
            state.generator = generator
        self._seed_streams()

    def streams_to(self, device: Union[str, torch.device]) -> None:
        """Keep every module's random stream on ``device`` (a CUDA device: :func:`stochattn.attention.device_stream`;
        "cpu": host streams), going on with the same draws. On a CUDA device the fused kernel's path takes each
        call's seed on the device, so a CUDA graph captured around the patched forward (after a warm-up call that
        compiles and tunes the kernels) draws fresh weights at every replay; paths that draw through a
        ``torch.Generator`` read the stream through the host (a synchronisation, which capture refuses). Under
        ``torch.compile(mode="reduce-overhead")`` each stream is a static input that the graph advances.
        :meth:`set_generator` makes host streams again."""
        device = torch.device(device)
        for state in self._states.values():
            rng = state._stream()
            state.rng = host_stream(rng) if device.type == "cpu" else device_stream(rng, device)
            if device.type == "cuda":  # torch.compile(mode="reduce-overhead"): a fixed address its graphs update
                torch._dynamo.mark_static_address(state.rng)

    @property
    def nu(self) -> Dict[str, Union[None, int, Tensor]]:
        """Current nu per attention module."""
        return {name: s.nu for name, s in self._states.items()}

    def _no_draw(self, name: str) -> None:
        if name not in self._silent:
            self._silent.add(name)
            self._coverage(
                f"attention module {name!r} ({type(self.modules[name]).__qualname__}) has nu set but its forward made "
                "no stochastic draw (e.g. an attention implementation other than eager/sdpa, or a code path that "
                "bypasses the patched attention): its output is deterministic"
            )

    def apply(self) -> None:
        if self._applied:
            return
        for name, module in self.modules.items():
            if "forward" in module.__dict__:
                raise RuntimeError(f"attention module {name!r} already has a patched forward (nested patch?)")
        for name, module in self.modules.items():
            adapter = adapter_for(module)
            state = self._states[name]
            original = type(module).forward.__get__(module)

            def patched(self_module, *args, _adapter=adapter, _state=state, _original=original, _name=name, **kwargs):
                if _state.nu is None:
                    return _original(*args, **kwargs)
                # A record made for this call, marked by a draw traced by torch.compile (here, or in a compiled frame
                # below an eager one); eager draws also count on the module's counter, never read while compiling
                # (a guard on it would recompile every call). Other threads' draws can only hide a missing one.
                before = None if torch.compiler.is_compiling() else _state.draws
                call = _state.call = _Call()
                try:
                    out = _adapter.forward(self_module, _state, _original, *args, **kwargs)
                finally:
                    _state.call = None
                if not (call.drew or before is not None and _state.draws != before):
                    self._no_draw(_name)
                return out

            module.forward = types.MethodType(patched, module)
        self._hooks = [a for a in {adapter_for(m): None for m in self.modules.values()} if a.acquire is not None]
        for adapter in self._hooks:
            adapter.acquire()
        if self._fastpath:
            _fastpath_off()
        self._applied = True

    def remove(self) -> None:
        """Restore every attention module's original forward."""
        for module in self.modules.values():
            module.__dict__.pop("forward", None)
        if self._applied:
            for adapter in self._hooks:
                adapter.release()
            if self._fastpath:
                _fastpath_release()
        self._applied = False

    def __enter__(self) -> "StochasticAttention":  # noqa: UP037 - keeps the code hash
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


# --------------------------------------------------------------------------------------------------------------
# predictive sampling
# --------------------------------------------------------------------------------------------------------------
#: Inputs per call for ``max_rows="auto"`` on the CPU. Folding more passes into one batch was measured *slower* on
#: the CPU (FT-Transformer, 32 passes of 256 inputs: 4.2 s folded into one call, 3.6 s at 1024 rows, 3.2 s at 512,
#: 3.2 s for 32 separate passes; benchmarks/bench_attention.py), so the CPU default keeps calls cache-sized; on a
#: GPU everything is folded into one call.
AUTO_CPU_ROWS = 512


def _tile(value: Any, times: int) -> Any:
    if isinstance(value, Tensor):
        return value.repeat(times, *([1] * (value.dim() - 1)))
    return value


@torch.no_grad()
def predictive_samples(
    fn: Callable[..., Tensor],
    *inputs: Any,
    num_samples: int,
    max_rows: Union[None, int, str] = "auto",
    progress: bool = False,
) -> Tensor:
    """Draw ``num_samples`` stochastic forward passes of ``fn`` (a model with SA, dropout, HSA, ... enabled).

    Every tensor in ``inputs`` has the batch on dim 0 (B, ...); non-tensors are passed unchanged. The passes are
    folded into the batch: a call sees a slice of at most ``max_rows`` inputs tiled ``m`` times (sample-major),
    with ``m`` as large as ``max_rows`` allows (everything in one call when ``max_rows`` is None). Every row of a
    folded batch samples independently, so the result equals ``num_samples`` separate passes in law.
    ``max_rows="auto"``: everything in one call on a GPU, :data:`AUTO_CPU_ROWS` inputs per call on the CPU.

    Returns: (num_samples, B, ...) tensor. Warns (:class:`SACoverageWarning`) when every pass is identical.
    """
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
    first = next((x for x in inputs if isinstance(x, Tensor)), None)
    if first is None or first.dim() == 0 or first.shape[0] < 1:
        raise ValueError("inputs must contain at least one tensor with the batch (>= 1 row) on dim 0")
    batch = first.shape[0]
    if max_rows == "auto":
        max_rows = None if first.device.type == "cuda" else AUTO_CPU_ROWS
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1):
        raise ValueError(f"max_rows must be a positive integer, None or 'auto', got {max_rows!r}")
    rows = batch if max_rows is None else min(batch, max_rows)  # inputs per call
    per_call = num_samples if max_rows is None else max(1, min(num_samples, max_rows // rows))  # passes per call
    plan = [(s0, r0) for r0 in range(0, batch, rows) for s0 in range(0, num_samples, per_call)]
    if progress:
        from .progress import progress as show_progress

        plan = show_progress(plan, desc="predictive samples")
    out: Optional[Tensor] = None
    for s0, r0 in plan:
        m, r1 = min(per_call, num_samples - s0), min(r0 + rows, batch)
        y = fn(*(_tile(x[r0:r1], m) if isinstance(x, Tensor) else x for x in inputs))
        y = y.reshape(m, r1 - r0, *y.shape[1:])
        if out is None:
            out = y.new_empty(num_samples, batch, *y.shape[2:])
        out[s0 : s0 + m, r0:r1] = y
    assert out is not None
    if num_samples > 1 and torch.equal(out, out[:1].expand_as(out)):
        warnings.warn(
            f"predictive_samples: all {num_samples} passes are identical, so nothing in the model is stochastic "
            "(no StochasticAttention applied, nu=None everywhere, or dropout in eval mode)",
            SACoverageWarning,
            stacklevel=3,
        )
    return out


# --------------------------------------------------------------------------------------------------------------
# built-in adapters
# --------------------------------------------------------------------------------------------------------------
def _register_rtdl() -> None:
    try:
        from rtdl_revisiting_models import MultiheadAttention as RtdlAttention
    except ImportError:  # pragma: no cover - rtdl is a declared dependency
        return

    @register_attention(RtdlAttention, n_heads=lambda m: m._n_heads)
    def _rtdl_forward(module, state: SAState, original, x_q: Tensor, x_kv: Tensor) -> Tensor:
        # Same computation as rtdl_revisiting_models.MultiheadAttention.forward (v0.0.2) with SA inserted
        # between the softmax and the attention-probability dropout.
        q, k, v = module.W_q(x_q), module.W_k(x_kv), module.W_v(x_kv)
        if module.key_compression is not None:
            k = module.key_compression(k.transpose(1, 2)).transpose(1, 2)
            compress_v = module.key_compression if module.value_compression is None else module.value_compression
            v = compress_v(v.transpose(1, 2)).transpose(1, 2)
        batch_size, n_q_tokens = q.shape[0], q.shape[1]
        heads = module._n_heads
        d_head_key = k.shape[-1] // heads
        d_head_value = v.shape[-1] // heads
        q, k = module._reshape(q), module._reshape(k)
        probs = F.softmax(q @ k.transpose(1, 2) / math.sqrt(d_head_key), dim=-1)  # (B*H, L, S), batch-major
        probs = probs.view(batch_size, heads, *probs.shape[1:])
        v = module._reshape(v).view(batch_size, heads, -1, d_head_value)
        if module.dropout is not None and module.training:
            x = module.dropout(state.weights(probs)) @ v
        else:
            x = state.attend(probs, v)
        x = (
            x.reshape(batch_size, heads, n_q_tokens, d_head_value)
            .transpose(1, 2)
            .reshape(batch_size, n_q_tokens, heads * d_head_value)
        )
        return module.W_out(x) if module.W_out is not None else x


def _register_torch_mha() -> None:
    @register_attention(nn.MultiheadAttention, n_heads=lambda m: m.num_heads)
    def _mha_forward(
        module: nn.MultiheadAttention,
        state: SAState,
        original,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Optional[Tensor] = None,
        need_weights: bool = True,
        attn_mask: Optional[Tensor] = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ):
        # Re-expresses torch.nn.MultiheadAttention.forward (in-projection, masks, softmax, dropout, out-projection)
        # with SA after the masked softmax. bias_k/bias_v and add_zero_attn are not supported.
        if module.bias_k is not None or module.add_zero_attn:
            raise NotImplementedError("stochastic attention does not support bias_k/bias_v or add_zero_attn")
        self_attention = query is key and key is value
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif module.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        L, B, E = query.shape
        S = key.shape[0]
        H = module.num_heads
        Dh = E // H
        if module._qkv_same_embed_dim:
            w_q, w_k, w_v = module.in_proj_weight.chunk(3)
        else:
            w_q, w_k, w_v = module.q_proj_weight, module.k_proj_weight, module.v_proj_weight
        b_q, b_k, b_v = module.in_proj_bias.chunk(3) if module.in_proj_bias is not None else (None, None, None)
        if module._qkv_same_embed_dim and self_attention:  # one packed GEMM, as torch does
            q, k, v = F.linear(query, module.in_proj_weight, module.in_proj_bias).chunk(3, dim=-1)
        else:
            q, k, v = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        q = (q * (1.0 / math.sqrt(Dh))).view(L, B, H, Dh).permute(1, 2, 0, 3)  # (B, H, L, Dh), scaled
        k = k.reshape(S, B, H, Dh).permute(1, 2, 0, 3)
        v = v.reshape(S, B, H, Dh).permute(1, 2, 0, 3)
        if state.nu is not None and not need_weights and not (module.training and module.dropout > 0.0):
            # no weights asked for (nn.TransformerEncoderLayer, ClimaX's variable aggregation): the SDPA path, so
            # the fused kernel on CUDA (and CUDA graphs); on the CPU the draws of state.attend(probs, v), bit for bit
            # (the same logits, masks and generator; two float masks are summed before the logits, not after)
            mask, causal = _sdpa_mask(attn_mask, key_padding_mask, is_causal, B, L, S, query.device)
            out = state.sdpa(q, k, v, mask, causal, 1.0, False, state.nu)
            return _mha_output(module, out, L, B, E, unbatched), None
        logits = q @ k.transpose(-2, -1)  # (B, H, L, S)
        if attn_mask is None and is_causal:
            attn_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1)
        if attn_mask is not None:  # nn.MultiheadAttention: bool True = NOT allowed; float = additive
            if attn_mask.dim() == 3:
                attn_mask = attn_mask.view(B, H, L, S)
            logits = (
                logits.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else logits + attn_mask
            )
        if key_padding_mask is not None:
            kpm = key_padding_mask.view(B, 1, 1, S)
            logits = logits.masked_fill(kpm, float("-inf")) if kpm.dtype == torch.bool else logits + kpm
        probs = torch.softmax(logits, dim=-1)
        if attn_mask is not None or key_padding_mask is not None:
            probs = torch.nan_to_num(probs, nan=0.0)  # fully masked rows: softmax of all -inf
        weights = None
        if need_weights or module.training and module.dropout > 0.0:
            weights = state.weights(probs)
            dropped = F.dropout(weights, p=module.dropout) if module.training and module.dropout > 0.0 else weights
            out = dropped @ v
        else:
            out = state.attend(probs, v)
        out = _mha_output(module, out, L, B, E, unbatched)
        if weights is None:
            return out, None
        attn = weights.mean(dim=1) if average_attn_weights else weights
        return out, (attn.squeeze(0) if unbatched else attn)


def _sdpa_mask(attn_mask: Optional[Tensor], key_padding_mask: Optional[Tensor], is_causal: bool, B: int, L: int,
               S: int, device: torch.device) -> tuple:  # fmt: skip
    """nn.MultiheadAttention's masks (boolean True = *not* allowed, float additive; ``attn_mask`` (L, S) or
    (B H, L, S), ``key_padding_mask`` (B, S)) as one ``F.scaled_dot_product_attention`` mask broadcastable to
    (B, H, L, S) (boolean True = attend, or additive) and its ``is_causal``: -inf where either mask excludes a
    key, as the adapter's logits get it."""
    if attn_mask is None and key_padding_mask is None:
        return None, is_causal
    if attn_mask is None and is_causal:
        attn_mask = torch.ones(L, S, dtype=torch.bool, device=device).triu(1)
    if attn_mask is not None and attn_mask.dim() == 3:
        attn_mask = attn_mask.view(B, -1, L, S)
    kpm = None if key_padding_mask is None else key_padding_mask.view(B, 1, 1, S)
    masks = [m for m in (attn_mask, kpm) if m is not None]
    if all(m.dtype == torch.bool for m in masks):
        return ~(masks[0] | masks[1]) if len(masks) == 2 else ~masks[0], False
    dtype = next(m.dtype for m in masks if m.dtype != torch.bool)  # the float mask's (the adapter adds it as is)
    additive = [m if m.dtype != torch.bool else torch.zeros(m.shape, dtype=dtype, device=device).masked_fill(
        m, float("-inf")) for m in masks]  # fmt: skip
    return (additive[0] + additive[1] if len(additive) == 2 else additive[0]), False


def _mha_output(module: nn.MultiheadAttention, out: Tensor, L: int, B: int, E: int, unbatched: bool) -> Tensor:
    """Heads' outputs (B, H, L, Dh) -> the module's output: heads merged, out-projection, its batch layout."""
    out = module.out_proj(out.permute(2, 0, 1, 3).reshape(L, B, E))
    if unbatched:
        return out.squeeze(1)
    return out.transpose(0, 1) if module.batch_first else out


_register_rtdl()
_register_torch_mha()
from . import sdpa as _sdpa  # noqa: E402,F401  (registers the SDPA / Hugging Face detector; imports this module)


def iter_patched(model: nn.Module) -> Iterator[str]:
    """Names of the attention modules of ``model`` whose forward is currently patched."""
    for name, module in attention_modules(model).items():
        if "forward" in module.__dict__:
            yield name
