"""In-house ClimaX: official layout and constants, forward, checkpoint loader, stochastic-attention adapter."""

import argparse
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from stochattn.backbones import climax as C
from stochattn.patch import SAState, StochasticAttention, attention_modules, iter_patched
from stochattn.rehearsal import climax_official_state_dict, lightning_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

VARS = ("geopotential_500", "temperature_850", "2m_temperature", "land_sea_mask")
N_VARS = len(VARS)
TINY = dict(default_vars=VARS, img_size=(8, 16), patch_size=2, embed_dim=32, depth=2, num_heads=4, seed=0)


def tiny(**kw):
    return C.build_climax(**{**TINY, **kw})


def random_weights(seed=3):
    """A tiny model whose every tensor is random (no sin-cos / zero / one left), to tell weights apart. ClimaX's init
    has var_query = 0 and a zero in-projection bias, so var_agg starts as a plain average over the variables."""
    m = tiny(seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in m.state_dict().values():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return m


def fields(batch=2, n_vars=N_VARS, hw=(8, 16), seed=1):
    return torch.randn(batch, n_vars, *hw, generator=torch.Generator().manual_seed(seed))


LEAD = torch.tensor([0.72, 0.72])  # 72 h in ClimaX's hours / 100 convention


def rel(a, b):
    """Largest difference relative to the largest |a| (ClimaX's init gives outputs of order 1e-4)."""
    return ((a - b).abs().max() / a.abs().max()).item()


DIFFERENT = 1e-3  # relative change counted as "another output" (float noise here is ~1e-7, real changes > 1e-2)


# ------------------------------------------------------------------------------------------------------------------
# constants and the official architecture
# ------------------------------------------------------------------------------------------------------------------
def test_default_vars_and_z500_index():
    v = C.CLIMAX_DEFAULT_VARS
    assert len(v) == 48 and len(set(v)) == 48
    assert v[:9] == ("land_sea_mask", "orography", "lattitude", "2m_temperature", "10m_u_component_of_wind",
                     "10m_v_component_of_wind", "geopotential_50", "geopotential_250", "geopotential_500")  # fmt: skip
    assert v[13] == "u_component_of_wind_50" and v[33] == "temperature_925" and v[-1] == "specific_humidity_925"
    assert C.Z500_INDEX == 8 and v[C.Z500_INDEX] == C.Z500 == "geopotential_500"
    assert torch.allclose(C.lead_time_from_hours(72, batch=3), torch.full((3,), 0.72))


def test_full_architecture_matches_official_state_dict_layout():
    with torch.device("meta"):  # shapes only, nothing allocated
        sd = C.ClimaX().state_dict()
    shapes = {k: tuple(t.shape) for k, t in sd.items()}
    official = {
        "token_embeds.0.proj.weight": (1024, 1, 2, 2), "token_embeds.47.proj.bias": (1024,),
        "var_embed": (1, 48, 1024), "var_query": (1, 1, 1024), "var_agg.in_proj_weight": (3072, 1024),
        "var_agg.in_proj_bias": (3072,), "var_agg.out_proj.weight": (1024, 1024), "pos_embed": (1, 512, 1024),
        "lead_time_embed.weight": (1024, 1), "lead_time_embed.bias": (1024,),
        "blocks.7.norm1.weight": (1024,), "blocks.7.attn.qkv.weight": (3072, 1024), "blocks.7.attn.qkv.bias": (3072,),
        "blocks.7.attn.proj.weight": (1024, 1024), "blocks.7.norm2.bias": (1024,),
        "blocks.7.mlp.fc1.weight": (4096, 1024), "blocks.7.mlp.fc2.weight": (1024, 4096), "norm.weight": (1024,),
        "head.0.weight": (1024, 1024), "head.2.weight": (1024, 1024), "head.4.weight": (192, 1024),
        "head.4.bias": (192,),
    }  # fmt: skip
    for k, s in official.items():
        assert shapes.get(k) == s, k
    per_block = 12  # norm1 (2), qkv (2), proj (2), norm2 (2), fc1 (2), fc2 (2)
    expected_n = 48 * 2 + 2 + 4 + 1 + 2 + 8 * per_block + 2 + 6
    assert len(sd) == expected_n
    assert not any(k.startswith("blocks.8") or k.startswith("head.6") or "token_embeds.48" in k for k in sd)


def _np_1d(dim, pos):  # MAE / ClimaX utils/pos_embed.py, numpy
    omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
    out = np.einsum("m,d->md", pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def _np_2d(dim, h, w):
    grid = np.stack(np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32)), axis=0)
    grid = grid.reshape(2, 1, h, w)
    return np.concatenate([_np_1d(dim // 2, grid[0]), _np_1d(dim // 2, grid[1])], axis=1)


def test_sincos_init_matches_climax_formula():
    m = tiny()
    assert torch.equal(m.pos_embed[0], torch.from_numpy(_np_2d(32, 4, 8)).float())
    assert torch.equal(m.var_embed[0], torch.from_numpy(_np_1d(32, np.arange(len(VARS)))).float())
    # the first half of the channels encodes the column, the second half the row (MAE's meshgrid(w, h))
    pe = m.pos_embed[0].view(4, 8, 32)
    assert torch.equal(pe[0, :, :16], pe[3, :, :16]) and not torch.equal(pe[:, 0, :16], pe[:, 5, :16])
    assert torch.equal(pe[:, 0, 16:], pe[:, 7, 16:]) and not torch.equal(pe[0, :, 16:], pe[2, :, 16:])


# ------------------------------------------------------------------------------------------------------------------
# forward
# ------------------------------------------------------------------------------------------------------------------
def test_forward_shapes_and_output_subsets():
    m = tiny()
    with torch.no_grad():
        y = m(fields(), LEAD)
        assert y.shape == (2, 4, 8, 16) and torch.isfinite(y).all()
        by_name = m(fields(), LEAD, out_variables=["2m_temperature", "geopotential_500"])
        by_index = m(fields(), LEAD, out_variables=[2, 0])
        consecutive = m(fields(), LEAD, out_variables=[1, 2])  # a slice, not a list index (no host copy)
    assert torch.equal(by_name, y[:, [2, 0]]) and torch.equal(by_index, by_name)
    assert torch.equal(consecutive, y[:, [1, 2]])


def test_unpatchify_layout():
    m = tiny()
    p, (h, w), c = 2, (4, 8), len(VARS)
    tokens = torch.arange(2 * h * w * p * p * c, dtype=torch.float32).view(2, h * w, p * p * c)
    img = m.unpatchify(tokens)
    b, var, i, j, pi, qi = 1, 3, 2, 5, 1, 0
    assert img[b, var, i * p + pi, j * p + qi] == tokens[b, i * w + j, (pi * p + qi) * c + var]


def test_input_variable_subsets_and_order():
    m = random_weights()
    x = fields()
    with torch.no_grad():
        full = m(x, LEAD)
        # var_agg attends over the variable tokens, so the input order must not matter once names follow the channels
        perm = [2, 0, 3, 1]
        permuted = m(x[:, perm], LEAD, variables=[VARS[i] for i in perm])
        assert rel(full, permuted) < 1e-5
        sub = m(x[:, [0, 2]], LEAD, variables=["geopotential_500", "2m_temperature"], out_variables=[C.Z500])
        sub_idx = m(x[:, [0, 2]], LEAD, variables=[0, 2], out_variables=[0])
    assert sub.shape == (2, 1, 8, 16) and torch.equal(sub, sub_idx)
    assert rel(full[:, :1], sub) > DIFFERENT  # fewer inputs, another forecast
    with pytest.raises(ValueError, match=r"expected \(B, 2, 8, 16\)"):
        m(x, LEAD, variables=[0, 2])
    with pytest.raises(KeyError, match="unknown variable 'orography'"):
        m(x[:, :1], LEAD, variables=["orography"])


def test_lead_time_changes_output_and_shapes_agree():
    m = tiny()
    x = fields()
    with torch.no_grad():
        a = m(x, LEAD)
        b = m(x, LEAD * 2)
        assert rel(a, b) > DIFFERENT
        assert torch.equal(m(x, LEAD.view(2, 1)), a) and torch.equal(m(x, 0.72), a)
    with pytest.raises(ValueError, match="lead_times"):
        m(x, torch.ones(3))


def test_dropout_only_in_training():
    m = tiny()
    x = fields()
    with torch.no_grad():
        assert torch.equal(m(x, LEAD), m(x, LEAD))
        m.train()
        torch.manual_seed(0)
        assert not torch.equal(m(x, LEAD), m(x, LEAD))


# ------------------------------------------------------------------------------------------------------------------
# checkpoint
# ------------------------------------------------------------------------------------------------------------------
# the official names (``net.`` prefix, pre-release channel_* names) and the Lightning layout: stochattn.rehearsal
_official_state_dict = climax_official_state_dict
_lightning = lightning_checkpoint


def test_official_layout_checkpoint_loads_exactly(tmp_path):
    src = random_weights()
    sd = _official_state_dict(src)
    assert "net.channel_embed" in sd and "net.channel_agg.in_proj_weight" in sd and "net.var_embed" not in sd
    path = tmp_path / "tiny.ckpt"
    # the rest of a Lightning file (optimizer moments, schedulers) is ignored
    torch.save(_lightning(sd, epoch=7, optimizer_states=[{"state": {0: {"exp_avg": torch.ones(3)}},
                                                          "param_groups": [{"lr": 5e-4}]}]), path)  # fmt: skip
    m = tiny(seed=9)
    assert not torch.equal(m.var_embed, src.var_embed)
    res = C.load_climax_checkpoint(m, path)
    assert res == C.LoadResult([], [])
    got, want = m.state_dict(), src.state_dict()
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), k
    x = fields()
    with torch.no_grad():
        assert torch.equal(m(x, LEAD), src(x, LEAD))
    # a plain state_dict file (current names, no prefix) loads too
    torch.save(src.state_dict(), tmp_path / "plain.pt")
    m2 = tiny(seed=10)
    C.load_climax_checkpoint(m2, tmp_path / "plain.pt")
    assert all(torch.equal(m2.state_dict()[k], want[k]) for k in want)


def test_checkpoint_mismatches_are_named(tmp_path):
    sd = _official_state_dict(random_weights())
    del sd["net.blocks.1.mlp.fc2.bias"]
    sd["net.blocks.2.attn.qkv.weight"] = torch.zeros(96, 32)
    sd["net.head.4.weight"] = torch.zeros(99, 32)
    torch.save(_lightning(sd), tmp_path / "bad.ckpt")
    m = tiny(seed=9)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(C.CheckpointMismatchError) as err:
        C.load_climax_checkpoint(m, tmp_path / "bad.ckpt")
    msg = str(err.value)
    assert "1 missing key(s): blocks.1.mlp.fc2.bias" in msg
    assert "1 unexpected key(s): blocks.2.attn.qkv.weight" in msg
    assert "head.4.weight (checkpoint (99, 32), module (16, 32))" in msg
    assert all(torch.equal(m.state_dict()[k], before[k]) for k in before)  # nothing loaded
    # strict=False tolerates missing / unexpected keys but never a wrong shape
    sd["net.head.4.weight"] = torch.zeros(16, 32)
    torch.save(_lightning(sd), tmp_path / "loose.ckpt")
    res = C.load_climax_checkpoint(m, tmp_path / "loose.ckpt", strict=False)
    assert res == C.LoadResult(["blocks.1.mlp.fc2.bias"], ["blocks.2.attn.qkv.weight"])
    assert torch.equal(m.head[4].weight, torch.zeros(16, 32))
    with pytest.raises(C.CheckpointMismatchError, match="missing"):
        C.load_climax_checkpoint(m, tmp_path / "loose.ckpt")


def test_pickle_opt_in(tmp_path):
    src = random_weights()
    path = tmp_path / "pickled.ckpt"
    # Lightning stores hyper-parameters as Python objects: torch's weights_only unpickler refuses them
    torch.save(_lightning(_official_state_dict(src), hyper_parameters=argparse.Namespace(lr=5e-4)), path)
    m = tiny(seed=9)
    with pytest.raises(C.CheckpointPickleError, match="allow_pickle=True") as err:
        C.load_climax_checkpoint(m, path)
    assert "EXECUTES" in str(err.value)
    C.load_climax_checkpoint(m, path, allow_pickle=True)
    assert torch.equal(m.head[4].weight, src.head[4].weight)
    with pytest.raises(FileNotFoundError):
        C.load_climax_checkpoint(m, tmp_path / "nope.ckpt")


def test_pos_embed_resolution_needs_interpolation(tmp_path):
    src = C.build_climax(**{**TINY, "img_size": (16, 32), "seed": 5})  # 8 x 16 patch grid
    torch.save(_lightning(_official_state_dict(src)), tmp_path / "hires.ckpt")
    m = tiny(seed=9)  # 4 x 8 patch grid
    with pytest.raises(C.CheckpointMismatchError, match="interpolate_pos_embed=True"):
        C.load_climax_checkpoint(m, tmp_path / "hires.ckpt")
    C.load_climax_checkpoint(m, tmp_path / "hires.ckpt", interpolate_pos_embed=True)
    grid = src.pos_embed.detach().view(1, 8, 16, 32).permute(0, 3, 1, 2)
    want = F.interpolate(grid, size=(4, 8), mode="bicubic", align_corners=False).permute(0, 2, 3, 1).reshape(1, 32, 32)
    assert torch.allclose(m.pos_embed, want, atol=1e-6)
    assert torch.equal(m.var_embed, src.var_embed)


# ------------------------------------------------------------------------------------------------------------------
# stochastic attention
# ------------------------------------------------------------------------------------------------------------------
def test_sa_patches_blocks_and_var_agg():
    m = random_weights()
    x = fields()
    assert list(attention_modules(m)) == ["var_agg", "blocks.0.attn", "blocks.1.attn"]
    assert C.climax_sa_modules(m, ("blocks",)) == ["blocks.0.attn", "blocks.1.attn"]
    with torch.no_grad():
        det = m(x, LEAD)
        with StochasticAttention(m, None) as sa:
            assert sorted(iter_patched(m)) == ["blocks.0.attn", "blocks.1.attn", "var_agg"]
            assert torch.equal(m(x, LEAD), det)
            sa.set_nu(4)
            a, b = m(x, LEAD), m(x, LEAD)
            assert rel(det, a) > DIFFERENT and rel(a, b) > DIFFERENT
            sa.set_nu(C.climax_sa_nu(4, ("blocks",)))
            assert sa.nu == {"var_agg": None, "blocks.0.attn": 4, "blocks.1.attn": 4}
            assert rel(det, m(x, LEAD)) > DIFFERENT
            sa.set_nu(C.climax_sa_nu(1, ("var_agg",)))  # var_agg alone is patched and effective
            assert rel(det, m(x, LEAD)) > DIFFERENT
            sa.set_nu(10**6)  # the adapters' whole computation: near-deterministic weights, near-deterministic output
            assert 0 < rel(det, m(x, LEAD)) < 1e-2
        assert list(iter_patched(m)) == [] and torch.equal(m(x, LEAD), det)
        g1, g2 = (torch.Generator().manual_seed(7) for _ in range(2))
        with StochasticAttention(m, 4, generator=g1):
            r1 = m(x, LEAD)
        with StochasticAttention(m, 4, generator=g2):
            r2 = m(x, LEAD)
    assert torch.equal(r1, r2)


def _attention(dim=16, heads=2, seed=0):
    torch.manual_seed(seed)
    return C.ClimaXAttention(dim, heads).eval()


def test_attention_layout_matches_sdpa_reference():
    attn = _attention()
    x = torch.randn(3, 6, 16, generator=torch.Generator().manual_seed(2))
    q, k, v = attn.qkv(x).split(16, dim=-1)  # rows [q | k | v]
    q, k, v = (t.view(3, 6, 2, 8).transpose(1, 2) for t in (q, k, v))  # heads contiguous
    ref = F.scaled_dot_product_attention(q, k, v)  # scale head_dim^-1/2
    ref = attn.proj(ref.transpose(1, 2).reshape(3, 6, 16))
    with torch.no_grad():
        assert torch.allclose(attn(x), ref, atol=1e-6)


def test_adapter_at_nu_none_is_bit_identical():
    attn = _attention()
    x = torch.randn(3, 6, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = C._climax_attention_forward(attn, SAState(nu=None, generator=None, method="auto"), None, x)
        assert torch.equal(out, attn(x))


def test_sa_mean_and_variance_at_attention_level():
    attn = _attention()
    with torch.no_grad():  # proj = identity: the module output is the heads' attention outputs side by side
        attn.proj.weight.copy_(torch.eye(16))
        attn.proj.bias.zero_()
    x = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(2))
    n, nu = 4000, 4
    with torch.no_grad():
        det = attn(x)[0]  # (6, 16)
        probs, v = attn.probs_and_values(x)  # (1, 2, 6, 6), (1, 2, 6, 8)
        with StochasticAttention(attn, nu, generator=torch.Generator().manual_seed(11)):
            draws = attn(x.expand(n, -1, -1))  # every row samples independently
    mean, sd = draws.mean(0), draws.std(0)
    se = sd / math.sqrt(n)
    assert (sd > 0).any()
    assert ((mean - det).abs() <= 5 * se + 1e-6).all(), ((mean - det).abs() / (se + 1e-12)).max()
    # Var of (W/nu) v per output element: (sum_s p_s v_s^2 - (sum_s p_s v_s)^2) / nu
    var = ((probs @ v**2) - (probs @ v) ** 2)[0] / nu  # (2, 6, 8)
    var = var.transpose(0, 1).reshape(6, 16)
    ratio = (sd**2)[var > 1e-6] / var[var > 1e-6]
    assert 0.95 < ratio.mean() < 1.05 and ((ratio > 0.75) & (ratio < 1.33)).all(), ratio


def test_fetch_checkpoint_records_and_verifies_the_hash(tmp_path):
    from stochattn.backbones.climax import fetch_climax_checkpoint
    from stochattn.io import sha256_file

    src = tmp_path / "server.ckpt"
    src.write_bytes(b"checkpoint bytes")
    got = fetch_climax_checkpoint(tmp_path / "a.ckpt", url=f"file://{src}")
    assert got["sha256"] == sha256_file(src) and (tmp_path / "a.ckpt").read_bytes() == b"checkpoint bytes"
    with pytest.raises(ValueError):
        fetch_climax_checkpoint(tmp_path / "b.ckpt", url=f"file://{src}", sha256="0" * 64)
    assert not (tmp_path / "b.ckpt").exists()
