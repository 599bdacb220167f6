"""SA under torch.compile (issue 45) and SDPA reached however it was bound (issue 50, part 5).

SA's operators (``torch.ops.stochattn.sdpa`` / ``attend`` / ``weights``) take the module's random stream as a graph
input, so: no graph break (the ops appear in the one graph), a compiled graph draws fresh weights on every call, the
same weights as eager calls from the same generator seed, and the law (mean pi, covariance (diag(pi) - pi pi^T)/nu,
masked keys never drawn) holds through inductor's code. Compiling before or after patching both work. Modules
defined through ``exec`` (no source) or calling SDPA through an alias bound before the patch are reached too.
Compiles are kept small (tiny models, CPU inductor only where the law or the generated code matters)."""

import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from stochattn.patch import SACoverageWarning, StochasticAttention

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_compile import Block, law_z  # noqa: E402 - the benchmark's toy block and law statistic

TORCH_SDPA = F.scaled_dot_product_attention
Z_MAX = 5.0  # |z| over up to ~500 standard-normal comparisons per test: P(|z| > 5) ~ 6e-7 each


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def counting_backend(store: list):
    """A Dynamo backend that records, per graph, how many SA operators it holds, then runs it as traced."""

    def backend(gm, example_inputs):
        store.append(Counter(str(n.target) for n in gm.graph.nodes
                             if n.op == "call_function" and str(n.target).startswith("stochattn.")))  # fmt: skip
        return gm

    return backend


class SDPAModule(nn.Module):
    def __init__(self, num_heads: int = 2) -> None:
        super().__init__()
        self.num_heads = num_heads

    def forward(self, q, k, v, **kwargs):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


def _encoder(depth: int = 2) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(depth)]).eval()


def _qkv(B, H=2, L=3, S=5, E=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, L, E, generator=g, dtype=torch.float64) * 1.5
    k = torch.randn(1, H, S, E, generator=g, dtype=torch.float64)
    v = torch.eye(S, dtype=torch.float64).expand(1, H, S, S)  # V = identity: the output *is* the weights
    return tuple(t.expand(B, *t.shape[1:]).contiguous() for t in (q, k, v))




# --------------------------------------------------------------------------------------------------------------
# no graph break, fresh draws, eager = compiled, both orders
# --------------------------------------------------------------------------------------------------------------
def test_patched_encoder_compiles_to_one_graph_with_the_sa_operator():
    model, x = _encoder(), torch.randn(2, 5, 16)
    with torch.no_grad(), StochasticAttention(model, nu=4, generator=torch.Generator().manual_seed(0)):
        explained = torch._dynamo.explain(model)(x)
        assert explained.graph_break_count == 0 and explained.graph_count == 1
        torch._dynamo.reset()
        graphs: list = []
        compiled = torch.compile(model, backend=counting_backend(graphs))
        a, b = compiled(x), compiled(x)
    assert len(graphs) == 1 and graphs[0] == Counter({"stochattn.sdpa": 2})
    assert not torch.equal(a, b)  # fresh weights on every call of the same graph


