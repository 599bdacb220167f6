"""FT-Transformer (Gorishniy et al. 2021) for scalar regression on continuous features (paper §5.3, UCI).

A thin wrapper around ``rtdl_revisiting_models.FTTransformer``: the rtdl modules stay in the module tree unchanged
(``model.ft.backbone.blocks[i]['attention']`` is an ``rtdl_revisiting_models.MultiheadAttention``), so stochastic
attention patching and HSA can find and replace them by walking ``named_modules()``.
"""

from __future__ import annotations

import contextlib

from torch import Tensor, nn

from stochattn.extras import requires

# ``predict`` lives in stochattn.training (the training loop validates with it) and is re-exported here.
from stochattn.training import predict, seeded

with requires("uci"):
    import rtdl_revisiting_models as rtdl

__all__ = ["TabularRegressor", "build_ft_transformer", "predict"]


class TabularRegressor(nn.Module):
    """``x: (B, n_features) -> (B,)``: an rtdl ``FTTransformer`` (continuous features only, ``d_out=1``).

    The FT-Transformer is the attribute ``.ft``; ``backbone_kwargs`` go to ``FTTransformerBackbone``.
    """

    def __init__(self, n_features: int, **backbone_kwargs) -> None:
        if isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1:
            raise ValueError(f"n_features: must be a positive int, got {n_features!r}")
        if "d_out" in backbone_kwargs:
            raise ValueError("d_out: fixed to 1 for a scalar regressor; do not pass it")
        super().__init__()
        self.n_features = n_features
        self.ft = rtdl.FTTransformer(
            n_cont_features=n_features, cat_cardinalities=[], d_out=1, **backbone_kwargs
        )

    def forward(self, x: Tensor) -> Tensor:
        """``x: (B, n_features)`` float -> ``(B,)``."""
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"x: expected shape (B, {self.n_features}), got {tuple(x.shape)}")
        return self.ft(x, None).squeeze(-1)

    def make_parameter_groups(self) -> list[dict]:
        """rtdl's groups: no weight decay on embeddings, normalisations and biases (see ``FTTransformer``)."""
        return self.ft.make_parameter_groups()


def build_ft_transformer(
    n_features: int,
    *,
    n_blocks: int = 3,
    d_block: int = 192,
    attention_n_heads: int = 8,
    attention_dropout: float = 0.2,
    ffn_d_hidden_multiplier: float = 4 / 3,
    ffn_dropout: float = 0.1,
    residual_dropout: float = 0.0,
    seed: int | None = None,
) -> TabularRegressor:
    """Build an FT-Transformer regressor ``(B, n_features) -> (B,)``.

    The defaults are ``rtdl_revisiting_models.FTTransformer.get_default_kwargs(n_blocks=3)`` of the installed
    rtdl-revisiting-models 0.0.2: ``n_blocks=3, d_block=192, attention_n_heads=8, attention_dropout=0.2,
    ffn_d_hidden_multiplier=4/3`` (ReGLU), ``ffn_dropout=0.1, residual_dropout=0.0``. Every value can be
    overridden (the offline quick configuration uses ``n_blocks=1, d_block=64``); note that rtdl's own defaults
    for other depths differ (e.g. ``get_default_kwargs(1)`` has d_block 96, dropouts 0.1/0.0), this function
    does not switch them with ``n_blocks``. An ``attention_dropout`` of 0 makes rtdl drop the attention-dropout
    module entirely (``MultiheadAttention.dropout is None``).

    ``seed`` (optional) seeds the weight initialisation without touching the caller's global RNG state.
    """
    for name, value in (("attention_dropout", attention_dropout), ("ffn_dropout", ffn_dropout),
                        ("residual_dropout", residual_dropout)):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name}: must be in [0, 1), got {value}")
    for name, value in (("n_blocks", n_blocks), ("d_block", d_block), ("attention_n_heads", attention_n_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: must be a positive int, got {value!r}")
    if d_block % attention_n_heads:
        raise ValueError(f"d_block: must be a multiple of attention_n_heads={attention_n_heads}, got {d_block}")
    if not ffn_d_hidden_multiplier > 0:
        raise ValueError(f"ffn_d_hidden_multiplier: must be > 0, got {ffn_d_hidden_multiplier}")
    kwargs = dict(
        n_blocks=n_blocks,
        d_block=d_block,
        attention_n_heads=attention_n_heads,
        attention_dropout=attention_dropout,
        ffn_d_hidden=None,
        ffn_d_hidden_multiplier=ffn_d_hidden_multiplier,
        ffn_dropout=ffn_dropout,
        residual_dropout=residual_dropout,
    )
    ctx = seeded(seed) if seed is not None else contextlib.nullcontext()
    with ctx:
        return TabularRegressor(n_features, **kwargs)
