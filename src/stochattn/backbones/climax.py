"""ClimaX (Nguyen et al. 2023, "ClimaX: A foundation model for weather and climate", arXiv:2301.10343) in-house.

A re-implementation of ``climax.arch.ClimaX`` from microsoft/ClimaX (read at commit 4cd87c7; timm 0.6.12's
``vision_transformer.Block`` / ``Attention`` / ``Mlp`` / ``PatchEmbed``, the versions pinned in ClimaX's
``docker/environment.yml``) whose ``state_dict`` names and shapes are those of the official checkpoints (e.g.
``5.625deg.ckpt``, a PyTorch Lightning file whose ``state_dict`` keys are the module's prefixed by ``net.``):

* ``token_embeds.{i}.proj``: Conv2d(1, D, k=s=p), one per variable (``.norm`` is an Identity, no tensors);
* ``var_embed`` (1, V, D), ``var_query`` (1, 1, D), ``var_agg``: ``nn.MultiheadAttention(D, heads, batch_first)``;
* ``pos_embed`` (1, L, D) (fixed 2-D sin-cos init), ``lead_time_embed``: Linear(1, D);
* ``blocks.{j}``: ``norm1``, ``attn.qkv`` (3D, D) with bias (rows [q | k | v], heads contiguous), ``attn.proj``,
  ``norm2``, ``mlp.fc1`` (mlp_ratio D, D), exact GELU, ``mlp.fc2``; final ``norm``;
* ``head``: Sequential of ``decoder_depth`` (Linear(D, D), GELU) pairs then Linear(D, V p^2).

Forward (ClimaX ``forward_encoder`` + head): x (B, V, H, W) -> per-variable patch tokens (B, V, L, D) + var_embed
-> ``var_agg`` (one learned query attends, at every patch position, over the V variable tokens) -> (B, L, D) ->
+ pos_embed + lead_time_embed(lead time) -> blocks -> norm -> head -> unpatchify -> (B, V_out, H, W).

Lead times follow ClimaX's data pipeline (``climax/pretrain/dataset.py``: ``lead_times = hrs_each_step *
predict_ranges / 100``): hours / 100, so a 72 h forecast uses 0.72 (see :func:`lead_time_from_hours`).

Stochastic attention: importing this module registers an adapter for :class:`ClimaXAttention` (the ViT blocks'
attention) with :func:`stochattn.patch.register_attention`; ``var_agg`` is an ``nn.MultiheadAttention``, which
:mod:`stochattn.patch` supports already. ``StochasticAttention(model, nu)`` therefore patches both kinds; restrict
it to some of them with a mapping ``nu`` (:func:`climax_sa_nu` builds one, e.g. blocks only).

:func:`load_climax_checkpoint` loads an official Lightning checkpoint (or a plain state_dict file) strictly.
"""

from __future__ import annotations

import fnmatch
import math
import os
import pickle
from pathlib import Path
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stochattn.backbones.checkpoints import CheckpointMismatchError, state_dict_mismatch
from stochattn.data.era5 import CLIMAX_DEFAULT_VARS
from stochattn.patch import SAState, attention_modules, register_attention
from stochattn.training import seeded

__all__ = [
    "CLIMAX_DEFAULT_VARS",
    "Z500",
    "Z500_INDEX",
    "LEAD_TIME_DIVISOR_HOURS",
    "ClimaX",
    "ClimaXAttention",
    "ClimaXBlock",
    "ClimaXForecaster",
    "CHUNK_NUMBERS",
    "CheckpointMismatchError",
    "CheckpointPickleError",
    "LoadResult",
    "build_climax",
    "climax_sa_modules",
    "climax_sa_nu",
    "get_1d_sincos_pos_embed",
    "get_2d_sincos_pos_embed",
    "resize_pos_embed",
    "lead_time_from_hours",
    "load_climax_checkpoint",
]

# ----------------------------------------------------------------------------------------------------------------
# constants
# ----------------------------------------------------------------------------------------------------------------
#: Z500 (geopotential at 500 hPa): index 6 + 2 = 8 of :data:`CLIMAX_DEFAULT_VARS`.
Z500 = "geopotential_500"
Z500_INDEX = CLIMAX_DEFAULT_VARS.index(Z500)

#: ClimaX feeds lead times as hours / 100 (``climax/pretrain/dataset.py``, ``Forecast.__iter__``).
LEAD_TIME_DIVISOR_HOURS = 100.0


def lead_time_from_hours(hours: Union[float, Sequence[float], Tensor], batch: Optional[int] = None) -> Tensor:
    """Lead time(s) in hours -> ClimaX's input convention (hours / 100), float32 of shape (B,).

    A scalar needs ``batch`` (B) and is repeated; a sequence / 1-D tensor of length B is converted as is.
    """
    t = torch.as_tensor(hours, dtype=torch.float32)
    if t.dim() == 0:
        if batch is None:
            raise ValueError("lead_time_from_hours: a scalar lead time needs batch=B")
        t = t.expand(batch)
    return t.reshape(-1) / LEAD_TIME_DIVISOR_HOURS