def test_inductor_draws_the_same_weights_as_eager_from_the_same_seed():
    model, x = _encoder(), torch.randn(2, 5, 16)
    compiled = torch.compile(model)  # inductor, CPU
    with torch.no_grad(), StochasticAttention(model, nu=3, generator=torch.Generator().manual_seed(7)) as sa:
        eager = [model(x) for _ in range(3)]
        sa.set_generator(torch.Generator().manual_seed(7))
        inductor = [compiled(x) for _ in range(3)]
    det = model(x)
    for e, c in zip(eager, inductor):
        assert torch.allclose(e, c, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(c, det, atol=1e-4)
    assert not torch.equal(inductor[0], inductor[1])


def test_compile_then_patch_then_remove():
    model, x = _encoder(), torch.randn(2, 5, 16)
    compiled = torch.compile(model, backend="aot_eager")
    with torch.no_grad():
        det = compiled(x)
        with StochasticAttention(model, nu=2, generator=torch.Generator().manual_seed(0)) as sa:
            a, b = compiled(x), compiled(x)  # the patch is guarded: the graph is rebuilt with SA in it
            assert not torch.allclose(a, det) and not torch.equal(a, b)
            sa.set_nu(None)
            assert torch.equal(compiled(x), det)
            sa.set_nu(64)  # another nu: recompiled, smaller spread than at nu = 2
            c = compiled(x)
            assert 0 < (c - det).abs().max() < (a - det).abs().max()
        assert torch.equal(compiled(x), det)  # removed: deterministic again


@pytest.mark.parametrize("how", ["torch.compile(model)", "model.compile()", "forward"])
def test_a_compiled_model_reports_the_same_modules_and_draws(how):
    model, x = _encoder(3), torch.randn(2, 5, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SACoverageWarning)
        reference = StochasticAttention(model, nu=4)
        names, unpatched = dict(reference.patched), dict(reference.unpatched)
        reference.remove()
        if how == "torch.compile(model)":
            target = torch.compile(model, backend="eager")
        elif how == "model.compile()":
            target = model
            model.compile(backend="eager")
        else:
            target = model
            model.forward = torch.compile(model.forward, backend="eager")  # as TimesFM's loader does
        with torch.no_grad(), StochasticAttention(target, nu={"1": 4}) as sa:
            assert sa.patched == names and sa.unpatched == unpatched and list(sa.nu) == ["0", "1", "2"]
            a, b = target(x), target(x)
    assert not torch.equal(a, b)


class Branching(nn.Module):
    """Calls SDPA only when ``use_sdpa`` is set (otherwise its own softmax): a patched module that may make no draw."""

    def __init__(self) -> None:
        super().__init__()
        self.num_heads, self.use_sdpa = 2, False

    def forward(self, q, k, v):
        if self.use_sdpa:
            return F.scaled_dot_product_attention(q, k, v)
        return torch.softmax(q @ k.transpose(-1, -2), -1) @ v


def test_a_compiled_forward_without_a_draw_still_warns():
    q, k, v = _qkv(B=2)
    module = Branching()
    compiled = torch.compile(module, backend="eager")
    with torch.no_grad(), StochasticAttention(module, nu=2):
        with pytest.warns(SACoverageWarning, match="made no stochastic draw"):
            compiled(q, k, v)
        module.use_sdpa = True
        with warnings.catch_warnings():
            warnings.simplefilter("error", SACoverageWarning)
            out = compiled(q, k, v)
    assert not torch.allclose(out, TORCH_SDPA(q, k, v))


# --------------------------------------------------------------------------------------------------------------
# the law through the compiled operator (CPU inductor)
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["bool", "causal"])
@pytest.mark.parametrize("nu", [1, 7])
def test_law_through_the_compiled_operator(kind, nu):
    N = 4000
    q, k, v = _qkv(B=N)
    if kind == "bool":
        mask = torch.rand(3, 5, generator=torch.Generator().manual_seed(1)) > 0.4
        mask[:, 0] = True
        kwargs = {"attn_mask": mask}
    else:
        kwargs = {"is_causal": True}
    module = SDPAModule()
    pi = TORCH_SDPA(q[:1], k[:1], v[:1], **kwargs)[0]
    compiled = torch.compile(module)
    with torch.no_grad(), StochasticAttention(module, nu=nu, generator=torch.Generator().manual_seed(nu)):
        w = compiled(q, k, v, **kwargs)
    z_mean, z_cov = law_z(w, pi, nu)
    assert z_mean < Z_MAX and z_cov < Z_MAX, (z_mean, z_cov)
    assert torch.all(w[:, pi == 0] == 0), "a masked key was drawn"
    assert torch.allclose(w * nu, (w * nu).round(), atol=1e-9)


# --------------------------------------------------------------------------------------------------------------
# SDPA however it was bound, classes without source (issue 50, part 5)
# --------------------------------------------------------------------------------------------------------------
from torch.nn.functional import scaled_dot_product_attention as bound_before  # noqa: E402  (an alias)


class AliasSDPA(SDPAModule):
    def forward(self, q, k, v, **kwargs):
        return bound_before(q, k, v, **kwargs)


class CNameSDPA(SDPAModule):
    def forward(self, q, k, v, **kwargs):
        return torch._C._nn.scaled_dot_product_attention(q, k, v, **kwargs)


def _helper(q, k, v, kwargs):
    return bound_before(q, k, v, **kwargs)


class HelperSDPA(SDPAModule):
    def forward(self, q, k, v, **kwargs):
        return _helper(q, k, v, kwargs)


