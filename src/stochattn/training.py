"""Shared supervised training loop for scalar regressors (FT-Transformer backbone and the weight-space baselines).

One loop, three ways to use it:

* plain training (AdamW with rtdl's parameter groups, the default),
* SWAG: SGD with momentum plus an ``on_epoch_end`` hook that collects weight moments,
* IVON: a ``step_fn`` that wraps the backward pass in ``optimizer.sampled_params(train=True)``.

A model here maps ``x: (B, n_features) -> (B,)`` (a trailing singleton output dimension is also accepted).
Everything random inside :func:`fit_regressor` (mini-batch order, dropout masks, IVON's weight noise) is driven by
the ``seed`` argument, so a CPU run is bit-for-bit repeatable; the global torch RNG of the caller is left untouched.

With ``checkpoint=<file>`` a fit saves its full state after its epochs (and on SIGUSR1 / SIGTERM, between two
training steps or two validation batches, before raising :class:`TrainingInterrupted`), and a rerun with the same
arguments continues from there and ends exactly where an uninterrupted run ends (bit for bit on the CPU); a completed
fit's final state stays there until the caller deletes it. Hooks that keep state (SWAG's moments) pass it as
``hook_state`` (:class:`HookState`) and are resumed with the rest.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import errno
import hashlib
import logging
import math
import os
import pickle
import re
import signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .io import save_torch
from .progress import progress as show_progress

__all__ = [
    "FitResult",
    "HookState",
    "LossFn",
    "StepFn",
    "TrainingClock",
    "TrainingInterrupted",
    "resumable",
    "saved_training_time",
    "as_generator",
    "as_tensor",
    "derive_seed",
    "eval_mode",
    "attribute_set",
    "fit_regressor",
    "model_device",
    "parameter_groups",
    "predict",
    "regression_output",
    "resolve_device",
    "seeded",
    "standard_step",
]

logger = logging.getLogger(__name__)

LossFn = Callable[[Tensor, Tensor], Tensor]
"""``loss(prediction: (B,), target: (B,)) -> scalar``, averaged over the batch (e.g. ``F.mse_loss``)."""


class StepFn(Protocol):
    """One optimisation step on one mini-batch; returns the (detached) mini-batch loss.

    The loop calls ``step_fn(model, optimizer, x_batch (B, F), y_batch (B,), loss_fn)`` with the model in train
    mode. :func:`standard_step` is the default; ``stochattn.baselines.ivon.ivon_step`` is the IVON variant.
    """

    def __call__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor, loss_fn: LossFn
    ) -> Tensor: ...


class HookState(Protocol):
    """The state of a fit's hooks (``step_fn``, ``on_epoch_end``) that a checkpoint must hold to resume them, e.g.
    SWAG's moments: ``state_dict()`` is saved with every checkpoint of :func:`fit_regressor` and
    ``load_state_dict(state)`` puts it back on resume. An optional attribute ``settings`` (compared by its
    ``repr``) joins the checkpoint's fingerprint, so that a file written with other hook settings is refused."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


