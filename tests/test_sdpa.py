"""Stochastic attention through F.scaled_dot_product_attention: the law (Propositions 1-2) with masks, is_causal,
scale, GQA and per-head nu; scoping of the dispatcher; coverage reports and warnings; fast-path reference count."""

import math
import threading
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import stochattn.patch as patch_mod
from stochattn.patch import SACoverageWarning, StochasticAttention, attention_modules, predictive_samples

TORCH_SDPA = F.scaled_dot_product_attention
# |z| bound for a standard-normal statistic over up to ~500 comparisons per test: P(|z| > 5) ~ 6e-7 each.
Z_MAX = 5.0


class SDPAModule(nn.Module):
    """Calls F.scaled_dot_product_attention on given q (B, H, L, E), k, v; records nothing of its own."""

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads

    def forward(self, q, k, v, **kwargs):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


def _qkv(B=1, H=2, Hk=None, L=3, S=5, E=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, L, E, generator=g, dtype=torch.float64) * 1.5
    k = torch.randn(1, Hk or H, S, E, generator=g, dtype=torch.float64)
    v = torch.eye(S, dtype=torch.float64).expand(1, Hk or H, S, S)  # V = identity: the output *is* the weights
    return tuple(t.expand(B, *t.shape[1:]) for t in (q, k, v))


def _check_law(w, pi, nu):
    """w (N, H, L, S) draws, pi (H, L, S), nu (H,) per head: mean pi, covariance (diag(pi) - pi pi^T) / nu."""
    N = w.shape[0]
    var = pi * (1 - pi) / nu.view(-1, 1, 1)
    se = torch.sqrt(var / N)
    z = (w.mean(0) - pi) / torch.where(se > 0, se, 1.0)
    assert z.abs().max() < Z_MAX, z
    dev = w - pi
    prods = dev[..., :, None] * dev[..., None, :]  # (N, H, L, S, S)
    cov = (torch.diag_embed(pi) - pi[..., :, None] * pi[..., None, :]) / nu.view(-1, 1, 1, 1)
    est, se = prods.mean(0), prods.std(0) / math.sqrt(N)
    z = (est - cov) / torch.where(se > 0, se, 1.0)
    assert z.abs().max() < Z_MAX, z
    assert torch.all(w[:, pi == 0] == 0), "a masked key was drawn"


