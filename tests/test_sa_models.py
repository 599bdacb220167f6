"""SA on third-party transformers with no user code: Hugging Face (eager and sdpa), timm ViT (fused_attn on and off),
torch.nn.TransformerEncoder / Decoder. Tiny models from configs with random weights."""

import math
import warnings

import pytest
import torch
from torch import nn

import stochattn.attention as attention_mod
from stochattn.patch import SACoverageWarning, StochasticAttention, predictive_samples

transformers = pytest.importorskip("transformers", reason="the Hugging Face tests need transformers")

Z_MAX = 5.0  # |z| bound per comparison (P ~ 6e-7 each; a few hundred comparisons per test)
IMPLS = ["eager", "sdpa"]


def _cfg(cls, impl, **kw):
    return cls(attn_implementation=impl, **kw)


def bert(impl, layers=2):
    cfg = _cfg(transformers.BertConfig, impl, vocab_size=50, hidden_size=16, num_hidden_layers=layers,
               num_attention_heads=2, intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertModel(cfg, add_pooling_layer=False).eval()


def vit(impl):
    cfg = _cfg(transformers.ViTConfig, impl, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=32, image_size=8, patch_size=4, num_channels=3)
    return transformers.ViTModel(cfg, add_pooling_layer=False).eval()


def patchtst(impl):
    cfg = _cfg(transformers.PatchTSTConfig, impl, num_input_channels=2, context_length=16, patch_length=4,
               patch_stride=4, d_model=16, num_attention_heads=2, num_hidden_layers=2, ffn_dim=32)
    return transformers.PatchTSTModel(cfg).eval()


def gpt2(impl):
    cfg = _cfg(transformers.GPT2Config, impl, vocab_size=50, n_embd=16, n_layer=2, n_head=2, n_positions=16,
               bos_token_id=0, eos_token_id=0)
    return transformers.GPT2Model(cfg).eval()


def llama(impl):  # grouped-query attention: 4 query heads, 2 key/value heads
    cfg = _cfg(transformers.LlamaConfig, impl, vocab_size=50, hidden_size=16, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, intermediate_size=32)
    return transformers.LlamaModel(cfg).eval()


def siglip(impl):
    cfg = _cfg(transformers.SiglipVisionConfig, impl, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=32, image_size=8, patch_size=4)
    return transformers.SiglipVisionModel(cfg).eval()


def tst(impl):  # transformers declares no sdpa support for it: eager only
    cfg = _cfg(transformers.TimeSeriesTransformerConfig, impl, prediction_length=4, context_length=8,
               lags_sequence=[1, 2], num_time_features=1, input_size=1, d_model=16, encoder_layers=1, decoder_layers=1,
               encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)
    return transformers.TimeSeriesTransformerModel(cfg).eval()


def _series_out(m):
    g = torch.Generator().manual_seed(0)
    past, future = torch.randn(2, 10, generator=g), torch.randn(2, 4, generator=g)
    return m(past_values=past, past_time_features=past[..., None], past_observed_mask=torch.ones(2, 10),
             future_values=future, future_time_features=future[..., None]).last_hidden_state


def _tokens(batch=2, length=6):
    return torch.arange(batch * length).view(batch, length) % 50


PAD = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]])  # right padding, left padding


def _tokens_out(m):
    """Hidden states of the real (unpadded) tokens (R, C): a padded position's output is not compared (in a causal
    eager model a left-padded query sees no key; SA gives it zero weights, eager a uniform average)."""
    return m(_tokens(), attention_mask=PAD).last_hidden_state[PAD.bool()]


def _images(m):
    return m(torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0)))


def _series():
    return torch.randn(2, 16, 2, generator=torch.Generator().manual_seed(0))


FAMILIES = {  # name -> (builder, forward(model) -> tensor, attention modules)
    "bert": (bert, _tokens_out, 2),
    "vit": (vit, lambda m: _images(m).last_hidden_state, 2),
    "patchtst": (patchtst, lambda m: m(past_values=_series()).last_hidden_state, 2),
    "gpt2": (gpt2, _tokens_out, 2),
    "llama": (llama, _tokens_out, 2),
    "siglip": (siglip, lambda m: _images(m).pooler_output, 3),
    "time_series_transformer": (tst, _series_out, 3),
}
CASES = [(f, i) for f in FAMILIES for i in IMPLS if (f, i) != ("time_series_transformer", "sdpa")]


@pytest.mark.parametrize("family, impl", CASES)
def test_hugging_face_models_are_patched_with_no_user_code(family, impl):
    build, forward, n_attention = FAMILIES[family]
    torch.manual_seed(0)
    model = build(impl)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", SACoverageWarning)  # every attention module patched, every one draws
        det = forward(model)
        with StochasticAttention(model, nu=None) as sa:
            assert len(sa.modules) == n_attention and sa.unpatched == {}
            assert torch.equal(forward(model), det)
            sa.set_nu(2)
            a, b = forward(model), forward(model)
            assert not torch.allclose(a, det, atol=1e-4) and not torch.allclose(a, b, atol=1e-4)
            sa.set_nu(10**7)
            assert torch.allclose(forward(model), det, atol=2e-3)
        assert torch.equal(forward(model), det)
    kinds = set(sa.patched.values())
    if family == "siglip":  # the encoder self-attentions *and* the pooling head's nn.MultiheadAttention
        assert kinds == {"transformers: SiglipAttention", "adapter: MultiheadAttention"}
    else:
        assert all(k.startswith("transformers: ") for k in kinds)


