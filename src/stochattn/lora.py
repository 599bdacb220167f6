"""LoRA adapters (Hu et al., 2022) through ``peft``, injected in place into any ``nn.Module``.

The paper adapts its foundation models with LoRA (rank 8, alpha 8; TimesFM: the fused QKV projection, the
attention output and both FFN linears, L1177, L1207). ``peft.inject_adapter_in_model`` replaces each targeted
``nn.Linear`` by a LoRA layer (the original weight becomes ``<name>.base_layer.weight``; the adapters are
``<name>.lora_A.default.weight`` (r, in) and ``<name>.lora_B.default.weight`` (out, r), B initialised to zero so
the adapted model starts equal to the backbone). The module keeps its class, so code that calls the backbone's own
methods keeps working; weight-space baselines (SWAG, IVON) then cover exactly :func:`lora_parameter_names`.

``peft`` is imported on first use (it imports ``transformers``: ~5 s).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from stochattn.extras import requires

__all__ = ["add_lora", "lora_parameter_names"]


def add_lora(model: nn.Module, targets: Sequence[str], *, r: int, alpha: float, dropout: float = 0.0) -> list[str]:
    """Inject LoRA adapters of rank ``r`` and scale ``alpha / r`` into the ``nn.Linear`` modules of ``model`` whose
    name is, or ends with ``.`` + , one of ``targets``; freeze every other parameter. Returns the names of the
    trainable (adapter) parameters. Raises ValueError when a target matches no module."""
    with requires("lora"):
        import peft  # heavy import, only where LoRA is used

    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ValueError(f"LoRA rank r must be a positive int, got {r!r}")
    if not alpha > 0:
        raise ValueError(f"LoRA alpha must be > 0, got {alpha!r}")
    names = [n for n, _ in model.named_modules()]
    unmatched = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if unmatched:
        raise ValueError(f"LoRA targets {unmatched} match no module of {type(model).__name__}")
    if lora_parameter_names(model):
        raise ValueError(f"{type(model).__name__} already holds LoRA adapters")
    config = peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets))
    peft.inject_adapter_in_model(config, model)
    for name, param in model.named_parameters():
        param.requires_grad = "lora_" in name
    return lora_parameter_names(model)


def lora_parameter_names(model: nn.Module) -> list[str]:
    """Names of the LoRA adapter parameters of ``model`` (``named_parameters()`` order; empty without LoRA)."""
    return [n for n, _ in model.named_parameters() if "lora_" in n]