def _mask(kind, L=3, S=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    if kind == "bool":
        m = torch.rand(L, S, generator=g) > 0.4
        m[:, 0] = True
        return {"attn_mask": m}
    if kind == "float":
        m = torch.randn(L, S, generator=g, dtype=torch.float64)
        m[torch.rand(L, S, generator=g) > 0.6] = float("-inf")
        m[:, 1] = 0.0
        return {"attn_mask": m}
    if kind == "causal":
        return {"is_causal": True}
    if kind == "scale":
        return {"scale": 0.3}
    return {}


@pytest.mark.parametrize("kind", ["none", "bool", "float", "causal", "scale", "gqa"])
@pytest.mark.parametrize("nu", [1, 7])
def test_law_through_sdpa(kind, nu):
    N = 4000
    gqa = kind == "gqa"
    q, k, v = _qkv(B=N, H=4 if gqa else 2, Hk=2 if gqa else None)
    kwargs = {"enable_gqa": True} if gqa else _mask(kind)
    module = SDPAModule(q.shape[1])
    pi = TORCH_SDPA(q[:1], k[:1], v[:1], **kwargs)[0]  # torch's own probabilities (V = identity)
    with torch.no_grad(), StochasticAttention(module, nu=nu, generator=torch.Generator().manual_seed(nu)):
        w = module(q, k, v, **kwargs)
    _check_law(w, pi, torch.full((q.shape[1],), float(nu), dtype=torch.float64))
    counts = w * nu
    assert torch.allclose(counts, counts.round(), atol=1e-9) and torch.allclose(w.sum(-1), torch.ones(()).double())


def test_law_with_per_head_nu_and_a_deterministic_head():
    N = 4000
    q, k, v = _qkv(B=N, H=3)
    module = SDPAModule(3)
    pi = TORCH_SDPA(q[:1], k[:1], v[:1], is_causal=True)[0]
    g = torch.Generator().manual_seed(0)
    with torch.no_grad(), StochasticAttention(module, nu={"": np.array([2, 0, 9])}, generator=g) as sa:
        assert sa.nu[""].view(-1).tolist() == [2, 0, 9]  # 0 = deterministic head
        w = module(q, k, v, is_causal=True)
    # our masked softmax, not torch's kernel
    assert torch.allclose(w[:, 1], pi[1].expand(N, -1, -1), atol=1e-12, rtol=0)
    _check_law(w[:, [0, 2]], pi[[0, 2]], torch.tensor([2.0, 9.0], dtype=torch.float64))


def test_fully_masked_row_is_zero_like_torch():
    q, k, v = _qkv(B=2)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    module = SDPAModule(2)
    ref = TORCH_SDPA(q, k, v, attn_mask=mask)
    with torch.no_grad(), StochasticAttention(module, nu=3):
        out = module(q, k, v, attn_mask=mask)
    assert torch.all(ref[:, :, 1] == 0) and torch.all(out[:, :, 1] == 0) and torch.isfinite(out).all()


class TwoBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = SDPAModule(2), SDPAModule(2)

    def forward(self, q, k, v):
        return self.a(q, k, v), self.b(q, k, v)


def test_nu_is_resolved_by_the_calling_module_and_nothing_outside_is_touched():
    q, k, v = _qkv(B=8)
    model = TwoBlocks()
    other = SDPAModule(2)
    det = TORCH_SDPA(q, k, v)
    with torch.no_grad(), StochasticAttention(model, nu={"a": 2}, generator=torch.Generator().manual_seed(0)) as sa:
        assert F.scaled_dot_product_attention is TORCH_SDPA  # never swapped: the frame is a torch-function mode
        a, b = model(q, k, v)
        assert F.scaled_dot_product_attention is TORCH_SDPA
        assert not torch.equal(a, det) and torch.equal(b, det)
        assert torch.equal(other(q, k, v), det)  # an unpatched model
        assert sa.patched == {"a": "sdpa: SDPAModule", "b": "sdpa: SDPAModule"}
        assert "patched=2" in repr(sa) and "unpatched=0" in repr(sa)


class WaitingSDPA(SDPAModule):
    """Draws, then keeps its frame open until another thread has called SDPA."""

    def forward(self, q, k, v, inside=None, done=None):
        out = F.scaled_dot_product_attention(q, k, v)
        inside.set()
        assert done.wait(10)
        return out


def test_another_thread_is_unaffected_while_a_patched_forward_runs():
    q, k, v = _qkv(B=4)
    det = TORCH_SDPA(q, k, v)
    inside, done, seen = threading.Event(), threading.Event(), {}

    def other_thread():
        assert inside.wait(10)
        seen["dispatcher_installed"] = F.scaled_dot_product_attention is not TORCH_SDPA
        seen["out"] = F.scaled_dot_product_attention(q, k, v)
        done.set()

    module = WaitingSDPA(2)
    t = threading.Thread(target=other_thread)
    t.start()
    with torch.no_grad(), StochasticAttention(module, nu=1, generator=torch.Generator().manual_seed(0)):
        out = module(q, k, v, inside=inside, done=done)
    t.join(10)
    # nothing global is swapped (the frame is a torch-function mode, per thread): the other thread runs torch's SDPA
    assert not seen["dispatcher_installed"] and torch.equal(seen["out"], det)
    assert not torch.equal(out, det) and F.scaled_dot_product_attention is TORCH_SDPA


class DropoutSDPA(SDPAModule):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)


def test_dropout_is_ignored_in_eval_and_refused_in_training():
    q, k, v = _qkv(B=2)
    module = DropoutSDPA(2).eval()
    with StochasticAttention(module, nu=10**7):
        with pytest.warns(UserWarning, match="dropout_p=0.1 in eval mode"):
            out = module(q, k, v)
        assert torch.allclose(out, TORCH_SDPA(q, k, v), atol=1e-3)  # no dropout: SA only
        module.train()
        with pytest.raises(NotImplementedError, match="model.eval"):
            module(q, k, v)


class HandAttention(nn.Module):
    """An attention module SA cannot patch (explicit softmax, no SDPA call, not registered)."""

    def forward(self, x):
        return torch.softmax(x @ x.transpose(-2, -1), -1) @ x


class SigLIPLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder_attn = HandAttention()
        self.head = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        x = self.encoder_attn(x)
        return self.head(x, x, x, need_weights=False)[0]


def test_unpatched_attention_like_modules_warn_or_raise_with_strict():
    model = SigLIPLike().eval()
    with pytest.warns(SACoverageWarning, match="encoder_attn"):
        sa = StochasticAttention(model, nu=4)
    assert list(sa.modules) == ["head"] and list(sa.unpatched) == ["encoder_attn"]
    assert "unpatched=1" in repr(sa)
    sa.remove()
    with pytest.raises(RuntimeError, match="HandAttention"):
        StochasticAttention(model, nu=4, strict=True)
    assert not list(patch_mod.iter_patched(model))
    with pytest.raises(ValueError, match="no supported attention module") as err:
        StochasticAttention(HandAttention(), nu=4)
    for name in ("register_attention", "stochattn.backbones.timesfm", "stochattn.backbones.climax",
                 "MultiheadAttention"):
        assert name in str(err.value)