def _record_weights(monkeypatch, module=attention_mod):
    """Make ``module``'s SA path (attention: SDPA; patch: the adapters) keep every weight matrix it draws (same
    sampler, dense product)."""
    drawn = []

    def recording(probs, value, nu, *, generator=None, method="auto"):
        w = attention_mod.stochastic_weights(probs, nu, generator=generator, method=method, validate=False)
        drawn.append(w)
        return w @ value

    monkeypatch.setattr(module, "stochastic_attention", recording)
    return drawn


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_padded_and_future_tokens_are_never_drawn(monkeypatch, family, impl):
    build, forward, _ = FAMILIES[family]
    torch.manual_seed(0)
    model = build(impl)
    drawn = _record_weights(monkeypatch)
    with torch.no_grad(), StochasticAttention(model, nu=64, generator=torch.Generator().manual_seed(0)):
        forward(model)
    assert len(drawn) == 2
    key_ok = PAD.bool()[:, None, None, :]  # (B, 1, 1, S)
    if family != "bert":  # causal
        key_ok = key_ok & torch.ones(6, 6, dtype=torch.bool).tril()
    for w in drawn:  # (B, H, L, S)
        assert w.shape[-2:] == (6, 6) and torch.all(w[~key_ok.expand_as(w)] == 0), "a masked token was drawn"
        rows = w.sum(-1)
        assert torch.all(((rows - 1).abs() < 1e-5) | (rows == 0))  # rows with no visible key: zero weights


def _law(samples, det, nu_note=""):
    """samples (N, ...) vs det (...): |mean - det| / SE over every output, SE from the sample SD."""
    se = samples.std(0) / math.sqrt(samples.shape[0])
    z = (samples.mean(0) - det) / se.clamp_min(1e-12)
    assert z.abs().max() < Z_MAX, f"{nu_note} max |z| {float(z.abs().max()):.2f}"


@pytest.mark.parametrize("impl", IMPLS)
def test_law_of_the_attention_output_through_the_hf_path(impl):
    """BERT, one layer, padding: the self-attention output (B, L, H*D) has mean pi V and covariance
    V^T (diag(pi) - pi pi^T) V / nu per head and row, with pi from the unpatched eager model's attention maps."""
    torch.manual_seed(0)
    model, eager = bert(impl, layers=1), bert("eager", layers=1)
    eager.load_state_dict(model.state_dict())
    attn = model.encoder.layer[0].attention.self
    N, nu, H, D = 3000, 3, 2, 8
    ids, mask = _tokens(1, 6), PAD[:1]
    captured = {}
    hooks = [eager.encoder.layer[0].attention.self.value.register_forward_hook(lambda m, i, o: captured.update(v=o)),
             attn.register_forward_hook(lambda m, i, o: captured.update(out=o[0]))]
    with torch.no_grad():
        pi = eager(ids, attention_mask=mask, output_attentions=True).attentions[0][0]  # (H, L, S)
        V = captured["v"][0].view(6, H, D).transpose(0, 1)  # (H, S, D)
        with StochasticAttention(model, nu=nu, generator=torch.Generator().manual_seed(1)):
            model(ids.expand(N, -1), attention_mask=mask.expand(N, -1))
    for h in hooks:
        h.remove()
    out = captured["out"].view(N, 6, H, D).transpose(1, 2)  # (N, H, L, D)
    assert torch.all(pi[..., 4:] == 0)
    mean = pi @ V  # (H, L, D)
    cov = V.transpose(-2, -1)[:, None] @ (torch.diag_embed(pi) - pi[..., :, None] * pi[..., None, :]) @ V[:, None] / nu
    z = (out.mean(0) - mean) / torch.sqrt(torch.diagonal(cov, dim1=-2, dim2=-1) / N)
    assert z.abs().max() < Z_MAX, z
    dev = out - mean
    prods = dev[..., :, None] * dev[..., None, :]  # (N, H, L, D, D)
    z = (prods.mean(0) - cov) / (prods.std(0) / math.sqrt(N))
    assert z.abs().max() < Z_MAX, z