# ---------------------------------------------------------------------------------------------------------------
# small helpers shared by the backbone and the baselines
# ---------------------------------------------------------------------------------------------------------------


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` -> CUDA when available, else CPU; strings are parsed."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device: cannot interpret {device!r} as a torch device") from exc


def model_device(model: nn.Module) -> torch.device:
    """Device of the model's first parameter or buffer (CPU for a model without either)."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


def as_tensor(a: Tensor | np.ndarray | Sequence[float], name: str, ndim: int) -> Tensor:
    """Convert array-like ``a`` to a float32 CPU-or-same-device tensor with exactly ``ndim`` dimensions."""
    if not isinstance(a, Tensor):
        try:
            a = torch.as_tensor(np.asarray(a, dtype=np.float32))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name}: expected a tensor or array of numbers, got {type(a).__name__}") from exc
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension(s), got shape {tuple(a.shape)}")
    if not a.is_floating_point():
        a = a.float()
    return a.to(torch.float32)


def as_generator(generator: torch.Generator | int) -> torch.Generator:
    """A ``torch.Generator`` as is, or a fresh CPU generator seeded with the given int."""
    if isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return torch.Generator().manual_seed(int(generator))
    raise TypeError(f"generator: expected torch.Generator or int seed, got {type(generator).__name__}")


def derive_seed(generator: torch.Generator | int) -> int:
    """An int seed: the int itself, or one draw from the generator (advancing it)."""
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return int(generator)
    gen = as_generator(generator)
    return int(torch.randint(0, 2**62, (1,), generator=gen, device=gen.device).item())


@contextlib.contextmanager
def seeded(seed: int, device: torch.device | None = None) -> Iterator[None]:
    """Seed torch's global RNG (CPU, plus ``device`` if it is CUDA) inside the block, restoring it afterwards.

    Used where a library draws from the global RNG and takes no generator (``nn.Dropout``, ``ivon.IVON``). On a
    CUDA ``device`` cuDNN is also held to deterministic algorithms (``cudnn.deterministic``, no ``benchmark``
    autotuning) inside the block; the other kernels are not (``torch.use_deterministic_algorithms`` would refuse
    some operations and slow others), so CUDA runs agree in law, not necessarily bit for bit.
    """
    devices = [device] if device is not None and device.type == "cuda" else []
    cudnn = torch.backends.cudnn
    flags = cudnn.deterministic, cudnn.benchmark
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(seed))
        try:
            if devices:
                cudnn.deterministic, cudnn.benchmark = True, False
            yield
        finally:
            cudnn.deterministic, cudnn.benchmark = flags


@contextlib.contextmanager
def attribute_set(modules: Sequence[nn.Module], name: str, value: Any) -> Iterator[None]:
    """Context in which attribute ``name`` of every module in ``modules`` is ``value`` (e.g. the generator an HSA
    or Contextual Dropout module draws its noise from); the previous values are restored afterwards."""
    previous = [getattr(m, name) for m in modules]
    try:
        for m in modules:
            setattr(m, name, value)
        yield
    finally:
        for m, old in zip(modules, previous):
            setattr(m, name, old)


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put every module in eval mode inside the block; restore each module's own ``training`` flag afterwards."""
    flags = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        yield model
    finally:
        for m, flag in flags:
            m.training = flag


def regression_output(out: Tensor, n: int, target_shape: tuple[int, ...] | None = ()) -> Tensor:
    """Check a model output for ``n`` rows: ``(n,)`` targets take ``(n,)`` or ``(n, 1)`` (returned as ``(n,)``);
    ``target_shape=(H, ...)`` requires ``(n, H, ...)`` (multi-output models, e.g. forecasts of ``H`` steps);
    ``None`` accepts any ``(n, ...)``, squeezing a single output column."""
    if out.ndim == 2 and out.shape[1] == 1 and not target_shape:
        out = out[:, 0]
    if target_shape is None:
        if out.ndim < 1 or out.shape[0] != n:
            raise ValueError(f"model: expected an output with {n} rows, got shape {tuple(out.shape)}")
        return out
    if out.shape != (n, *target_shape):
        want = f"({n},) or ({n}, 1)" if not target_shape else str((n, *target_shape))
        raise ValueError(f"model: expected output of shape {want}, got {tuple(out.shape)}")
    return out


@torch.no_grad()
def predict(
    model: nn.Module,
    x: Tensor | np.ndarray,
    batch_size: int = 1024,
    device: str | torch.device | None = None,
) -> Tensor:
    """Deterministic predictions ``(n,)`` (or ``(n, H, ...)`` for a multi-output model; float32, CPU) of ``model``
    on ``x: (n, n_features)``.

    Eval mode (dropout off) and no autograd inside; the modules' train/eval flags are restored afterwards.
    ``device=None`` runs on the model's current device; another device moves the model there (and leaves it).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    x = as_tensor(x, "x", 2)
    model.to(model_device(model) if device is None else resolve_device(device))
    outs: list[Tensor] = []
    _predict_batches(model, x, batch_size, outs)
    return torch.cat(outs) if outs else torch.empty(0)


@torch.no_grad()
def _predict_batches(model: nn.Module, x: Tensor, batch_size: int, outs: list[Tensor], stop: Sequence = ()) -> bool:
    """Append the eval-mode predictions (float32, CPU) of ``x``'s batches to ``outs``, from batch ``len(outs)`` on
    (a validation resumed after the batches it had done); return False, the rest left undone, as soon as ``stop``
    is non-empty before a batch (a stop request, :func:`_stop_requests`)."""
    dev = model_device(model)
    with eval_mode(model):
        for xb in x.split(batch_size)[len(outs) :]:
            if stop:
                return False
            xb = xb.to(dev)
            outs.append(regression_output(model(xb), len(xb), None).float().cpu())
    return True


def _target_ndim(y: Any) -> int:
    """1 for ``(n,)`` targets, 2 for ``(n, H)`` multi-output targets (anything else fails in ``as_tensor``)."""
    return 2 if getattr(y, "ndim", np.ndim(y)) == 2 else 1


def _rmse(pred: Tensor, y: Tensor) -> float:
    return float(torch.sqrt(torch.mean((pred.double() - y.double().cpu()) ** 2)))


def parameter_groups(
    model: nn.Module, weight_decay: float, param_names: Sequence[str] | None = None
) -> list[dict]:
    """Optimizer parameter groups with weight decay ``weight_decay``, only over trainable parameters.

    If the model has rtdl's ``make_parameter_groups()`` (``FTTransformer``, ``TabularRegressor``), its split is
    used: no weight decay on embeddings, normalisations and biases (as rtdl recommends for FT-Transformer).
    Otherwise all parameters share one group. ``param_names`` restricts the groups to the named parameters
    (e.g. LoRA adapters). Parameters are listed in ``model.named_parameters()`` order, so optimizers that
    flatten them (IVON) see a deterministic layout (rtdl builds its groups from a ``set``).
    """
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if param_names is not None:
        wanted = set(param_names)
        missing = wanted - {n for n, _ in model.named_parameters()}
        if missing:
            raise ValueError(f"param_names: not parameters of the model: {sorted(missing)[:5]}")
        named = [(n, p) for n, p in named if n in wanted]
    if not named:
        raise ValueError("model: no trainable parameters (requires_grad=True) to optimise")
    order = {id(p): i for i, (_, p) in enumerate(named)}
    no_decay: set[int] = set()
    if hasattr(model, "make_parameter_groups"):
        for group in model.make_parameter_groups():
            if group.get("weight_decay", None) == 0.0:
                no_decay.update(id(p) for p in group["params"])
    decay = [p for _, p in named if id(p) not in no_decay]
    zero = [p for _, p in named if id(p) in no_decay]
    groups = []
    if decay:
        groups.append({"params": sorted(decay, key=lambda p: order[id(p)]), "weight_decay": float(weight_decay)})
    if zero:
        groups.append({"params": sorted(zero, key=lambda p: order[id(p)]), "weight_decay": 0.0})
    return groups


def standard_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor, loss_fn: LossFn
) -> Tensor:
    """zero_grad -> forward -> loss -> backward -> ``optimizer.step()``; returns the detached loss."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(regression_output(model(x), len(x), tuple(y.shape[1:])), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


# ---------------------------------------------------------------------------------------------------------------
# the loop
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class FitResult:
    """Outcome of :func:`fit_regressor`.

    ``history`` holds per-epoch lists ``epoch`` (1-based), ``train_loss`` (mean mini-batch loss, weighted by batch
    size) and ``val_rmse`` (NaN without validation data). ``best_epoch`` is the epoch whose weights (and optimizer
    state) the model holds on return: the validation-RMSE minimiser, or the last epoch without validation data.
    """

    best_epoch: int
    best_val_rmse: float
    epochs_run: int
    stopped_early: bool
    seconds: float
    history: dict[str, list[float]]
    optimizer: torch.optim.Optimizer = field(repr=False)


def _snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    model_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return model_state, copy.deepcopy(optimizer.state_dict())


def _make_optimizer(
    optimizer: str | torch.optim.Optimizer | Callable[[nn.Module], torch.optim.Optimizer],
    model: nn.Module,
    lr: float,
    weight_decay: float,
) -> torch.optim.Optimizer:
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if isinstance(optimizer, str):
        if optimizer.lower() != "adamw":
            raise ValueError(f"optimizer: unknown name {optimizer!r}; use 'adamw', an Optimizer or a factory")
        if not lr > 0:
            raise ValueError(f"lr: must be > 0, got {lr}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay: must be >= 0, got {weight_decay}")
        return torch.optim.AdamW(parameter_groups(model, weight_decay), lr=lr, weight_decay=weight_decay)
    if callable(optimizer):
        opt = optimizer(model)
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"optimizer: the factory returned {type(opt).__name__}, not a torch Optimizer")
        return opt
    raise TypeError(f"optimizer: expected 'adamw', an Optimizer or a callable, got {type(optimizer).__name__}")


# ---------------------------------------------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------------------------------------------

_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGUSR1", "SIGTERM") if hasattr(signal, name))
_EARLY_SIGNALS = _STOP_SIGNALS[:1] if hasattr(signal, "SIGUSR1") else ()  # SLURM's warning before a time limit


_RESUMABLE: "contextvars.ContextVar[list | None]" = contextvars.ContextVar(  # noqa: UP037 - keeps the code hash
    "stochattn_resumable", default=None
)


@contextlib.contextmanager
def resumable(path: str | Path) -> Iterator[None]:
    """Within the block, every :func:`fit_regressor` call made without ``checkpoint`` (and, with ``on_epoch_end``,
    with ``hook_state``) checkpoints to ``<path stem>.<i><suffix>`` (``i``: the call's order in the block, so a
    rerun of the same code meets each fit's own file): for a job whose trainings happen deep inside a method (a grid
    candidate's IVON, HSA or Contextual Dropout fit, a SWAG phase) that a rerun after a kill should resume.

    A SIGUSR1 that arrives in the block between two fits (the early signal before a time limit, while the job loads
    data or samples) is kept: the next checkpointed fit saves and stops after its first step. Outside the fits it
    changes nothing else (a job that trains no more ends normally); SIGTERM keeps its own handler there."""
    state = [Path(path), 0, []]  # checkpoint stem, fits so far, stop requests received in the block
    token = _RESUMABLE.set(state)
    try:
        with _stop_requests(True, state[2], _EARLY_SIGNALS):
            yield
    finally:
        _RESUMABLE.reset(token)


_CLOCKS: "contextvars.ContextVar[tuple[TrainingClock, ...]]" = contextvars.ContextVar(  # noqa: UP037
    "stochattn_clocks", default=()
)


class TrainingClock:
    """The seconds a block of work took over every attempt of its job: the wall clock since the block began, plus
    the training that checkpointed fits run in it loaded from earlier attempts (:func:`fit_regressor`: a resumed
    fit's saved seconds, a completed fit's whole training). A plain clock around a resumed job times its last attempt
    only. ``with TrainingClock() as clock: ...``, then ``clock.seconds()`` (inside the block: so far)."""

    def __init__(self) -> None:
        self.loaded = 0.0  # training seconds the fits in the block loaded from earlier attempts
        self._start, self._end = time.perf_counter(), None

    def __enter__(self) -> TrainingClock:
        self._start, self._end = time.perf_counter(), None
        self._token = _CLOCKS.set((*_CLOCKS.get(), self))
        return self

    def __exit__(self, *exc: object) -> None:
        self._end = time.perf_counter()
        _CLOCKS.reset(self._token)

    def seconds(self) -> float:
        return (time.perf_counter() if self._end is None else self._end) - self._start + self.loaded


@contextlib.contextmanager
def not_training() -> Iterator[None]:
    """A block inside :class:`TrainingClock` blocks whose wall time they leave out: work done there for another run
    (e.g. the draws a SWAG search keeps for MultiSWAG's component 0), not this block's training."""
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        for clock in _CLOCKS.get():
            clock.loaded -= elapsed


def _loaded_from_earlier_attempts(seconds: float) -> None:
    """Credit the running :class:`TrainingClock` blocks with ``seconds`` of training loaded from a checkpoint."""
    for clock in _CLOCKS.get():
        clock.loaded += seconds


def saved_training_time(checkpoint: str | Path) -> tuple[float, float | None]:
    """``(wall seconds, CPU seconds)`` of the training held in a job's checkpoint files: ``checkpoint`` itself (a fit
    given it) and the ``<stem>.<i><suffix>`` files of the fits of a :func:`resumable` block on it. A fit's file holds
    its clocks so far, over all the attempts that ran it (:func:`fit_regressor` continues them on a resume), or, once
    the fit completed, the whole fit's. Read before a job trains, this is the training its earlier attempts saved;
    ``(0.0, 0.0)`` where there is none. CPU seconds: the process's CPU time in the fits (every thread); None where a
    file has none (written before 2026-12-05). A file that cannot be read counts 0 (the fit sets it aside and starts
    afresh)."""
    path = Path(checkpoint)
    numbered = re.compile(rf"{re.escape(path.stem)}\.\d+{re.escape(path.suffix)}")
    files = [path, *sorted(p for p in path.parent.glob(f"*{path.suffix}") if numbered.fullmatch(p.name))]
    wall, cpu = 0.0, 0.0
    for file in files:
        if not file.is_file():
            continue
        try:  # mmap: only the few bytes read are loaded, not the saved model
            state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
            wall += float(state["result"]["seconds"] if state.get("completed") else state["seconds"])
        except (EOFError, RuntimeError, OSError, KeyError, TypeError, pickle.UnpicklingError, UnicodeDecodeError):
            continue
        cpu = None if cpu is None or state.get("cpu_seconds") is None else cpu + float(state["cpu_seconds"])
    return wall, cpu


def _ambient_checkpoint() -> Path | None:
    state = _RESUMABLE.get()
    if state is None:
        return None
    path, i, _ = state
    state[1] += 1
    return path.with_name(f"{path.stem}.{i}{path.suffix}")


class TrainingInterrupted(Exception):
    """A checkpointed :func:`fit_regressor` received SIGUSR1 or SIGTERM: its state is saved in ``checkpoint`` and
    the same call, rerun, continues from there (the job should exit non-zero so that it is resubmitted)."""

    def __init__(self, checkpoint: Path, signum: int, epoch: int, step: int, validated: int | None = None):
        self.checkpoint, self.signum, self.epoch, self.step = checkpoint, signum, epoch, step
        self.validated = validated  # validation batches done, when the signal came during the validation
        name = signal.Signals(signum).name
        where = f"at epoch {epoch} step {step}" if validated is None else (
            f"in the validation of epoch {epoch} after {validated} batches")  # fmt: skip
        super().__init__(f"received {name} {where}: state saved to {checkpoint}")


@contextlib.contextmanager
def _stop_requests(enabled: bool, received: list[int] | None = None,
                   signals: Sequence[int] = _STOP_SIGNALS) -> Iterator[list[int]]:  # fmt: skip
    """Yield a list (``received``, else a new one) to which ``signals`` (SIGUSR1 / SIGTERM) append their number
    instead of acting (only when ``enabled`` and in the main thread, where Python delivers signals); the previous
    handlers are restored afterwards."""
    received = [] if received is None else received
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.getsignal(s) for s in signals}
    try:
        for s in signals:
            signal.signal(s, lambda signum, frame: received.append(signum))
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)


def _digest(tensors: Iterable[Tensor]) -> str:
    """SHA-256 over the dtypes, shapes and bytes of ``tensors``."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def _name(fn: Any) -> str:
    """Module-qualified name of a function, or of a callable object's class."""
    fn = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(fn, '__module__', '')}.{fn.__qualname__}"


_SAVE_SHARE: float | None = 0.1
"""At most about this share of a fit's time goes to the saves at epoch ends (:meth:`_Checkpoint.due`): every epoch
while a save is quick next to an epoch, less often where it is not (a SWAG phase of a few steps per epoch saving a
rank-20 posterior, ~90 MB at the paper's FT-Transformer); ``None``: every epoch. The saves on a signal and at the end
are always made."""


class _Checkpoint:
    """The resumable state of one :func:`fit_regressor` call in the file ``path``, tagged with ``fingerprint`` (the
    call's settings, model layout and initial weights, data digest) so that a foreign file is refused."""

    def __init__(self, path: str | Path, fingerprint: dict[str, Any]):
        self.path, self.fingerprint = Path(path), fingerprint
        self._last = (time.perf_counter(), 0.0)  # when the last save ended, how long it took

    def due(self) -> bool:
        """Whether an epoch's end should save: the time since the last save is at least ``(1 - share) / share``
        times what it took (:data:`_SAVE_SHARE`), so a kill without warning loses at most that, or an epoch."""
        end, took = self._last
        return _SAVE_SHARE is None or time.perf_counter() - end >= took * (1 - _SAVE_SHARE) / _SAVE_SHARE

    def load(self) -> dict[str, Any] | None:
        """The saved state, or ``None`` without a file; ValueError if the file belongs to another training.

        First the temporary files that a kill during a save left beside it are deleted
        (:func:`stochattn.io.atomic_path` writes ``.<name>.<12 hex digits>.tmp``). A file that cannot be read (cut
        short, garbled) is set aside as ``<name>.corrupt`` with a warning, and the training starts afresh."""
        stale = re.compile(rf"\.{re.escape(self.path.name)}\.[0-9a-f]{{12}}\.tmp")
        if self.path.parent.is_dir():
            for leftover in sorted(self.path.parent.iterdir()):
                if stale.fullmatch(leftover.name):
                    leftover.unlink(missing_ok=True)
                    logger.info(f"removed {leftover}, the temporary file of a save of {self.path} that was cut short")
        if not self.path.exists():
            return None
        try:  # weights_only=True: the file holds tensors and plain Python values only
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except (EOFError, RuntimeError, OSError, pickle.UnpicklingError, UnicodeDecodeError) as err:
            # what torch.load raises on a file cut short or garbled; any other OSError (permissions, I/O) is no
            # verdict on the file: raised, naming it
            if isinstance(err, OSError) and err.errno != errno.EINVAL:
                err.add_note(f"reading the checkpoint {self.path}")
                raise
            aside = self.path.with_name(self.path.name + ".corrupt")
            os.replace(self.path, aside)
            warnings.warn(  # noqa: B028 - keeps the code hash
                f"checkpoint {self.path}: unreadable ({type(err).__name__}: {str(err)[:120]}); set aside as "
                f"{aside.name}, the training starts afresh"
            )
            return None
        saved = state.get("fingerprint", {})
        diff = [
            f"{k} (checkpoint {str(saved.get(k))[:80]!r}, this fit {str(v)[:80]!r})"
            for k, v in self.fingerprint.items()
            if saved.get(k) != v
        ]
        if diff:
            raise ValueError(
                f"checkpoint {self.path}: written by a different training; mismatch in " + "; ".join(diff)
                + ". Delete the file to start afresh."
            )
        return state

    def save(self, state: dict[str, Any]) -> None:
        start = time.perf_counter()
        save_torch(self.path, {"fingerprint": self.fingerprint, **state})
        end = time.perf_counter()
        self._last = (end, end - start)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


@contextlib.contextmanager
def _removed_if_diverged(ckpt: _Checkpoint | None) -> Iterator[None]:
    """Delete the checkpoint file when the block fails with FloatingPointError (a final outcome: a rerun would end
    the same way); keep it when the block ends otherwise (see :func:`fit_regressor`'s ``checkpoint``)."""
    try:
        yield
    except FloatingPointError:
        if ckpt is not None:
            ckpt.remove()
        raise


def _generators(model: nn.Module) -> dict[str, torch.Generator]:
    """The generators held by modules of ``model`` (e.g. a ``generator`` attribute), by module and attribute name."""
    return {f"{name}.{attr}": v for name, m in model.named_modules() for attr, v in vars(m).items()
            if isinstance(v, torch.Generator)}  # fmt: skip


def _rng_state(dev: torch.device, model: nn.Module) -> dict[str, Any]:
    """The RNG states a training step draws from: torch's global RNG (CPU, and ``dev`` when it is CUDA) and the
    generators of ``model``'s modules."""
    return {
        "cpu": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None,
        "modules": {name: g.get_state() for name, g in _generators(model).items()},
    }


def _set_rng_state(state: dict[str, Any], dev: torch.device, model: nn.Module) -> None:
    torch.set_rng_state(state["cpu"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"], dev)
    generators = _generators(model)
    for name, g in state["modules"].items():
        generators[name].set_state(g)


def fit_regressor(
    model: nn.Module,
    x_train: Tensor | np.ndarray,
    y_train: Tensor | np.ndarray,
    x_val: Tensor | np.ndarray | None = None,
    y_val: Tensor | np.ndarray | None = None,
    *,
    seed: int,
    optimizer: str | torch.optim.Optimizer | Callable[[nn.Module], torch.optim.Optimizer] = "adamw",
    lr: float = 1e-4,
    weight_decay: float = 1e-5,
    batch_size: int = 256,
    max_epochs: int = 500,
    patience: int | None = 16,
    restore_best: bool = True,
    loss: LossFn = F.mse_loss,
    step_fn: StepFn | None = None,
    on_epoch_end: Callable[[int, nn.Module], None] | None = None,
    eval_batch_size: int = 1024,
    device: str | torch.device | None = None,
    progress: bool = True,
    desc: str = "train",
    checkpoint: str | Path | None = None,
    hook_state: HookState | None = None,
) -> FitResult:
    """Train ``model`` (``(B, F) -> (B,)``) in place by mini-batch optimisation with early stopping.

    Args:
        x_train: ``(n, F)`` training inputs (a tensor or an array; cast to float32).
        y_train: ``(n,)`` training targets.
        x_val: ``(m, F)`` validation inputs for early stopping on RMSE, or ``None`` with ``y_val`` (then training
            runs ``max_epochs`` epochs and keeps the last state).
        y_val: ``(m,)`` validation targets, or ``None``.
        seed: drives mini-batch shuffling (a ``torch.Generator``) and every global-RNG draw during training
            (dropout masks, IVON noise) through :func:`seeded`; the caller's RNG state is restored afterwards.
        optimizer: ``"adamw"`` (``torch.optim.AdamW(lr, weight_decay)`` over :func:`parameter_groups`, i.e.
            rtdl's ``make_parameter_groups()`` split, the default of Gorishniy et al. 2021: lr 1e-4, wd 1e-5),
            an already built optimizer, or a factory ``model -> Optimizer`` called after the model is moved to
            ``device``. ``lr``/``weight_decay`` apply to ``"adamw"`` only.
        max_epochs: cap on epochs. Gorishniy et al. train until ``patience`` epochs pass without improvement;
            500 is a generous cap for UCI-sized data (a quick configuration lowers it).
        patience: stop after this many epochs without a strictly lower validation RMSE; ``None`` disables early
            stopping (the best validation state is still restored when validation data is given).
        restore_best: with validation data, put the model and optimizer back into the state of the epoch with
            the lowest validation RMSE (the default); ``False`` keeps the last epoch's state.
        loss: ``loss(pred (B,), y (B,)) -> scalar``; mean squared error by default.
        step_fn: one optimisation step per mini-batch (see :class:`StepFn`); :func:`standard_step` by default.
        on_epoch_end: ``hook(epoch, model)`` called once after each epoch's training pass and before validation
            (SWAG advances its clock here).
        device: where to train; ``None`` picks CUDA when available. The model is moved there.
        checkpoint: a file to make the fit resumable. After every epoch (less often where saves are slow next to
            epochs: at most ~10 % of the time goes to them) the full state (model, optimizer, the RNGs, best-so-far
            record, history, ``hook_state``) is saved there atomically; SIGUSR1 or SIGTERM
            (handled while the fit runs in the main thread) save it after the current optimisation step or
            validation batch (the validation's predictions so far included: the rerun neither trains that epoch
            again nor calls ``on_epoch_end`` twice) and raise :class:`TrainingInterrupted`. An existing file from
            the same training (same arguments, model layout and initial weights, data) is resumed from, and the
            result is bit-identical to an uninterrupted run on CPU (on CUDA: see :func:`seeded`); a file from
            another training is a ValueError. A fit that returns leaves its final state there, marked completed,
            and the same call rerun returns it without training (a job killed after its fit ended, in Snakemake's
            teardown at the time limit, does not train again on its retry): whoever accepts the job's outputs
            deletes the file (the workflow: :func:`stochattn.provenance.remove_finished_resumes` when a run
            succeeds). A fit that diverges (FloatingPointError) deletes it. An unreadable file is set aside
            (``<name>.corrupt``, with a warning) and the fit starts afresh. Not saved: state the hooks keep
            elsewhere than ``hook_state``; with ``on_epoch_end``, ``hook_state`` is required.
        hook_state: the state of ``step_fn`` / ``on_epoch_end`` (:class:`HookState`), saved in every checkpoint and
            restored on resume (also when a completed fit is returned from its file).

    Returns:
        :class:`FitResult`; the model (and optimizer) hold the state of ``best_epoch`` (of the last epoch if
        ``restore_best=False``). Validation RMSE is that of the deterministic prediction of :func:`predict`
        (eval mode; for IVON the posterior-mean weights).

    Raises:
        FloatingPointError: if the training loss turns non-finite and there is no earlier best state to restore
            (no validation data, ``restore_best=False``, or no finite validation RMSE yet), or if the
            validation RMSE is never finite.
        TrainingInterrupted: with ``checkpoint``, on SIGUSR1 / SIGTERM, after saving the state.
        ValueError: ``checkpoint`` with ``on_epoch_end`` but no ``hook_state``.
    """
    if (x_val is None) != (y_val is None):
        raise ValueError("x_val, y_val: give both or neither")
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    if max_epochs < 1:
        raise ValueError(f"max_epochs: must be >= 1, got {max_epochs}")
    if patience is not None and patience < 1:
        raise ValueError(f"patience: must be >= 1 or None, got {patience}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}")
    stateless_hook = on_epoch_end is not None and hook_state is None
    if checkpoint is not None and stateless_hook:
        raise ValueError("checkpoint: with on_epoch_end, give hook_state (the hook's state, to save and resume it)")
    if checkpoint is None and not stateless_hook:
        checkpoint = _ambient_checkpoint()  # inside resumable(...)
    x_tr = as_tensor(x_train, "x_train", 2)
    y_tr = as_tensor(y_train, "y_train", _target_ndim(y_train))
    if len(x_tr) != len(y_tr) or len(x_tr) == 0:
        raise ValueError(f"x_train, y_train: need the same non-zero length, got {len(x_tr)} and {len(y_tr)}")
    has_val = x_val is not None
    if has_val:
        x_va = as_tensor(x_val, "x_val", 2)
        y_va = as_tensor(y_val, "y_val", _target_ndim(y_val))
        if len(x_va) != len(y_va) or len(x_va) == 0:
            raise ValueError(f"x_val, y_val: need the same non-zero length, got {len(x_va)} and {len(y_va)}")
        if x_va.shape[1] != x_tr.shape[1]:
            raise ValueError(f"x_val: has {x_va.shape[1]} features, x_train has {x_tr.shape[1]}")
    step = standard_step if step_fn is None else step_fn

    dev = resolve_device(device)
    model.to(dev)
    opt = _make_optimizer(optimizer, model, lr, weight_decay)
    ckpt = None
    if checkpoint is not None:
        data = (x_tr, y_tr, x_va, y_va) if has_val else (x_tr, y_tr)
        ckpt = _Checkpoint(checkpoint, {
            "seed": int(seed), "lr": lr, "weight_decay": weight_decay, "batch_size": batch_size,
            "max_epochs": max_epochs, "patience": patience, "restore_best": restore_best,
            "eval_batch_size": eval_batch_size, "loss": _name(loss), "step_fn": _name(step),
            "device": dev.type, "generators": sorted(_generators(model)),
            "optimizer": f"{type(opt).__name__} " + repr([{k: v for k, v in g.items() if k != "params"}
                                                          | {"params": len(g["params"])} for g in opt.param_groups]),
            "model": repr([(k, tuple(v.shape), str(v.dtype)) for k, v in model.state_dict().items()]),
            "trainable": repr([n for n, p in model.named_parameters() if p.requires_grad]),
            "initial_weights": _digest(model.state_dict().values()),
            "data_shapes": repr([tuple(t.shape) for t in data]), "data": _digest(data),
            "hooks": None if hook_state is None else f"{_name(hook_state)} {getattr(hook_state, 'settings', None)!r}",
        })  # fmt: skip
    x_tr, y_tr = x_tr.to(dev), y_tr.to(dev)
    shuffle_gen = torch.Generator().manual_seed(int(seed))  # CPU generator: same order on every device

    history: dict[str, list[float]] = {"epoch": [], "train_loss": [], "val_rmse": []}
    best_rmse, best_epoch, best_state = math.inf, 0, None
    stopped_early = False
    first_epoch, partial, seconds_before, cpu_before = 1, None, 0.0, 0.0
    saved = ckpt.load() if ckpt is not None else None
    # frozen parameters (a foundation model's backbone under LoRA) never change and are checked by the fingerprint's
    # initial_weights: the checkpoint leaves them out (TimesFM 2.5 200M: ~1 MB of adapters instead of 1.6 GB)
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}

    def changing(full: dict) -> dict:
        return {k: v for k, v in full.items() if k not in frozen}

    def completed(part: dict) -> dict:
        return {**{k: v.detach().clone() for k, v in model.state_dict().items() if k in frozen}, **part}

    def restore(saved: dict) -> None:
        """The saved model, optimizer (and ivon.IVON's step counter, kept outside its state_dict) and hook state."""
        model.load_state_dict(completed(saved["model"]))
        opt.load_state_dict(saved["optimizer"])
        if saved["optimizer_steps"] is not None:
            opt.current_step = saved["optimizer_steps"]
        if hook_state is not None:
            hook_state.load_state_dict(saved["hooks"])

    if saved is not None and saved.get("completed"):
        # the job ran this fit to its end before it was killed (e.g. in Snakemake's teardown after its time limit)
        restore(saved)
        for name, g in _generators(model).items():
            g.set_state(saved["rng"]["modules"][name])
        logger.info(f"training already completed in {ckpt.path}: best epoch {saved['result']['best_epoch']} of "
                    f"{saved['result']['epochs_run']}, nothing to train")  # fmt: skip
        _loaded_from_earlier_attempts(saved["result"]["seconds"])
        return FitResult(**saved["result"], optimizer=opt)
    if saved is not None:
        restore(saved)
        shuffle_gen.set_state(saved["shuffle_rng"])
        history, best_rmse, best_epoch, best_state = (saved[k] for k in ("history", "best_rmse", "best_epoch",
                                                                          "best_state"))  # fmt: skip
        if best_state:  # a snapshot (model, optimizer) whose model part was saved without the frozen parameters
            best_state = (completed(best_state[0]), best_state[1])
        first_epoch, partial, seconds_before = saved["epoch"] + 1, saved["partial"], saved["seconds"]
        cpu_before = saved.get("cpu_seconds")  # None (unknown from then on) in checkpoints written before 2026-12-05
        _loaded_from_earlier_attempts(seconds_before)
        where = (f"epoch {saved['epoch']}" if partial is None else f"epoch {first_epoch} step {partial['step']}"
                 if "validation" not in partial else
                 f"epoch {first_epoch}'s training and {len(partial['validation'])} validation batches")  # fmt: skip
        logger.info(f"resuming from {ckpt.path}: after {where} of max {max_epochs} (best epoch {best_epoch}, val RMSE"
                    f" {best_rmse:.6g})")  # fmt: skip
    t0 = time.perf_counter() - seconds_before
    cpu0 = None if cpu_before is None else time.process_time() - cpu_before

    def state(epoch: int, partial: dict | None) -> dict[str, Any]:
        """What :class:`_Checkpoint` saves: ``epoch`` epochs done, plus ``partial`` progress into the next one."""
        return {
            "epoch": epoch, "partial": partial, "model": changing(model.state_dict()), "optimizer": opt.state_dict(),
            # ivon.IVON counts its steps (for bias correction) outside its state_dict
            "optimizer_steps": getattr(opt, "current_step", None),
            "shuffle_rng": shuffle_gen.get_state(), "rng": _rng_state(dev, model), "history": history,
            "best_rmse": best_rmse, "best_epoch": best_epoch,
            "best_state": (changing(best_state[0]), best_state[1]) if best_state else best_state,
            "hooks": None if hook_state is None else hook_state.state_dict(), "seconds": time.perf_counter() - t0,
            # this process's CPU time, every thread, over the attempts
            "cpu_seconds": None if cpu0 is None else time.process_time() - cpu0,
        }  # fmt: skip

    def interrupt(epoch: int, partial: dict | None, step: int, validated: int | None = None) -> None:
        """Save ``state(epoch - 1, partial)`` (unless ``partial`` is None: the end of ``epoch - 1``, saved already)
        and raise :class:`TrainingInterrupted` for the stop request."""
        if partial is not None:
            ckpt.save(state(epoch - 1, partial))
        interrupted = TrainingInterrupted(ckpt.path, stop[0], epoch, step, validated)
        logger.warning(str(interrupted))
        raise interrupted

    block = _RESUMABLE.get()  # inside resumable(...): its stop requests count (a SIGUSR1 received before this fit)
    requests = block[2] if block is not None and ckpt is not None else None
    with seeded(int(seed), dev), _stop_requests(ckpt is not None, requests) as stop, _removed_if_diverged(ckpt):
        if saved is not None:
            _set_rng_state(saved["rng"], dev, model)
        epochs = range(first_epoch, max_epochs + 1)
        bar = show_progress(epochs, desc=desc, unit="epoch", disable=not progress)
        for epoch in bar:
            model.train()
            validation: list[Tensor] | None = None  # the validation's predictions so far (None: not started)
            if partial is None:
                perm = torch.randperm(len(x_tr), generator=shuffle_gen)
                done, total, count = 0, torch.zeros((), device=dev, dtype=torch.float64), 0
            else:  # resume inside the epoch: its batch order, the steps done, the loss summed so far
                perm, done, count = partial["perm"], partial["step"], partial["count"]
                total = partial["total"].to(dev)
                validation = partial.get("validation")  # interrupted in the validation: trained and hooked already
                partial = None
            batches = perm.to(dev).split(batch_size)
            for i in range(done, len(batches)):
                idx = batches[i]
                batch_loss = step(model, opt, x_tr[idx], y_tr[idx], loss)
                total += batch_loss.detach().double() * len(idx)
                count += len(idx)
                if stop:
                    interrupt(epoch, {"perm": perm, "step": i + 1, "total": total.cpu(), "count": count}, i + 1)
            train_loss = float(total) / count
            if on_epoch_end is not None and validation is None:
                on_epoch_end(epoch, model)
            val_rmse = math.nan
            if has_val:
                validation = [] if validation is None else validation
                if not _predict_batches(model, x_va, eval_batch_size, validation, stop):
                    interrupt(epoch, {"perm": perm, "step": len(batches), "total": total.cpu(), "count": count,
                                      "validation": validation}, len(batches), len(validation))  # fmt: skip
                val_rmse = _rmse(torch.cat(validation), y_va)
            history["epoch"].append(epoch)
            history["train_loss"].append(train_loss)
            history["val_rmse"].append(val_rmse)
            bar.set_postfix(loss=f"{train_loss:.4g}", val_rmse=f"{val_rmse:.4g}")

            if not math.isfinite(train_loss):
                if best_state is None or not restore_best:
                    raise FloatingPointError(
                        f"training loss became {train_loss} in epoch {epoch} with no earlier best state to"
                        " fall back on; lower lr"
                    )
                warnings.warn(  # noqa: B028 - keeps the code hash
                    f"training loss became {train_loss} in epoch {epoch}; restoring epoch {best_epoch}"
                )
                stopped_early = True
                break
            if has_val:
                if val_rmse < best_rmse:
                    best_rmse, best_epoch = val_rmse, epoch
                    best_state = _snapshot(model, opt) if restore_best else ()
                elif patience is not None and epoch - best_epoch >= patience:
                    stopped_early = True
                    break
            else:
                best_epoch = epoch
            if ckpt is not None and epoch < max_epochs and (stop or ckpt.due()):
                ckpt.save(state(epoch, None))
                if stop:  # came after the last check (in on_epoch_end without validation data, or in the save)
                    interrupt(epoch + 1, None, 0)
        bar.close()
        if has_val:
            if best_state is None:
                raise FloatingPointError("validation RMSE was never finite; lower lr")
            if restore_best and best_epoch != history["epoch"][-1]:
                model.load_state_dict(best_state[0])
                opt.load_state_dict(best_state[1])
        result = {"best_epoch": best_epoch, "best_val_rmse": best_rmse, "epochs_run": len(history["epoch"]),
                  "stopped_early": stopped_early, "seconds": time.perf_counter() - t0, "history": history}
        if ckpt is not None:  # kept until the job's outputs are accepted (stochattn.provenance.remove_finished_resumes)
            ckpt.save({**state(len(history["epoch"]), None), "completed": True, "result": result})
    return FitResult(**result, optimizer=opt)