class SometimesSDPA(SDPAModule):
    def forward(self, q, k, v, fused=True):
        if fused:
            return F.scaled_dot_product_attention(q, k, v)
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v


def test_a_patched_module_that_makes_no_draw_warns_or_raises_with_strict():
    q, k, v = _qkv(B=2)
    module = SometimesSDPA(2)
    with StochasticAttention(module, nu=4):
        module(q, k, v)
        with pytest.warns(SACoverageWarning, match="no stochastic draw"):
            module(q, k, v, fused=False)
    with StochasticAttention(module, nu=4, strict=True):
        with pytest.raises(RuntimeError, match="no stochastic draw"):
            module(q, k, v, fused=False)


def test_predictive_samples_warns_when_nothing_is_stochastic():
    x = _qkv(B=3)[0]
    module = SDPAModule(2)
    with pytest.warns(SACoverageWarning, match="all 3 passes are identical"):
        predictive_samples(lambda t: module(t, t, t), x, num_samples=3)
    with StochasticAttention(module, nu=2), warnings.catch_warnings():
        warnings.simplefilter("error", SACoverageWarning)
        predictive_samples(lambda t: module(t, t, t), x, num_samples=3)


def _encoder(seed):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()


def test_fast_path_switch_is_reference_counted_across_out_of_order_removal():
    enc_a, enc_b = _encoder(0), _encoder(1)
    x = torch.randn(2, 7, 16)
    assert torch.backends.mha.get_fastpath_enabled()
    with torch.no_grad():
        det_b = enc_b(x)
        a = StochasticAttention(enc_a, nu=4)
        b = StochasticAttention(enc_b, nu=4)
        a.remove()
        assert not torch.backends.mha.get_fastpath_enabled()
        assert not torch.allclose(enc_b(x), det_b), "B must stay stochastic after A is removed"
        a.apply()
        b.remove()
        assert not torch.backends.mha.get_fastpath_enabled()
        a.remove()
        b.remove()  # twice: no double release
        assert torch.backends.mha.get_fastpath_enabled()
        assert torch.equal(enc_b(x), det_b)


class MyMHA(nn.MultiheadAttention):
    pass


class OverridingMHA(nn.MultiheadAttention):
    def forward(self, *args, **kwargs):
        return super().forward(*args, **kwargs)


class MySDPA(SDPAModule):
    pass


def test_subclasses_of_supported_classes():
    model = nn.ModuleDict({"mine": MyMHA(8, 2), "sdpa": MySDPA(2), "over": OverridingMHA(8, 2)})
    assert list(attention_modules(model)) == ["mine", "sdpa"]
    with pytest.warns(SACoverageWarning, match="over"):
        sa = StochasticAttention(model, nu=4)
    assert sa.patched == {"mine": "adapter: MyMHA", "sdpa": "sdpa: MySDPA"}
    sa.remove()


@pytest.mark.parametrize("nu", [np.int64(8), torch.tensor(8), np.int32(8), torch.tensor(8.0)])
def test_numpy_and_torch_integer_scalars_are_accepted(nu):
    model = TwoBlocks()
    with StochasticAttention(model, nu=nu) as sa:
        assert sa.nu == {"a": 8, "b": 8} and all(type(v) is int for v in sa.nu.values())
        sa.set_nu({"a": nu, 1: [np.int64(2), None]})
        assert sa.nu["a"] == 8 and sa.nu["b"].view(-1).tolist() == [2, 0]
    with pytest.raises(ValueError, match="positive integer"):
        StochasticAttention(model, nu=np.int64(0))
    with pytest.raises(ValueError, match="positive integer"):
        StochasticAttention(model, nu=np.bool_(True))


class FailingSDPA(SDPAModule):
    def forward(self, q, k, v):
        F.scaled_dot_product_attention(q, k, v)
        raise KeyError("boom")


def test_an_exception_inside_the_forward_restores_torch_sdpa():
    q, k, v = _qkv(B=2)
    module = FailingSDPA(2)
    with StochasticAttention(module, nu=2):
        with pytest.raises(KeyError, match="boom"):
            module(q, k, v)
        assert F.scaled_dot_product_attention is TORCH_SDPA