def test_gqa_per_head_nu_in_prefill_and_one_token_decoding():
    """Llama, 4 query heads sharing 2 key/value heads: heads 1 and 3 deterministic, 0 and 2 stochastic, in the
    prefill (repeat_kv) and in a one-token decoding step with a padding mask (transformers' pack_gqa)."""
    torch.manual_seed(0)
    model = llama("sdpa")
    o_proj = model.layers[0].self_attn.o_proj
    seen = []
    hook = o_proj.register_forward_pre_hook(lambda m, args: seen.append(args[0].view(*args[0].shape[:2], 4, 4)))
    ids, mask = _tokens(2, 6), PAD
    with torch.no_grad():
        prefill = model(ids, attention_mask=mask, use_cache=True)
        step = dict(input_ids=ids[:, :1], attention_mask=torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], 1))
        model(**step, cache=prefill.past_key_values)
        det = seen[:]
        seen.clear()
        with StochasticAttention(model, nu={"*": [1, None, 2, None]}, generator=torch.Generator().manual_seed(0)):
            prefill = model(ids, attention_mask=mask, use_cache=True)
            model(**step, cache=prefill.past_key_values)
    hook.remove()
    for ref, out in zip(det, seen[: len(det)]):
        assert torch.allclose(out[:, :, [1, 3]], ref[:, :, [1, 3]], atol=1e-5)
        assert not torch.allclose(out[:, :, [0, 2]], ref[:, :, [0, 2]], atol=1e-3)


def test_a_family_whose_eager_attention_sdpa_cannot_compute_is_reported_not_patched():
    """Gemma 2 is eager-only (attention-logit softcapping): its attention is named, not silently run as sdpa."""
    cfg = transformers.Gemma2Config(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                    num_key_value_heads=1, head_dim=8, intermediate_size=32,
                                    attn_implementation="eager")  # fmt: skip
    with pytest.raises(ValueError, match="no supported attention module.*Gemma2Attention"):
        StochasticAttention(transformers.Gemma2Model(cfg).eval(), nu=4)


def test_an_attention_path_that_bypasses_the_registry_warns():
    """GPT-2's eager ``reorder_and_upcast_attn`` computes attention by hand, outside the registry."""
    cfg = transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=16, bos_token_id=0,
                                  eos_token_id=0, reorder_and_upcast_attn=True, attn_implementation="eager")
    model = transformers.GPT2Model(cfg).eval()
    with torch.no_grad(), StochasticAttention(model, nu=4):
        with pytest.warns(SACoverageWarning, match="no stochastic draw"):
            model(_tokens())
        with pytest.warns(SACoverageWarning, match="identical"):
            predictive_samples(lambda t: model(t).last_hidden_state, _tokens(), num_samples=2)


# --------------------------------------------------------------------------------------------------------------
# timm
# --------------------------------------------------------------------------------------------------------------
def _timm_vit(fused):
    timm = pytest.importorskip("timm", reason="timm (and torchvision) are not installed")
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(img_size=8, patch_size=4, embed_dim=16, depth=2, num_heads=2, num_classes=3).eval()
    for block in model.blocks:
        block.attn.fused_attn = fused
    assert timm.__version__
    return model


@pytest.mark.parametrize("fused", [True, False])
def test_timm_vit_with_fused_attention_on_and_off(fused):
    model = _timm_vit(fused)
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    N = 2000
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", SACoverageWarning)
        det = model.blocks[0].attn(model.norm_pre(model._pos_embed(model.patch_embed(x))))  # first attention layer
        head = model(x)
        with StochasticAttention(model, nu=4, generator=torch.Generator().manual_seed(0)) as sa:
            assert sa.patched == {"blocks.0.attn": "sdpa: Attention", "blocks.1.attn": "sdpa: Attention"}
            tokens = model.norm_pre(model._pos_embed(model.patch_embed(x)))
            samples = predictive_samples(model.blocks[0].attn, tokens, num_samples=N, max_rows=None)
            assert not torch.allclose(model(x), head, atol=1e-4)
            sa.set_nu(10**7)
            assert torch.allclose(model(x), head, atol=1e-3)
    assert all(b.attn.fused_attn is fused for b in model.blocks)  # restored
    assert torch.equal(model(x), head)
    _law(samples, det, "timm")  # the attention output is linear in the weights: mean = deterministic output


# --------------------------------------------------------------------------------------------------------------
# torch.nn
# --------------------------------------------------------------------------------------------------------------
def test_torch_transformer_decoder_and_nested_tensor_encoder(monkeypatch):
    torch.manual_seed(0)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True), 2).eval()
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True), 2).eval()
    tgt, memory = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    kpm = torch.tensor([[False] * 6, [False] * 3 + [True] * 3])
    with torch.no_grad():
        det = dec(tgt, memory)
        with StochasticAttention(dec, nu=4) as sa:
            assert len(sa.modules) == 4  # self- and cross-attention per layer
            assert not torch.allclose(dec(tgt, memory), det, atol=1e-4)
        assert torch.equal(dec(tgt, memory), det)
        drawn = _record_weights(monkeypatch)  # the encoder layers ask for no weights: SA's SDPA path
        with StochasticAttention(enc, nu=64):  # enable_nested_tensor (default) + padding: fast path stays off
            out = enc(memory, src_key_padding_mask=kpm)
    assert not out.is_nested and torch.isfinite(out).all()
    assert len(drawn) == 2 and all(torch.all(w[1, :, :, 3:] == 0) for w in drawn)  # padded keys never drawn
