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