EXEC_SOURCE = '''
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as sdpa_alias
from torch import nn

class ExecSDPA(nn.Module):
    num_heads = 2
    def forward(self, q, k, v, **kwargs):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

class ExecAliasSDPA(nn.Module):
    num_heads = 2
    def forward(self, q, k, v, **kwargs):
        return sdpa_alias(q, k, v, **kwargs)
'''


def _exec_classes():
    """The classes of EXEC_SOURCE run as ``python - < script.py`` runs it: in a module of its own (``__main__``
    there) whose code comes from no file, so ``inspect`` cannot read their source."""
    import sys
    import types

    module = sys.modules.get("stochattn_exec_defined")
    if module is None:
        module = types.ModuleType("stochattn_exec_defined")
        exec(compile(EXEC_SOURCE, "<stdin>", "exec"), module.__dict__)  # noqa: S102
        sys.modules[module.__name__] = module
    return module.ExecSDPA, module.ExecAliasSDPA


@pytest.mark.parametrize("cls", ["alias", "torch._C._nn", "helper", "exec", "exec+alias"])
def test_sdpa_is_reached_however_it_was_bound_and_without_source(cls):
    import inspect

    exec_plain, exec_alias = _exec_classes()
    module = {"alias": AliasSDPA, "torch._C._nn": CNameSDPA, "helper": HelperSDPA, "exec": exec_plain,
              "exec+alias": exec_alias}[cls]()  # fmt: skip
    if cls.startswith("exec"):
        with pytest.raises(OSError):
            inspect.getsource(type(module).forward)  # no source: decided from the code object
    N, nu = 3000, 3
    q, k, v = _qkv(B=N)
    pi = TORCH_SDPA(q[:1], k[:1], v[:1], is_causal=True)[0]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", SACoverageWarning)
        with StochasticAttention(module, nu=nu, generator=torch.Generator().manual_seed(1)) as sa:
            assert sa.patched == {"": f"sdpa: {type(module).__qualname__}"}
            w = module(q, k, v, is_causal=True)
            compiled = torch.compile(module, backend="eager")(q[:8], k[:8], v[:8], is_causal=True)
    z_mean, z_cov = law_z(w, pi, nu)
    assert z_mean < Z_MAX and z_cov < Z_MAX, (z_mean, z_cov)
    assert torch.all(w[:, pi == 0] == 0)
    assert not torch.allclose(compiled, pi.expand_as(compiled))


# --------------------------------------------------------------------------------------------------------------
# model families: no graph break after patching (Hugging Face, torch's MHA, TimesFM 2.5)
# --------------------------------------------------------------------------------------------------------------
def _hf_case(name):
    T = pytest.importorskip("transformers")
    tokens = torch.arange(12).view(2, 6) % 50
    pad = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]])
    if name == "bert":
        model = T.BertModel(T.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=32, attn_implementation="eager"), add_pooling_layer=False)
        return model, lambda m: m(tokens, attention_mask=pad).last_hidden_state, 2
    if name == "vit":
        model = T.ViTModel(T.ViTConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                                       image_size=8, patch_size=4, attn_implementation="sdpa"), add_pooling_layer=False)
        images = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
        return model, lambda m: m(images).last_hidden_state, 2
    model = T.PatchTSTModel(T.PatchTSTConfig(num_input_channels=2, context_length=16, patch_length=4, patch_stride=4,
                                             d_model=16, num_attention_heads=2, num_hidden_layers=2, ffn_dim=32,
                                             attn_implementation="sdpa"))  # fmt: skip
    series = torch.randn(2, 16, 2, generator=torch.Generator().manual_seed(0))
    return model, lambda m: m(past_values=series).last_hidden_state, 2


def _case(name):
    if name in ("bert", "vit", "patchtst"):
        return _hf_case(name)
    if name == "mha":
        model = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 2,
                                      enable_nested_tensor=False)  # fmt: skip
        x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
        return model, lambda m: m(x), 2
    pytest.importorskip("timesfm")
    from stochattn.backbones.timesfm import build_timesfm

    model = build_timesfm()
    inputs = torch.randn(2, 4, 32, generator=torch.Generator().manual_seed(0))
    masks = torch.zeros(2, 4, 32, dtype=torch.bool)
    return model, lambda m: m(inputs, masks)[0][2], len(model.stacked_xf)


