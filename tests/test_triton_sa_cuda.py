"""The fused Triton SA kernel (stochattn.triton_sa) compiled for and run on a CUDA GPU: the law of the weights in
fp32, bf16 and fp16 at head dims 64, 80 and 128 with sequence lengths that are no multiple of any tile, masks,
causal rows, per-head nu, one-pass rows, the autotuned and the fixed tiles, and independence of the draws across
rows, heads, batch entries and calls. V = identity, so an output row is the weight row W / nu.

Skipped without CUDA, and in a process where the interpreter tests (test_triton_sa.py, which sets
TRITON_INTERPRET=1 before the kernels' first import) ran first: run it in a process of its own, as `make gpu-check`
does (``pytest tests/test_triton_sa_cuda.py``).

SA_CUDA_TESTS_ON_CPU=1 (with TRITON_INTERPRET=1) is a dry run: the same tests on CPU tensors in Triton's
interpreter (generators on the CPU too), the CUDA-graph test stopping before its capture. It checks the file's own
code before a device session spends minutes on it (test_triton_sa.py runs a part of it in the suite).
"""

import json
import os

import pytest
import torch

#: the dry run: this file's tests on CPU tensors in Triton's interpreter (see the docstring)
ON_CPU = os.environ.get("SA_CUDA_TESTS_ON_CPU") == "1"
if os.environ.get("TRITON_INTERPRET") == "1" and not ON_CPU:
    pytest.skip("TRITON_INTERPRET=1: the kernels run in the interpreter here (run this file alone)",
                allow_module_level=True)  # fmt: skip
if ON_CPU and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("SA_CUDA_TESTS_ON_CPU=1 needs TRITON_INTERPRET=1", allow_module_level=True)
pytest.importorskip("triton", reason="triton is not installed")
if not torch.cuda.is_available() and not ON_CPU:
    pytest.skip("no CUDA device", allow_module_level=True)

from sa_law import assert_counts, assert_law, assert_uncorrelated  # noqa: E402

from stochattn import triton_sa  # noqa: E402
from stochattn.attention import masked_attention_probs, scaled_dot_product_attention  # noqa: E402

CUDA = torch.device("cpu" if ON_CPU else "cuda")
if not triton_sa.available(CUDA)[0]:
    pytest.skip(f"the compiled kernel cannot run: {triton_sa.available(CUDA)[1]}", allow_module_level=True)
S = 77  # no multiple of 16, 32, 64 or 128: every key tile size ends in a partial block
N = 2001  # draws per query row; 2 query rows -> L = 4002, no multiple of any row tile either
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
LEGACY = triton_sa.LEGACY_TILES


def _record(case: str, z: tuple = None, **measured) -> None:
    """Append the case's largest |z| (means, covariances), or another measured value, to $SA_LAW_LOG (JSON lines),
    where set."""
    if os.environ.get("SA_LAW_LOG"):
        row = {"case": case, **({"max_z_mean": z[0], "max_z_cov": z[1]} if z is not None else {}), **measured}
        with open(os.environ["SA_LAW_LOG"], "a") as f:
            f.write(json.dumps(row) + "\n")


def _qk(dtype, E, L0=2, H=1, S=S, seed=0, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, L0, E, generator=g) * spread
    k = torch.randn(1, H, S, E, generator=g)
    return q.to(CUDA, dtype), k.to(CUDA, dtype)


def _eye(H, dtype, S=S):
    return torch.eye(S, dtype=dtype, device=CUDA).expand(1, H, S, S)


def _counts(w, nu):
    """w (..., S) weight rows in any dtype -> exact integer counts (float64) W = w nu: within rounding of the
    output dtype (16-bit outputs keep counts below 256 exact), rows summing to nu."""
    c = w.double() * nu
    tol = nu * 2.0**-20 if w.dtype == torch.float32 else 0.45
    assert torch.all((c - c.round()).abs() <= tol), (c - c.round()).abs().max()
    c = c.round()
    assert torch.all(c.sum(-1) == nu) and torch.all(c >= 0)
    return c


def _named(sampler: str) -> str:
    """A case name's sampler suffix: none for the two-pass kernel ("cdf"), else ', race' or ', groups'."""
    return "" if sampler == "cdf" else f", {sampler}"


