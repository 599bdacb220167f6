"""Patching models with stochastic attention: FT-Transformer and torch.nn.MultiheadAttention."""


import pytest
import torch
from rtdl_revisiting_models import FTTransformer
from torch import nn

import stochattn.patch as patch_mod
from stochattn.patch import StochasticAttention, attention_modules, predictive_samples


def _ft(n_blocks=2, d_block=32, seed=0):
    torch.manual_seed(seed)
    kw = FTTransformer.get_default_kwargs(n_blocks=n_blocks)
    kw.update(d_block=d_block, attention_dropout=0.0, ffn_dropout=0.0, residual_dropout=0.0)
    model = FTTransformer(n_cont_features=6, cat_cardinalities=[], d_out=1, **kw).eval()
    return model


def _forward(model):
    return lambda x: model(x, None).squeeze(-1)


X = torch.randn(64, 6, generator=torch.Generator().manual_seed(1))


def test_finds_rtdl_attention_modules():
    names = list(attention_modules(_ft(n_blocks=3)))
    assert len(names) == 3 and all(n.endswith("attention") for n in names)


def test_ft_transformer_spread_shrinks_like_inverse_sqrt_nu_and_unpatch_restores_exact_output():
    model = _ft()
    f = _forward(model)
    with torch.no_grad():
        det = f(X)
    S = 400
    sd = {}
    with StochasticAttention(model, nu=1, generator=torch.Generator().manual_seed(0)) as sa:
        one = predictive_samples(f, X, num_samples=2)
        assert not torch.equal(one[0], one[1])
        for nu in (100, 10_000):
            sa.set_nu(nu)
            samples = predictive_samples(f, X, num_samples=S)
            sd[nu] = samples.std(0)  # (64,) per-point spread
    with torch.no_grad():
        assert torch.equal(f(X), det), "unpatching must restore the exact original outputs"
    ratio = (sd[100] / sd[10_000]).mean()
    # Prop. 2 + linearisation at large nu: per-point SD ratio = sqrt(100) = 10. The relative SE of one SD
    # estimate from S draws is 1/sqrt(2(S-1)) = 3.5 %, of a ratio 5 %, of the mean of 64 ratios < 1 %: 5 % bound.
    assert ratio == pytest.approx(10.0, rel=0.05)


def test_nu_none_is_bit_identical_and_patch_is_removed_by_context_manager():
    model = _ft()
    f = _forward(model)
    with torch.no_grad():
        det = f(X)
        with StochasticAttention(model, nu=None):
            assert torch.equal(f(X), det)
        assert not list(patch_mod.iter_patched(model))


def test_per_layer_nu_keeps_a_none_layer_deterministic():
    model = _ft(n_blocks=3)
    names = list(attention_modules(model))
    captured = {n: [] for n in names}
    mods = attention_modules(model)
    hooks = [mods[n].register_forward_hook(lambda m, i, o, n=n: captured[n].append(o.detach().clone())) for n in names]
    f = _forward(model)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad(), StochasticAttention(model, nu={names[1]: 2}, generator=g) as sa:
        assert sa.nu == {names[0]: None, names[1]: 2, names[2]: None}
        f(X)
        f(X)
    for h in hooks:
        h.remove()
    assert torch.equal(*captured[names[0]])  # layer 0 deterministic, same input both times
    assert not torch.equal(*captured[names[1]])  # layer 1 stochastic
    assert not torch.equal(*captured[names[2]])  # deterministic itself, but its input differs


def test_per_layer_list_glob_and_index_forms_resolve():
    model = _ft(n_blocks=3)
    names = list(attention_modules(model))
    with StochasticAttention(model, nu=[4, None, 16]) as sa:
        assert list(sa.nu.values()) == [4, None, 16]
        sa.set_nu({"*": 8, -1: None})
        assert list(sa.nu.values()) == [8, 8, None]
        sa.set_nu({"*blocks.0*": [1, None, 3, 4, 5, 6, 7, 8]})
        head_nu = sa.nu[names[0]]
        assert head_nu.shape == (8, 1) and head_nu[1, 0] == 0
    with pytest.raises(ValueError, match="matches no attention module"):
        StochasticAttention(model, nu={"nope*": 3})
    with pytest.raises(ValueError, match="per-layer values"):
        StochasticAttention(model, nu=[1, 2])
    with pytest.raises(ValueError, match="per-head values"):
        StochasticAttention(model, nu={0: [1, 2]})
    with pytest.raises(ValueError, match="positive integer"):
        StochasticAttention(model, nu=0)
    assert not list(patch_mod.iter_patched(model))
    with pytest.raises(ValueError, match="no supported attention module"):
        StochasticAttention(nn.Linear(3, 3), nu=4)