@pytest.mark.parametrize("name", ["bert", "vit", "patchtst", "mha", "timesfm"])
def test_model_families_compile_without_a_graph_break(name):
    torch.manual_seed(0)
    model, run, layers = _case(name)
    model.eval()

    class Call(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self):
            return run(self.model)

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", SACoverageWarning)
        det = run(model)
        with StochasticAttention(model, nu=8, generator=torch.Generator().manual_seed(0)):
            explained = torch._dynamo.explain(Call())()
            torch._dynamo.reset()
            graphs: list = []
            compiled = torch.compile(Call(), backend=counting_backend(graphs))
            a, b = compiled(), compiled()
    assert explained.graph_break_count == 0, explained.break_reasons
    assert len(graphs) == 1 and sum(graphs[0].values()) == layers, graphs
    assert not torch.equal(a, b) and not torch.allclose(a, det)


# --------------------------------------------------------------------------------------------------------------
# CUDA graphs (device only)
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_reduce_overhead_replays_draw_fresh_weights(monkeypatch):
    """Inductor's CUDA graphs (mode="reduce-overhead") replay SA with fresh draws. A graph inductor declined to
    record (e.g. for the stream SA's operator advances in place, a mutated input) raises here instead of running
    eagerly, which would pass the draws' checks without a graph."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(torch._inductor.config.triton, "cudagraph_or_error", True, raising=False)
    counters["inductor"].clear()
    model = _encoder().cuda()
    x = torch.randn(2, 64, 16, device="cuda")
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad(), StochasticAttention(model, nu=4, generator=torch.Generator().manual_seed(0)) as sa:
        sa.streams_to("cuda")  # seeds taken on the device: a replayed graph advances the streams
        outs = [compiled(x).clone() for _ in range(5)]  # warm-up, recording, replays
    assert counters["inductor"]["cudagraph_skips"] == 0, "inductor ran the model without CUDA graphs"
    det = model(x)
    assert all(not torch.allclose(o, det) for o in outs)
    assert all(not torch.equal(outs[i], outs[i + 1]) for i in range(len(outs) - 1))


# --------------------------------------------------------------------------------------------------------------
# TimesFM 2.5 as its own loader builds it (torch_compile=True: the forward compiled by inductor)
# --------------------------------------------------------------------------------------------------------------
def test_timesfm_compiled_by_its_loader_draws_the_eager_law(tmp_path):
    pytest.importorskip("timesfm")
    from timesfm.timesfm_2p5.timesfm_2p5_torch import TimesFM_2p5_200M_torch

    from stochattn.backbones.timesfm import build_timesfm, point_forecast, sa_forecast_samples
    from stochattn.rehearsal import write_timesfm_checkpoint

    dims = {"num_layers": 2, "model_dims": 64, "num_heads": 4, "hidden_dims": 64, "output_quantile_len": 128}
    write_timesfm_checkpoint(tmp_path, seed=0, dims=dims)  # random weights, the public layout, as the rehearsal does
    size = dict(num_layers=2, model_dims=64, num_heads=4, hidden_dims=64, output_quantile_len=128)
    eager = build_timesfm(**size)
    eager.load_checkpoint(str(tmp_path / "model.safetensors"))
    loaded = TimesFM_2p5_200M_torch(torch_compile=True)
    loaded.model = build_timesfm(**size)  # the loader's own path below, at a reduced size
    loaded.load_checkpoint(str(tmp_path))
    assert "forward" in loaded.model.__dict__  # compiled by timesfm: model.forward = torch.compile(model.forward)
    context = torch.sin(torch.arange(2 * 96, dtype=torch.float32).view(2, 96) / 5) + 2
    counters = torch._dynamo.utils.counters
    counters.clear()
    point_forecast(loaded, context, horizon=16)  # timesfm's own decode breaks its graph once (a cache index .item())
    own_breaks = set(counters["graph_break"])
    counters.clear()
    N, nu = 400, 4
    with warnings.catch_warnings():
        warnings.simplefilter("error", SACoverageWarning)  # the compiled forward draws: no "made no draw" warning
        runs = {name: sa_forecast_samples(model, context, horizon=16, nu=nu, num_samples=N, max_rows=None,
                                          generator=torch.Generator().manual_seed(seed))
                for name, model, seed in (("eager", eager, 1), ("compiled", loaded, 2))}  # fmt: skip
    assert counters["stats"]["unique_graphs"] >= 1 and set(counters["graph_break"]) <= own_breaks  # SA adds none
    e, c = runs["eager"].double(), runs["compiled"].double()
    assert c.std(0).min() > 0  # the ensemble varies
    # the same law: means within their standard errors, variances within theirs (normal approximation)
    z_mean = (e.mean(0) - c.mean(0)) / torch.sqrt((e.var(0) + c.var(0)) / N)
    se_var = torch.sqrt(((e - e.mean(0)) ** 2).var(0) / N + ((c - c.mean(0)) ** 2).var(0) / N)
    z_var = (e.var(0) - c.var(0)) / se_var
    assert z_mean.abs().max() < Z_MAX and z_var.abs().max() < Z_MAX, (z_mean.abs().max(), z_var.abs().max())


class AttributeBound(nn.Module):
    """SDPA through an attribute set at run time: no code object says so."""

    def __init__(self):
        super().__init__()
        self.num_heads, self.attend = 2, F.scaled_dot_product_attention

    def forward(self, q, k, v):
        return self.attend(q, k, v)


def test_sdpa_through_an_attribute_is_reported_then_registered():
    from stochattn.sdpa import register_sdpa_caller

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = AttributeBound()

    q, k, v = _qkv(B=2)
    with pytest.raises(ValueError, match="no supported attention module"):
        StochasticAttention(Wrapper(), nu=2)  # found nowhere in the code: named in the error, never silent
    register_sdpa_caller(AttributeBound)
    try:
        model = Wrapper()
        with torch.no_grad(), StochasticAttention(model, nu=2) as sa:
            assert sa.patched == {"self_attn": "sdpa: AttributeBound"}
            out = model.self_attn(q, k, v)
        assert not torch.allclose(out, TORCH_SDPA(q, k, v))
    finally:
        import stochattn.patch as patch_mod

        patch_mod._REGISTRY.pop(AttributeBound)


def test_per_head_nu_and_nested_frames_when_compiled():
    """Per-head nu (0 = a deterministic head) and the innermost frame's nu, through a compiled graph."""

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.num_heads, self.inner = 2, SDPAModule()

        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v), self.inner(q, k, v)

    q, k, v = _qkv(B=4)
    pi = TORCH_SDPA(q, k, v)
    model = Outer()
    compiled = torch.compile(model, backend="aot_eager")
    with torch.no_grad(), StochasticAttention(model, nu={"": [3, None], "inner": 10**6}) as sa:
        assert set(sa.patched) == {"", "inner"}
        outer, inner = compiled(q, k, v)
    assert torch.allclose(outer[:, 1], pi[:, 1], atol=1e-12) and not torch.allclose(outer[:, 0], pi[:, 0], atol=1e-3)
    assert torch.allclose(outer[:, 0] * 3, (outer[:, 0] * 3).round(), atol=1e-9)  # nu = 3: counts / 3
    assert not torch.equal(inner, pi) and torch.allclose(inner, pi, atol=0.01)  # the inner module's own nu = 10^6