def _law_case(name, E, nu, tiles, seed, sampler="cdf"):
    """Two query rows, N draws each, against their softmax in float64 (from the rounded 16-bit inputs)."""
    dtype = DTYPES[name]
    # 16-bit outputs store W / nu: counts below 256 stay exact, so large nu gets flatter rows there
    spread = 1.0 if dtype == torch.float32 or nu <= 256 else 0.3
    q, k = _qk(dtype, E, seed=seed, spread=spread)
    w = triton_sa.sa_attention_fused(q.repeat_interleave(N, dim=2), k, _eye(1, dtype), nu, seed=seed,
                                     tiles=tiles, sampler=sampler)[0, 0]  # fmt: skip
    assert w.dtype == dtype
    counts = _counts(w, nu).cpu()
    pi = masked_attention_probs(q.double(), k.double())[0, 0].cpu()
    z = [assert_law(counts[i * N : (i + 1) * N] / nu, pi[i], nu) for i in range(2)]
    _record(
        f"{name} E={E} nu={nu} {'autotuned' if tiles is None else 'fixed'} tiles{_named(sampler)}",
        (max(a for a, _ in z), max(b for _, b in z)),
    )


@pytest.mark.parametrize("nu", [1, 3, 50, 300, 4096])
@pytest.mark.parametrize("E", [64, 80, 128])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_law_on_cuda_fixed_tiles(dtype, E, nu):
    """Mean pi and covariance (diag(pi) - pi pi^T) / nu per row (the first version's fixed tiles, two passes)."""
    _law_case(dtype, E, nu, LEGACY, seed=1000 + nu + E)


@pytest.mark.parametrize("dtype, E, nu", [("bf16", 64, 3), ("bf16", 80, 300), ("fp16", 128, 50), ("fp32", 64, 4096),
                                          ("bf16", 64, 4096)])  # fmt: skip
def test_law_on_cuda_autotuned_tiles(dtype, E, nu):
    """The same law with the tiles the autotuner chose (the default on the GPU)."""
    _law_case(dtype, E, nu, None, seed=2000 + nu + E)


@pytest.mark.parametrize("nu", [1, 3, 16])
@pytest.mark.parametrize("E", [64, 80, 128])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_race_law_on_cuda(dtype, E, nu):
    """The race sampler (one pass, autotuned tiles): the same law."""
    _law_case(dtype, E, nu, None, seed=3000 + nu + E, sampler="race")


@pytest.mark.parametrize("nu", [1, 16, 64])
@pytest.mark.parametrize("E", [64, 80, 128])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_groups_law_on_cuda(dtype, E, nu):
    """The groups sampler (group masses from pass 1, then keys within the drawn groups; autotuned tiles): the same
    law."""
    _law_case(dtype, E, nu, None, seed=4000 + nu + E, sampler="groups")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_groups_sampler_draws_nearly_the_two_pass_keys_on_cuda(dtype):
    """The groups sampler places the two-pass sampler's sorted points (same seed, same Philox counters) by the same
    cumulative sum in two stages: the same keys in every row but where the GPU's scores (tensor cores in pass 1,
    CUDA cores in pass 2's groups) move a point across a rounding boundary. 4,096 keys (groups of 32 keys, 128
    groups), nu 16, with a causal mask: at least 99 % of the rows equal."""
    g = torch.Generator().manual_seed(19)
    q, k = (torch.randn(1, 2, n, 64, generator=g).to(CUDA, DTYPES[dtype]) for n in (512, 4096))
    eye = torch.eye(4096, dtype=DTYPES[dtype], device=CUDA).expand(1, 2, 4096, 4096)
    for kwargs in ({}, {"is_causal": True}):
        a, b = (triton_sa.sa_attention_fused(q, k, eye, 16, seed=20, sampler=s, **kwargs) for s in ("groups", "cdf"))
        same = (a == b).all(-1).double().mean().item()
        _record(f"groups = two-pass keys, {dtype}{', causal' * bool(kwargs)}", share_of_rows_equal=same)
        assert same >= 0.99, same
        _counts(a[0].cpu(), 16)


def test_race_masks_and_causal_rows_on_cuda():
    """The race: masked keys never win, a fully masked row gives zeros, causal rows draw only past keys."""
    nu, dtype = 7, torch.bfloat16
    q, k = _qk(dtype, 64, L0=3, seed=16)
    keep = torch.rand(3, S, generator=torch.Generator().manual_seed(17)) > 0.4
    keep[2] = False
    w = triton_sa.sa_attention_fused(q.repeat_interleave(N, dim=2), k, _eye(1, dtype), nu, seed=12, sampler="race",
                                     attn_mask=keep.repeat_interleave(N, dim=0).to(CUDA))[0, 0].cpu()  # fmt: skip
    assert torch.all(w[2 * N :] == 0)
    counts = _counts(w[: 2 * N], nu)
    assert_counts(counts / nu, nu, keep[:2].repeat_interleave(N, dim=0))
    pi = masked_attention_probs(q.double().cpu(), k.double().cpu(), keep)[0, 0]
    z = [assert_law(counts[i * N : (i + 1) * N] / nu, pi[i], nu) for i in range(2)]
    _record("race, boolean mask", (max(a for a, _ in z), max(b for _, b in z)))
    g = torch.Generator().manual_seed(18)
    qc, kc = (torch.randn(2, 2, n, 64, generator=g).to(CUDA, dtype) / 8**0.5 for n in (150, 100))
    wc = triton_sa.sa_attention_fused(qc, kc, _eye(2, dtype, 100).expand(2, 2, 100, 100), nu, is_causal=True, seed=4,
                                      sampler="race").double().cpu() * nu  # fmt: skip
    assert torch.all((wc - wc.round()).abs() <= 0.45)
    assert torch.all(wc.round()[..., ~torch.ones(150, 100, dtype=torch.bool).tril()] == 0)
    assert torch.all(wc.round().sum(-1) == nu)