def _identity_weights(monkeypatch):
    monkeypatch.setattr(patch_mod, "stochastic_weights", lambda probs, nu, **kw: probs)
    monkeypatch.setattr(patch_mod, "stochastic_attention", lambda probs, value, nu, **kw: probs @ value)


def test_rtdl_adapter_recomputes_the_original_attention(monkeypatch):
    """With SA's sampler replaced by the identity, the adapter must reproduce rtdl's forward."""
    model = _ft()
    f = _forward(model)
    with torch.no_grad():
        det = f(X)
        _identity_weights(monkeypatch)
        with StochasticAttention(model, nu=3):
            assert torch.allclose(f(X), det, atol=1e-6)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("mask", ["none", "key_padding", "bool_attn", "float_attn", "causal"])
def test_torch_mha_adapter_recomputes_the_original_attention(monkeypatch, batch_first, mask):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=batch_first).eval()
    B, L = 3, 5
    x = torch.randn(B, L, 16) if batch_first else torch.randn(L, B, 16)
    kwargs = {}
    if mask == "key_padding":
        kwargs["key_padding_mask"] = torch.tensor([[False] * 5, [False, False, False, True, True],
                                                   [False] * 4 + [True]])  # fmt: skip
    elif mask == "bool_attn":
        kwargs["attn_mask"] = torch.rand(L, L) > 0.7
        kwargs["attn_mask"].fill_diagonal_(False)
    elif mask == "float_attn":
        kwargs["attn_mask"] = torch.randn(L, L)
    elif mask == "causal":
        kwargs["attn_mask"] = nn.Transformer.generate_square_subsequent_mask(L)
        kwargs["is_causal"] = True
    with torch.no_grad():
        ref_out, ref_w = mha(x, x, x, average_attn_weights=False, **kwargs)
        _identity_weights(monkeypatch)
        with StochasticAttention(mha, nu=2):
            out, w = mha(x, x, x, average_attn_weights=False, **kwargs)
    assert torch.allclose(out, ref_out, atol=1e-5)
    assert torch.allclose(w, ref_w, atol=1e-6)