def test_the_operators_pass_torch_library_opcheck():
    """The registered operators' schemas, fake implementations and mutation of the stream, by torch's own checker."""
    from torch.library import opcheck

    from stochattn.attention import new_stream

    q, k, v = _qkv(B=2)
    gqa_q = torch.randn(2, 4, 3, 4, dtype=torch.float64)
    mask = torch.ones(3, 5, dtype=torch.bool).tril()
    probs = torch.softmax(torch.randn(2, 2, 3, 5, dtype=torch.float64), -1)
    for args in ((q, k, v, None, True, None, False, 3, None), (q, k[:1], v[:1], mask, False, 0.5, False, 2, None),
                 (gqa_q, k, v, None, False, None, True, 0, torch.tensor([[2], [0], [5], [1]]))):  # fmt: skip
        opcheck(torch.ops.stochattn.sdpa.default, (*args, new_stream()[0], "auto", -1),
                test_utils=("test_schema", "test_faketensor"))
    opcheck(torch.ops.stochattn.attend.default, (probs, v, 4, None, new_stream()[0], "auto"),
            test_utils=("test_schema", "test_faketensor"))
    opcheck(torch.ops.stochattn.weights.default, (probs, 4, None, new_stream()[0], "categorical"),
            test_utils=("test_schema", "test_faketensor"))