# ----------------------------------------------------------------------------------------------------------------
# sin-cos embeddings (MAE / ClimaX ``utils/pos_embed.py``)
# ----------------------------------------------------------------------------------------------------------------
def get_1d_sincos_pos_embed(embed_dim: int, positions: Tensor) -> Tensor:
    """positions (M,) -> (M, embed_dim) float64: ``[sin(pos * w_k), cos(pos * w_k)]``, w_k = 10000^(-k / (D/2)).

    The MAE formula ClimaX uses (frequencies in float64 as there: numpy's ``np.float``).
    """
    if embed_dim % 2:
        raise ValueError(f"sin-cos embedding needs an even dimension, got {embed_dim}")
    omega = torch.arange(embed_dim // 2, dtype=torch.float64) / (embed_dim / 2.0)
    omega = 1.0 / 10000**omega  # (D/2,)
    out = positions.reshape(-1).to(torch.float64)[:, None] * omega[None, :]  # (M, D/2)
    return torch.cat([torch.sin(out), torch.cos(out)], dim=1)


def get_2d_sincos_pos_embed(embed_dim: int, grid_h: int, grid_w: int) -> Tensor:
    """(grid_h * grid_w, embed_dim) float64, patches in row-major order (index = row * grid_w + column).

    As MAE / ClimaX's ``get_2d_sincos_pos_embed`` (``np.meshgrid(grid_w, grid_h)`` puts the *column* coordinate
    first): the first D/2 channels are the 1-D embedding of the column index, the last D/2 of the row index.
    """
    if embed_dim % 2:
        raise ValueError(f"2-D sin-cos embedding needs an even dimension, got {embed_dim}")
    rows, cols = torch.meshgrid(
        torch.arange(grid_h, dtype=torch.float64), torch.arange(grid_w, dtype=torch.float64), indexing="ij"
    )
    return torch.cat(
        [get_1d_sincos_pos_embed(embed_dim // 2, cols), get_1d_sincos_pos_embed(embed_dim // 2, rows)], dim=1
    )


def resize_pos_embed(
    pos_embed: Tensor, old_grid: Tuple[int, int], new_grid: Tuple[int, int], mode: str = "bicubic"
) -> Tensor:
    """pos_embed (1, old_h * old_w, D) -> (1, new_h * new_w, D) by 2-D interpolation of the patch grid.

    As ClimaX's ``utils/pos_embed.interpolate_pos_embed`` (DeiT): reshape to (1, D, old_h, old_w),
    ``F.interpolate(..., mode="bicubic", align_corners=False)``, flatten back row-major.
    """
    n, d = pos_embed.shape[-2:]
    if old_grid[0] * old_grid[1] != n:
        raise ValueError(f"pos_embed has {n} positions, not the {old_grid[0]}x{old_grid[1]} grid given")
    grid = pos_embed.reshape(1, old_grid[0], old_grid[1], d).permute(0, 3, 1, 2).float()
    new = F.interpolate(grid, size=tuple(new_grid), mode=mode, align_corners=False)
    return new.permute(0, 2, 3, 1).flatten(1, 2).to(pos_embed.dtype)


# ----------------------------------------------------------------------------------------------------------------
# the ViT pieces (timm 0.6.12 semantics, written here: timm cannot be imported with this torch)
# ----------------------------------------------------------------------------------------------------------------
class DropPath(nn.Module):
    """Stochastic depth per sample (timm ``DropPath``): in training, zero a sample's branch with probability p and
    scale the kept ones by 1 / (1 - p); the identity in eval mode or at p = 0."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.p = float(p)

    def forward(self, x: Tensor) -> Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
        return x * mask / keep

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ClimaXPatchEmbed(nn.Module):
    """One variable's patch embedding (timm ``PatchEmbed`` with 1 input channel): (B, 1, H, W) -> (B, L, D),
    L = (H / p)(W / p) in row-major patch order. ``norm`` is an Identity, as in ClimaX."""

    def __init__(self, img_size: Tuple[int, int], patch_size: int, embed_dim: int) -> None:
        super().__init__()
        self.img_size = tuple(img_size)
        self.patch_size = patch_size
        self.grid_size = (img_size[0] // patch_size, img_size[1] // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(1, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.norm = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


class ClimaXAttention(nn.Module):
    """Multi-head self-attention of a ViT block (timm 0.6.12 ``Attention``): x (B, N, C) -> (B, N, C).

    ``qkv`` Linear(C, 3C) (output rows [q | k | v], each split into ``num_heads`` contiguous heads of C / num_heads),
    probabilities ``softmax(q k^T * head_dim^-1/2)``, ``attn_drop`` on them, ``proj`` Linear(C, C), ``proj_drop``.
    The probabilities are computed explicitly (as timm 0.6.12 does; no fused SDPA), so that the stochastic-attention
    adapter computes the very same tensors and, at ``nu=None``, the same output bit for bit.
    """

    def __init__(
        self, dim: int, num_heads: int = 8, qkv_bias: bool = True, attn_drop: float = 0.0, proj_drop: float = 0.0
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def heads(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """x (B, N, C) -> queries, keys, values (B, H, N, C / H) each."""
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return qkv.unbind(0)

    def probs_and_values(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """x (B, N, C) -> attention probabilities (B, H, N, N) and values (B, H, N, C / H)."""
        q, k, v = self.heads(x)
        probs = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return probs, v

    def output(self, heads: Tensor) -> Tensor:
        """Per-head outputs (B, H, N, Dh) -> (B, N, C) through ``proj`` and ``proj_drop``."""
        b, _, n, _ = heads.shape
        return self.proj_drop(self.proj(heads.transpose(1, 2).reshape(b, n, -1)))

    def forward(self, x: Tensor) -> Tensor:
        probs, v = self.probs_and_values(x)
        return self.output(self.attn_drop(probs) @ v)


@register_attention(ClimaXAttention, n_heads=lambda m: m.num_heads)
def _climax_attention_forward(module: ClimaXAttention, state: SAState, original, x: Tensor) -> Tensor:
    # Same computation as ClimaXAttention.forward (same helpers for the heads and the output projection) with SA on
    # the softmax probabilities. In eval mode (attn_drop the identity) it is SDPA's attention at the module's scale,
    # so it goes through state.sdpa: the fused kernel where it can run (CUDA), else the explicit path, whose
    # probabilities ``softmax((q k^T) scale)`` are the very tensor of probs_and_values (bit for bit). The patched
    # forward never calls this adapter at nu=None (stochattn.patch calls the original then); called directly, it
    # returns the deterministic forward's own product, bit for bit.
    if state.nu is None or (module.training and module.attn_drop.p > 0.0):
        probs, v = module.probs_and_values(x)
        return module.output(module.attn_drop(state.weights(probs)) @ v)
    q, k, v = module.heads(x)
    return module.output(state.sdpa(q, k, v, None, False, module.scale, False, state.nu))


class ClimaXMlp(nn.Module):
    """timm ``Mlp``: fc1 -> exact GELU -> dropout -> fc2 -> dropout; (B, N, C) -> (B, N, C)."""

    def __init__(self, dim: int, hidden: int, drop: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class ClimaXBlock(nn.Module):
    """Pre-norm ViT block (timm 0.6.12 ``Block``, no layer scale): x + DropPath(attn(norm1(x))), then
    x + DropPath(mlp(norm2(x))); (B, N, C) -> (B, N, C)."""

    def __init__(
        self, dim: int, num_heads: int, mlp_ratio: float = 4.0, drop: float = 0.0, drop_path: float = 0.0
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = ClimaXAttention(dim, num_heads, qkv_bias=True, attn_drop=0.0, proj_drop=drop)
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = ClimaXMlp(dim, int(dim * mlp_ratio), drop=drop)
        self.drop_path2 = DropPath(drop_path)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))


# ----------------------------------------------------------------------------------------------------------------
# ClimaX
# ----------------------------------------------------------------------------------------------------------------
VarSpec = Optional[Sequence[Union[str, int]]]


class ClimaX(nn.Module):
    """ClimaX (``climax.arch.ClimaX``, non-parallel patch embedding) with the official ``state_dict`` layout.

    Args (ClimaX's names and defaults, those of ``configs/global_forecast_climax.yaml``):
        default_vars: the variables the model knows (one patch embedding, one var_embed row and p^2 head outputs
            each), default :data:`CLIMAX_DEFAULT_VARS` (48).
        img_size: (H, W) of the grid, (32, 64) at 5.625 deg. patch_size: p (H and W must be multiples).
        embed_dim: D. depth: number of ViT blocks. decoder_depth: (Linear, GELU) pairs in the head.
        num_heads: heads of the blocks and of ``var_agg``. mlp_ratio: MLP hidden size / D.
        drop_path: stochastic-depth rate of the last block (linear from 0 over the blocks, as ClimaX).
        drop_rate: dropout after the embeddings (``pos_drop``), the attention projection and the MLP layers.
            Both are active in training mode only (ClimaX trains with 0.1 / 0.1); eval mode is deterministic.
        pos_embed_trainable: ``requires_grad`` of ``pos_embed`` (True in ClimaX's ``arch.py`` at commit 4cd87c7;
            it is in the state_dict either way).
    """

    def __init__(
        self,
        default_vars: Sequence[str] = CLIMAX_DEFAULT_VARS,
        img_size: Sequence[int] = (32, 64),
        patch_size: int = 2,
        embed_dim: int = 1024,
        depth: int = 8,
        decoder_depth: int = 2,
        num_heads: int = 16,
        mlp_ratio: float = 4.0,
        drop_path: float = 0.1,
        drop_rate: float = 0.1,
        pos_embed_trainable: bool = True,
    ) -> None:
        super().__init__()
        default_vars = tuple(default_vars)
        if not default_vars or len(set(default_vars)) != len(default_vars):
            raise ValueError(f"default_vars must be a non-empty list of distinct names, got {default_vars!r}")
        img_size = tuple(int(s) for s in img_size)
        if len(img_size) != 2 or img_size[0] % patch_size or img_size[1] % patch_size:
            raise ValueError(f"img_size {img_size} must be (H, W) with both multiples of patch_size {patch_size}")
        if embed_dim % 4:
            raise ValueError(f"embed_dim must be a multiple of 4 (2-D sin-cos pos_embed), got {embed_dim}")
        self.default_vars = default_vars
        self.var_map: Dict[str, int] = {v: i for i, v in enumerate(default_vars)}
        self.img_size = img_size
        self.patch_size = patch_size
        self.embed_dim = embed_dim
        self.grid_size = (img_size[0] // patch_size, img_size[1] // patch_size)

        self.token_embeds = nn.ModuleList([ClimaXPatchEmbed(img_size, patch_size, embed_dim) for _ in default_vars])
        self.num_patches = self.token_embeds[0].num_patches
        self.var_embed = nn.Parameter(torch.zeros(1, len(default_vars), embed_dim))
        self.var_query = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.var_agg = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.num_patches, embed_dim), requires_grad=pos_embed_trainable)
        self.lead_time_embed = nn.Linear(1, embed_dim)
        self.pos_drop = nn.Dropout(drop_rate)
        # stochastic-depth rates rising linearly from 0 to drop_path (ClimaX: torch.linspace(0, drop_path, depth))
        rates = [drop_path * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]
        self.blocks = nn.ModuleList(
            [ClimaXBlock(embed_dim, num_heads, mlp_ratio, drop=drop_rate, drop_path=r) for r in rates]
        )
        self.norm = nn.LayerNorm(embed_dim)
        head: List[nn.Module] = []
        for _ in range(decoder_depth):
            head += [nn.Linear(embed_dim, embed_dim), nn.GELU()]
        head.append(nn.Linear(embed_dim, len(default_vars) * patch_size**2))
        self.head = nn.Sequential(*head)
        self.initialize_weights()

    # ------------------------------------------------------------------ init (ClimaX ``initialize_weights``)
    def initialize_weights(self) -> None:
        """pos_embed: 2-D sin-cos over the (H/p, W/p) patch grid; var_embed: 1-D sin-cos of the variable index;
        patch-embedding conv weights and every Linear weight: trunc-normal(std 0.02) (cut at +-2, timm's absolute
        bounds); Linear biases 0; LayerNorm (1, 0). Conv biases, ``var_agg``'s packed in-projection and
        ``var_query`` (zeros) keep their constructor init, as in ClimaX."""
        with torch.no_grad():
            self.pos_embed.copy_(get_2d_sincos_pos_embed(self.embed_dim, *self.grid_size).float().unsqueeze(0))
            ids = torch.arange(len(self.default_vars))
            self.var_embed.copy_(get_1d_sincos_pos_embed(self.embed_dim, ids).float().unsqueeze(0))
            for emb in self.token_embeds:
                w = emb.proj.weight
                nn.init.trunc_normal_(w.view(w.shape[0], -1), std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    # ------------------------------------------------------------------ variables
    def var_ids(self, variables: VarSpec) -> List[int]:
        """Names or indices into ``default_vars`` -> indices (all variables, in order, for None)."""
        if variables is None:
            return list(range(len(self.default_vars)))
        if isinstance(variables, (str, int)):
            raise TypeError(f"variables must be a sequence of names or indices, got {variables!r}")
        ids = []
        for v in variables:
            if isinstance(v, str):
                if v not in self.var_map:
                    raise KeyError(f"unknown variable {v!r}; the model knows {list(self.default_vars)}")
                ids.append(self.var_map[v])
            elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                if not 0 <= int(v) < len(self.default_vars):
                    raise IndexError(f"variable index {v} out of range 0..{len(self.default_vars) - 1}")
                ids.append(int(v))
            else:
                raise TypeError(f"variables must be names (str) or indices (int), got {v!r}")
        if len(set(ids)) != len(ids):
            raise ValueError(f"variables contain duplicates: {list(variables)}")
        if not ids:
            raise ValueError("variables is empty")
        return ids

    # ------------------------------------------------------------------ forward pieces
    def unpatchify(self, x: Tensor) -> Tensor:
        """x (B, L, V p^2), features ordered (row-in-patch, column-in-patch, variable) -> (B, V, H, W)."""
        p, (h, w), c = self.patch_size, self.grid_size, len(self.default_vars)
        x = x.reshape(x.shape[0], h, w, p, p, c)
        return torch.einsum("nhwpqc->nchpwq", x).reshape(x.shape[0], c, h * p, w * p)

    def aggregate_variables(self, x: Tensor) -> Tensor:
        """x (B, V, L, D) -> (B, L, D): at every patch position, ``var_query`` attends over the V variable tokens."""
        b, _, l, d = x.shape  # noqa: E741 - keeps the code hash
        x = x.transpose(1, 2).flatten(0, 1)  # (B L, V, D)
        query = self.var_query.expand(x.shape[0], -1, -1)  # (B L, 1, D)
        # NOTE[DIFF]: need_weights=False (ClimaX uses the default True and discards the weights): same output up to
        # float rounding (torch may then use its fused kernel), and under SA the adapter can use the cheaper
        # state.attend path instead of materialising the stochastic weights.
        out, _ = self.var_agg(query, x, x, need_weights=False)
        # NOTE[DIFF]: squeeze(1), not ClimaX's bare squeeze() (which would also drop B L = 1).
        return out.squeeze(1).unflatten(0, (b, l))

    def _lead_times(self, lead_times: Union[float, Tensor], batch: int, like: Tensor) -> Tensor:
        if isinstance(lead_times, (int, float)):  # filled on the device: no host copy (CUDA graphs capture it)
            return like.new_full((batch,), float(lead_times))
        t = torch.as_tensor(lead_times, dtype=like.dtype, device=like.device)
        if t.dim() == 0:
            t = t.expand(batch)
        elif t.dim() == 2 and t.shape[1] == 1:
            t = t[:, 0]
        if t.shape != (batch,):
            raise ValueError(f"lead_times: expected a scalar, (B,) or (B, 1) with B={batch}, got {tuple(t.shape)}")
        return t

    def forward_encoder(self, x: Tensor, lead_times: Union[float, Tensor], variables: VarSpec = None) -> Tensor:
        """x (B, V_in, H, W), lead_times (B,) or (B, 1) (hours / 100) -> encoded tokens (B, L, D)."""
        ids = self.var_ids(variables)
        if x.dim() != 4 or x.shape[1] != len(ids) or tuple(x.shape[2:]) != self.img_size:
            raise ValueError(
                f"x: expected (B, {len(ids)}, {self.img_size[0]}, {self.img_size[1]}) for {len(ids)} input "
                f"variable(s), got {tuple(x.shape)}"
            )
        tokens = torch.stack([self.token_embeds[j](x[:, i : i + 1]) for i, j in enumerate(ids)], dim=1)
        tokens = tokens + _select_variables(self.var_embed, ids).unsqueeze(2)  # (B, V, L, D)
        h = self.aggregate_variables(tokens) + self.pos_embed  # (B, L, D)
        lt = self._lead_times(lead_times, x.shape[0], h)
        h = h + self.lead_time_embed(lt.unsqueeze(-1)).unsqueeze(1)
        h = self.pos_drop(h)
        for blk in self.blocks:
            h = blk(h)
        return self.norm(h)

    def forward(
        self,
        x: Tensor,
        lead_times: Union[float, Tensor],
        variables: VarSpec = None,
        out_variables: VarSpec = None,
    ) -> Tensor:
        """Forecast: x (B, V_in, H, W) (normalised fields of ``variables``, default all ``default_vars`` in order),
        lead_times (B,) / (B, 1) / scalar in hours / 100 -> (B, V_out, H, W) for ``out_variables`` (names or
        indices into ``default_vars``; default all).

        NOTE[DIFF]: ClimaX's ``forward(x, y, lead_times, variables, out_variables, metric, lat)`` also computes the
        loss; here it returns the predictions only, and variables default to all.
        """
        preds = self.unpatchify(self.head(self.forward_encoder(x, lead_times, variables)))
        if out_variables is None:
            return preds
        return _select_variables(preds, self.var_ids(out_variables))


def _select_variables(t: Tensor, ids: List[int]) -> Tensor:
    """``t[:, ids]``; consecutive ids (every forecaster's case) as a slice, since indexing by a list copies it to the
    device (a host copy, which a CUDA graph capture refuses)."""
    return t[:, ids[0] : ids[-1] + 1] if ids == list(range(ids[0], ids[-1] + 1)) else t[:, ids]


def build_climax(
    default_vars: Sequence[str] = (Z500, "temperature_850", "2m_temperature"),
    *,
    img_size: Sequence[int] = (32, 64),
    patch_size: int = 2,
    embed_dim: int = 128,
    depth: int = 2,
    decoder_depth: int = 2,
    num_heads: int = 4,
    mlp_ratio: float = 4.0,
    drop_path: float = 0.1,
    drop_rate: float = 0.1,
    seed: Optional[int] = 0,
) -> ClimaX:
    """A reduced ClimaX (default: 3 variables, D 128, 2 blocks, 4 heads; ClimaX's init drawn under ``seed``), in
    eval mode on the CPU. ``ClimaX()`` with no arguments is the full 5.625 deg architecture of ``5.625deg.ckpt``."""
    kwargs = dict(
        default_vars=default_vars, img_size=img_size, patch_size=patch_size, embed_dim=embed_dim, depth=depth,
        decoder_depth=decoder_depth, num_heads=num_heads, mlp_ratio=mlp_ratio, drop_path=drop_path,
        drop_rate=drop_rate,
    )  # fmt: skip
    if seed is None:
        return ClimaX(**kwargs).eval()
    with seeded(seed):
        return ClimaX(**kwargs).eval()


# NOTE[DIFF]: found by the full-size rehearsal: 32-row chunks of the full model held ~20 GB (HSA's samples folded
# into one batch); ClimaX itself feeds a batch at once on a GPU.
CHUNK_NUMBERS = 2**26
"""Numbers (float32: 256 MB) of one V_in x L x D token tensor per chunk of :class:`ClimaXForecaster` rows."""


class ClimaXForecaster(nn.Module):
    """``x (B, V_in * H * W) -> one field at a fixed lead (B, H * W)``: the flat form every training loop and
    sampler of the library takes (``fit_regressor``, SWAG, IVON, HSA, Contextual Dropout, SA), as
    :class:`stochattn.backbones.timesfm.TimesFMForecaster` is for TimesFM.

    ``net``: a :class:`ClimaX` (LoRA layers may be injected into it); ``variables``: the V_in input variables, in the
    order of x's channels (names of ``net.default_vars``); ``out_variable``: the forecast field (e.g. Z500);
    ``lead_hours``: the fixed lead time (72 for the paper's task). Rows are fed to ``net`` in chunks of at most
    ``chunk`` (memory: a ClimaX pass holds V_in x L tokens of D numbers per row), which changes nothing in the
    result. ``chunk=None``: as many rows as keep V_in x L x D within :data:`CHUNK_NUMBERS` (at most 32): 2 rows for
    the full 5.625 deg model with 48 variables (48 x 512 x 1024 numbers per row), 32 for the reduced stand-in.
    """

    def __init__(
        self, net: ClimaX, variables: Sequence[str], out_variable: str, lead_hours: float, chunk: Optional[int] = None
    ) -> None:
        super().__init__()
        self.net = net
        self.variables = tuple(variables)
        net.var_ids(self.variables)  # unknown names fail here
        net.var_ids([out_variable])
        self.out_variable = out_variable
        self.lead_hours = float(lead_hours)
        if chunk is None:
            h, w = net.img_size
            per_row = len(self.variables) * (h // net.patch_size) * (w // net.patch_size) * net.embed_dim
            chunk = max(1, min(32, CHUNK_NUMBERS // per_row))
        self.chunk = int(chunk)

    @property
    def field_shape(self) -> Tuple[int, int]:
        return tuple(self.net.img_size)

    def forward(self, x: Tensor) -> Tensor:
        h, w = self.net.img_size
        if x.dim() != 2 or x.shape[1] != len(self.variables) * h * w:
            raise ValueError(f"x: expected (B, {len(self.variables)} * {h} * {w}), got {tuple(x.shape)}")
        fields = x.reshape(x.shape[0], len(self.variables), h, w)
        lead = self.lead_hours / LEAD_TIME_DIVISOR_HOURS
        outs = [
            self.net(part, lead, self.variables, [self.out_variable]).flatten(1)
            for part in fields.split(self.chunk)
        ]
        return torch.cat(outs)


# ----------------------------------------------------------------------------------------------------------------
# stochastic-attention sites
# ----------------------------------------------------------------------------------------------------------------
_SITES = {"blocks": "*blocks.*.attn", "var_agg": "*var_agg"}


def climax_sa_nu(nu: Any, sites: Sequence[str] = ("blocks", "var_agg")) -> Dict[str, Any]:
    """A ``nu`` mapping for :class:`stochattn.patch.StochasticAttention` putting ``nu`` on the given sites only
    ("blocks": every ViT block's attention, "var_agg": the variable aggregation); the others stay deterministic.

    ``StochasticAttention(model, climax_sa_nu(8, ("blocks",)))`` patches both kinds but draws in the blocks only.
    """
    unknown = set(sites) - set(_SITES)
    if unknown:
        raise ValueError(f"unknown SA site(s) {sorted(unknown)}; known: {list(_SITES)}")
    return {_SITES[s]: nu for s in sites}


def climax_sa_modules(model: nn.Module, sites: Sequence[str] = ("blocks", "var_agg")) -> List[str]:
    """Qualified names of the registered attention modules of ``model`` at ``sites`` (model order)."""
    patterns = list(climax_sa_nu(None, sites))
    return [n for n in attention_modules(model) if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


# ----------------------------------------------------------------------------------------------------------------
# checkpoint
# ----------------------------------------------------------------------------------------------------------------
class CheckpointPickleError(RuntimeError):
    """The file needs full unpickling (``weights_only=False``), which was not allowed."""


class LoadResult(NamedTuple):
    missing_keys: List[str]
    unexpected_keys: List[str]


#: Old (pre-release ClimaX) names -> current ones; ClimaX's loader replaces "channel" by "var" in every key.
_RENAMES = (("channel_embed", "var_embed"), ("channel_query", "var_query"), ("channel_agg.", "var_agg."))


def _read(file: Path, allow_pickle: bool) -> Any:
    try:
        return torch.load(file, map_location="cpu", weights_only=not allow_pickle)
    except pickle.UnpicklingError as err:
        if allow_pickle:
            raise
        raise CheckpointPickleError(
            f"{str(file)!r} cannot be read with torch.load(weights_only=True): it holds Python objects beyond "
            f"tensors and plain containers (a Lightning checkpoint's hyper-parameters, optimizer or callback "
            f"state, ...). If you trust the file, pass allow_pickle=True, which calls torch.load("
            f"weights_only=False) and so EXECUTES code stored in the file. torch said: {str(err).splitlines()[0]}"
        ) from err


def _net_state_dict(obj: Any, file: Path) -> Dict[str, Tensor]:
    """The ``net`` tensors of a Lightning checkpoint / state_dict, ``net.`` stripped and old names renamed."""
    sd = obj.get("state_dict", obj) if isinstance(obj, Mapping) else None
    if not isinstance(sd, Mapping):
        raise CheckpointMismatchError(f"{str(file)!r} holds neither a state_dict nor a Lightning checkpoint")
    if any(isinstance(k, str) and k.startswith("net.") for k in sd):
        # a Lightning module's state_dict: keep the network's tensors only
        sd = {k[len("net.") :]: v for k, v in sd.items() if isinstance(k, str) and k.startswith("net.")}
    out: Dict[str, Tensor] = {}
    for key, value in sd.items():
        new = key
        for old, cur in _RENAMES:
            if new.startswith(old):
                new = cur + new[len(old) :]
        if new in out:
            raise CheckpointMismatchError(f"{str(file)!r}: {key!r} and another key both map to {new!r}")
        if not isinstance(value, Tensor):
            raise CheckpointMismatchError(f"{str(file)!r}: {key!r} is a {type(value).__name__}, not a tensor")
        out[new] = value
    return out


def load_climax_checkpoint(
    model: ClimaX,
    path: Union[str, os.PathLike],
    *,
    allow_pickle: bool = False,
    strict: bool = True,
    interpolate_pos_embed: bool = False,
) -> LoadResult:
    """Load an official ClimaX checkpoint (e.g. ``5.625deg.ckpt``) or a plain ``state_dict`` file into ``model``.

    * Lightning files: ``ckpt["state_dict"]``; keys starting with ``net.`` are kept with the prefix stripped, the
      rest of the file (optimizer states, epoch, hyper-parameters, other Lightning-module tensors) is ignored. A plain
      state_dict (with or without the ``net.`` prefix) works too. Old names ``channel_embed``, ``channel_query``,
      ``channel_agg.*`` are renamed ``var_embed``, ``var_query``, ``var_agg.*``.
    * ``pos_embed``: if its shape differs from the model's (another resolution), :class:`CheckpointMismatchError`,
      unless ``interpolate_pos_embed=True``: then the checkpoint grid (assumed W = 2H, as ClimaX's
      ``interpolate_pos_embed`` does) is resized bicubically to the model's grid (see :func:`resize_pos_embed`).
    * Every missing / unexpected key and every shape mismatch is reported in one :class:`CheckpointMismatchError`
      and nothing is loaded. ``strict=False`` tolerates missing and unexpected keys (they are returned); shape
      mismatches always raise. NOTE[DIFF]: ClimaX's own loader silently drops mismatching tensors (strict=False).

    ``allow_pickle``: ``torch.load`` runs with ``weights_only=True`` unless this is True. A Lightning checkpoint
    that holds arbitrary Python objects is then refused with :class:`CheckpointPickleError`. WARNING:
    ``allow_pickle=True`` passes ``weights_only=False``, which unpickles the file and so EXECUTES ANY CODE IT
    CONTAINS: use it only for files from a trusted source (e.g. the official ClimaX release, verified by hash).

    Returns the (missing, unexpected) key lists (empty under ``strict=True``); the model keeps its device / dtype.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"ClimaX checkpoint {str(file)!r} does not exist")
    tensors = _net_state_dict(_read(file, allow_pickle), file)
    expected = model.state_dict()

    pe = tensors.get("pos_embed")
    if pe is not None and pe.shape != expected["pos_embed"].shape:
        want = tuple(expected["pos_embed"].shape)
        if not interpolate_pos_embed:
            raise CheckpointMismatchError(
                f"{str(file)!r}: pos_embed {tuple(pe.shape)} does not fit the model's {want} (another resolution "
                f"or patch size?); pass interpolate_pos_embed=True to resize it as ClimaX does"
            )
        n = pe.shape[-2]
        old_h = int(math.isqrt(n // 2))
        if pe.dim() != 3 or pe.shape[0] != 1 or pe.shape[-1] != want[-1] or 2 * old_h * old_h != n:
            raise CheckpointMismatchError(
                f"{str(file)!r}: cannot interpolate pos_embed {tuple(pe.shape)} to {want}: needs (1, 2h^2, D) "
                f"(a W = 2H grid) with D = {want[-1]}"
            )
        tensors["pos_embed"] = resize_pos_embed(pe, (old_h, 2 * old_h), model.grid_size)

    problems, missing, unexpected = state_dict_mismatch(expected, tensors, strict=strict)
    if problems:
        raise CheckpointMismatchError(
            f"ClimaX checkpoint {str(file)!r} does not match the module ({len(model.default_vars)} variables, "
            f"D {model.embed_dim}, {len(model.blocks)} blocks; {len(expected)} tensors): "
            + "; ".join(problems)
            + ". The official 5.625deg.ckpt fits ClimaX() with the default configuration."
        )
    model.load_state_dict({k: v for k, v in tensors.items() if k in expected}, strict=strict)
    return LoadResult(sorted(missing), sorted(unexpected))


#: The official 5.625 deg checkpoint (microsoft/ClimaX README: "tungnd/climax" on the Hugging Face Hub); not
#: reachable from the offline machines this was written on.
CLIMAX_CHECKPOINT_URL = "https://huggingface.co/tungnd/climax/resolve/main/5.625deg.ckpt"
CLIMAX_MIRROR_PATH = "checkpoints/climax/5.625deg.ckpt"
"""Where a mirror (and the store of :mod:`stochattn.staging`) holds the checkpoint."""


def fetch_climax_checkpoint(
    dest: Union[str, os.PathLike], *, url: str = CLIMAX_CHECKPOINT_URL, sha256: Optional[str] = None,
    mirrors: Sequence[Union[str, os.PathLike]] = (), allow_download: bool = True, timeout: float = 600.0,
) -> Dict[str, Any]:
    """Put the ClimaX checkpoint at ``dest`` and return {"url", "sha256"} (the digest of the file, to pin in the
    configuration after a first fetch). A copy at ``dest`` is kept when (with ``sha256``) it matches; else the first
    mirror holding ``checkpoints/climax/5.625deg.ckpt`` is linked (the store ``stochattn download`` fills); else,
    when ``allow_download``, ``url`` is fetched (:func:`stochattn.staging.fetch_url`: redirects followed, an
    interrupted transfer resumed, the length checked). With ``sha256`` a file of another digest raises ValueError
    (a partial download, or a changed file on the server) and leaves nothing at ``dest``."""
    from stochattn.io import sha256_file
    from stochattn.staging import fetch_url, link_or_copy

    dest = Path(dest)
    if dest.is_file() and (sha256 is None or sha256_file(dest) == sha256):
        return {"url": url, "sha256": sha256_file(dest)}
    source = url
    found = next((Path(m) / CLIMAX_MIRROR_PATH for m in mirrors if (Path(m) / CLIMAX_MIRROR_PATH).is_file()), None)
    if found is not None:
        link_or_copy(found, dest)
        source = str(found)
    elif allow_download:
        source = fetch_url(url, dest, timeout=timeout)["url"]
    else:
        raise FileNotFoundError(f"the ClimaX checkpoint is in no mirror ({[str(m) for m in mirrors]}, as "
                                f"{CLIMAX_MIRROR_PATH}) and downloads are off (URL {url})")  # fmt: skip
    got = sha256_file(dest)
    if sha256 is not None and got != sha256.lower():
        dest.unlink()
        raise ValueError(f"ClimaX checkpoint from {source}: SHA-256 {got}, expected {sha256} (era5.backbone.checkpoint"
                         ".sha256): a partial or changed file; nothing was kept")  # fmt: skip
    return {"url": source, "sha256": got}