@pytest.mark.parametrize("tiles, sampler", [(None, "cdf"), (LEGACY, "cdf"), (None, "race"), (None, "groups")],
                         ids=["autotuned", "fixed", "race", "groups"])  # fmt: skip
@pytest.mark.parametrize("kind", ["bool", "additive", "causal-long", "causal-short", "one-pass"])
def test_masks_on_cuda(kind, tiles, sampler):
    """Masked keys never drawn; the law is the masked softmax's; a fully masked row gives zeros. Causal with L > S
    and L < S (top-left aligned, as F.scaled_dot_product_attention): N copies of one (L, 100) problem in the batch,
    the law of a few rows; one pass (S = 40 keys) with a boolean mask. Every sampler."""
    nu, dtype = 7, torch.bfloat16
    name = f"mask {kind}, {'autotuned' if tiles is None else 'fixed'} tiles{_named(sampler)}"
    if kind.startswith("causal"):
        L = 150 if kind == "causal-long" else 50
        g = torch.Generator().manual_seed(5)
        q, k = (torch.randn(1, 1, n, 64, generator=g).to(CUDA, dtype) for n in (L, 100))  # every row testable
        w = triton_sa.sa_attention_fused(q.expand(N, 1, L, 64), k.expand(N, 1, 100, 64),
                                         _eye(1, dtype, 100).expand(N, 1, 100, 100), nu, is_causal=True, seed=3,
                                         tiles=tiles, sampler=sampler)[:, 0].cpu()  # (N, L, 100)  # fmt: skip
        allowed = torch.ones(L, 100, dtype=torch.bool).tril()
        counts = _counts(w, nu)
        assert torch.all(counts[:, ~allowed] == 0)
        pi = masked_attention_probs(q.double().cpu(), k.double().cpu(), allowed)[0, 0]
        z = [assert_law(counts[:, i] / nu, pi[i], nu) for i in sorted({2, 9, L // 2, L - 1})]
        _record(name, (max(a for a, _ in z), max(b for _, b in z)))
        return
    s_keys = 40 if kind == "one-pass" else S
    q, k = _qk(dtype, 64, L0=3, S=s_keys, seed=6)
    g = torch.Generator().manual_seed(7)
    keep = torch.rand(3, s_keys, generator=g) > 0.4
    keep[2] = False  # a fully masked row
    keep[0, -1] = True
    mask = keep if kind in ("bool", "one-pass") else torch.where(keep, torch.randn(3, s_keys, generator=g),
                                                                    torch.tensor(float("-inf")))  # fmt: skip
    w = triton_sa.sa_attention_fused(
        q.repeat_interleave(N, dim=2),
        k,
        _eye(1, dtype, s_keys),
        nu,
        attn_mask=mask.repeat_interleave(N, dim=0).to(CUDA),
        seed=11,
        tiles=tiles,
        sampler=sampler,
    )
    w = w[0, 0].cpu()
    assert torch.all(w[2 * N :] == 0)
    counts = _counts(w[: 2 * N], nu)
    assert_counts(counts / nu, nu, keep[:2].repeat_interleave(N, dim=0))
    pi = masked_attention_probs(q.double().cpu(), k.double().cpu(), mask.double() if kind == "additive" else mask)
    z = [assert_law(counts[i * N : (i + 1) * N] / nu, pi[0, 0, i], nu) for i in range(2)]
    _record(name, (max(a for a, _ in z), max(b for _, b in z)))


def test_per_head_nu_and_deterministic_heads_on_cuda():
    """nu = (0, 1, 6, 300): head 0 equals SDPA (fp32), head 1 one-hot rows, heads 2 and 3 their counts."""
    q, k = _qk(torch.float32, 80, L0=37, H=4, seed=8)
    v = torch.randn(1, 4, S, 80, device=CUDA)
    nu = torch.tensor([0, 1, 6, 300])
    out = triton_sa.sa_attention_fused(q, k, v, nu, seed=3)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out[:, 0], ref[:, 0], rtol=1e-4, atol=1e-4)
    w = triton_sa.sa_attention_fused(q, k, _eye(4, torch.float32), nu, seed=3)
    for h, n in ((1, 1), (2, 6), (3, 300)):
        _counts(w[0, h], n)


def test_draws_are_independent_across_rows_heads_batches_and_calls():
    """One query row repeated over rows, heads and batch entries (all with the same pi): the counts of any two
    draws that should be independent (neighbouring rows, two heads, two batch entries, two calls with different
    seeds, two offsets of one seed, two calls through scaled_dot_product_attention with one CUDA generator) are
    uncorrelated per key; a reused Philox counter would make them equal."""
    nu, n, dtype = 3, 4000, torch.float32
    q, k = _qk(dtype, 64, L0=1, S=20, seed=9, spread=0.8)
    q = q.expand(2, 2, n, 64).contiguous()
    k = k.expand(2, 2, 20, 64).contiguous()
    eye = _eye(2, dtype, 20).expand(2, 2, 20, 20)
    pi = masked_attention_probs(q[0, 0, :1].double(), k[0, 0].double())[0].cpu()
    a = triton_sa.sa_attention_fused(q, k, eye, nu, seed=5).cpu()
    b = triton_sa.sa_attention_fused(q, k, eye, nu, seed=6).cpu()
    c = triton_sa.sa_attention_fused(q, k, eye, nu, seed=5, offset=2 * 2 * n * (nu + 1)).cpu()
    g = torch.Generator(device=CUDA).manual_seed(0)
    d1, d2 = (scaled_dot_product_attention(q, k, eye, nu=nu, generator=g, fused=True).cpu() for _ in range(2))
    pairs = {
        "rows i, i+1": (a[0, 0, 0::2], a[0, 0, 1::2]),
        "heads": (a[0, 0], a[0, 1]),
        "batch": (a[0, 0], a[1, 0]),
        "seeds": (a[0, 0], b[0, 0]),
        "offsets": (a[1, 1], c[1, 1]),
        "generator calls": (d1[0, 1], d2[0, 1]),
    }
    for name, (x, y) in pairs.items():
        assert not torch.equal(x, y), name
        assert_uncorrelated(x, y, pi, nu)
    for name, w in (("seed 5", a), ("seed 6", b), ("offset", c), ("generator", d1)):
        _record(f"independence test, {name}", assert_law(w.reshape(-1, 20), pi, nu))
    assert torch.equal(a, triton_sa.sa_attention_fused(q, k, eye, nu, seed=5).cpu())  # same seed, same draws


def _sdpa_block():
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return Block()


@pytest.mark.parametrize("sampler", ["cdf", "race", "groups"])
def test_a_captured_cuda_graph_replays_the_eager_draws_of_its_device_stream(sampler, monkeypatch):
    """StochasticAttention.streams_to("cuda"), then a CUDA graph captured around the patched forward: replay t
    draws exactly what eager call t of the same stream draws (the stream advanced on the device, the kernels reading
    its seed there), so replays differ from each other; host streams and device streams draw the same weights; a
    capture with host streams is refused, not replayed with one draw."""
    from stochattn.patch import StochasticAttention

    monkeypatch.setattr(triton_sa, "DEFAULT_SAMPLER", sampler)
    q, k = _qk(torch.bfloat16, 64, L0=40, H=4, S=300, seed=5)
    v = torch.randn(1, 4, 300, 64, device=CUDA, dtype=torch.bfloat16)
    block = _sdpa_block()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad(), StochasticAttention(block, nu=4, fused=True, generator=generator) as sa:
        host = [block(q, k, v) for _ in range(3)]
        state = next(iter(sa._states.values()))
        state.rng[1] = 0  # rewind the host stream, then move it: the same calls again
        sa.streams_to(CUDA)
        start = state.rng.clone()
        eager = [block(q, k, v) for _ in range(3)]  # also the warm-up: compiled, tuned
        assert all(torch.equal(a, b) for a, b in zip(host, eager))
        if ON_CPU:  # the dry run: host streams on "cpu", no capture
            pytest.skip("the capture needs a CUDA GPU (the eager part ran)")
        state.rng.copy_(start)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = block(q, k, v)
        replays = []
        for _ in range(3):
            graph.replay()
            replays.append(out.clone())
        torch.cuda.synchronize()
        assert all(torch.equal(a, b) for a, b in zip(eager, replays))
        assert not torch.equal(replays[0], replays[1]) and state.rng[1].item() == 3
        sa.streams_to("cpu")
        with pytest.raises(RuntimeError, match="streams_to"):
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                block(q, k, v)
    _record(f"CUDA graph replays = eager draws, {sampler}", replays_equal_eager=3)