def _mha_reference(mha, x, nu, rng, batch_first, attn_mask=None, key_padding_mask=None):
    """nn.MultiheadAttention's forward written out with SA on its masked softmax (torch's mask conventions: boolean
    True = not allowed, float added), drawing from the stream ``rng``'s next call: the adapter's weights path."""
    import math

    import torch.nn.functional as F

    from stochattn.attention import call_generator, stochastic_attention

    xs = x.transpose(0, 1) if batch_first else x  # (L, B, E)
    L, B, E = xs.shape
    H = mha.num_heads
    Dh = E // H
    q, k, v = F.linear(xs, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1)
    q = (q * (1.0 / math.sqrt(Dh))).view(L, B, H, Dh).permute(1, 2, 0, 3)
    k, v = (t.reshape(L, B, H, Dh).permute(1, 2, 0, 3) for t in (k, v))
    logits = q @ k.transpose(-2, -1)
    if attn_mask is not None:
        logits = logits.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else logits + attn_mask
    if key_padding_mask is not None:
        logits = logits.masked_fill(key_padding_mask.view(B, 1, 1, L), float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if attn_mask is not None or key_padding_mask is not None:
        probs = torch.nan_to_num(probs, nan=0.0)
    out = stochastic_attention(probs, v, nu, generator=call_generator(rng, "cpu"))
    out = mha.out_proj(out.permute(2, 0, 1, 3).reshape(L, B, E))
    return out.transpose(0, 1) if batch_first else out


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("mask", ["none", "key_padding", "bool_attn", "float_attn", "causal", "float_and_padding"])
def test_torch_mha_without_weights_takes_the_sdpa_path_with_the_same_draws(batch_first, mask):
    """need_weights=False (nn.TransformerEncoderLayer, ClimaX's variable aggregation): the adapter calls SA's SDPA
    path (the fused kernel on CUDA), with nn.MultiheadAttention's masks converted to SDPA's; on the CPU the output is
    the written-out forward's with the same draws, bit for bit, in every mask kind (a fully masked row included)."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=batch_first).eval()
    B, L = 3, 5
    x = torch.randn(B, L, 16) if batch_first else torch.randn(L, B, 16)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True], [True] * 5])  # row 2 fully masked
    kwargs = {
        "none": {},
        "key_padding": {"key_padding_mask": padding},
        "bool_attn": {"attn_mask": (torch.rand(L, L) > 0.6).fill_diagonal_(False)},
        "float_attn": {"attn_mask": torch.randn(L, L)},
        "causal": {"attn_mask": nn.Transformer.generate_square_subsequent_mask(L), "is_causal": True},
        "float_and_padding": {"attn_mask": torch.randn(L, L), "key_padding_mask": padding},
    }[mask]
    sdpa_calls = []
    with torch.no_grad(), StochasticAttention(mha, nu=3, generator=torch.Generator().manual_seed(4)) as sa:
        state = next(iter(sa._states.values()))
        original_sdpa = state.sdpa
        state.sdpa = lambda *a: sdpa_calls.append(a) or original_sdpa(*a)
        rng = state.rng.clone()
        out, w = mha(x, x, x, need_weights=False, **kwargs)
        ref = _mha_reference(mha, x, 3, rng, batch_first, kwargs.get("attn_mask"), kwargs.get("key_padding_mask"))
    assert w is None and len(sdpa_calls) == 1
    assert torch.equal(out, ref)
    assert torch.equal(rng, state.rng) and state.rng[1].item() == 1  # one call taken from the stream, as the reference


def test_torch_mha_per_head_nu_and_encoder_fast_path_is_bypassed():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        det = enc(x)
        with StochasticAttention(enc, nu=4, generator=torch.Generator().manual_seed(0)):
            assert not torch.allclose(enc(x), det), "SA must act inside nn.TransformerEncoder in inference mode"
        assert torch.equal(enc(x), det)
        assert torch.backends.mha.get_fastpath_enabled()
        mha = enc.layers[0].self_attn
        _, ref_w = mha(x, x, x, average_attn_weights=False)
        with StochasticAttention(mha, nu={"": [None, 3, None, 50]}, generator=torch.Generator().manual_seed(0)):
            _, w = mha(x, x, x, average_attn_weights=False)
    assert torch.equal(w[:, 0], ref_w[:, 0]) and torch.equal(w[:, 2], ref_w[:, 2])
    assert not torch.allclose(w[:, 1], ref_w[:, 1]) and not torch.allclose(w[:, 3], ref_w[:, 3])
    counts = w[:, 1] * 3
    assert torch.allclose(counts, counts.round(), atol=1e-5)


def test_predictive_samples_folds_passes_into_the_batch():
    model = _ft()
    f = _forward(model)
    calls = []
    g = lambda x: (calls.append(len(x)), f(x))[1]  # noqa: E731
    with StochasticAttention(model, nu=4, generator=torch.Generator().manual_seed(0)):
        s = predictive_samples(g, X, num_samples=10, max_rows=None)
        assert s.shape == (10, 64) and calls == [640]
        calls.clear()
        s = predictive_samples(g, X, num_samples=10)  # "auto": AUTO_CPU_ROWS inputs per call on the CPU
        assert s.shape == (10, 64) and calls == [512, 128]
        calls.clear()
        s = predictive_samples(g, X, num_samples=10, max_rows=200)
        assert s.shape == (10, 64) and calls == [192, 192, 192, 64]
        assert len({tuple(r.tolist()) for r in s}) == 10
        calls.clear()
        s = predictive_samples(g, X, num_samples=3, max_rows=50)  # fewer rows allowed than inputs: chunk inputs
        assert s.shape == (3, 64) and calls == [50, 50, 50, 14, 14, 14]
    with torch.no_grad():
        det = f(X)
    with StochasticAttention(model, nu=10**7, generator=torch.Generator().manual_seed(0)):
        near = predictive_samples(f, X, num_samples=2, max_rows=50)
    assert torch.allclose(near, det.expand(2, -1), atol=1e-3)  # rows stay aligned with their inputs
    with pytest.raises(ValueError, match="num_samples"):
        predictive_samples(f, X, num_samples=0)
    with pytest.raises(ValueError, match="max_rows"):
        predictive_samples(f, X, num_samples=2, max_rows="many")
