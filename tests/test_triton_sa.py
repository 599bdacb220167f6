"""The fused Triton SA kernel (stochattn.triton_sa) through Triton's CPU interpreter: the exact law of the weights
(V = identity, so an output row is the weight row W / nu), masks, causal rows, per-head nu, seeds, and agreement in
law with the explicit path. Independent draws are rows: one query repeated N times along L (every row has its own
Philox counters), so a single call gives N draws of each weight row."""

import math
import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels' first import: they then run on CPU tensors
pytest.importorskip("triton", reason="triton is not installed (optional: the fused GPU kernel and its tests)")

from stochattn import triton_sa  # noqa: E402
from stochattn.attention import masked_attention_probs, scaled_dot_product_attention  # noqa: E402
from sa_law import Z_MAX, assert_counts, assert_law  # noqa: E402

if not triton_sa.available("cpu")[0]:
    pytest.skip(f"kernels built without the interpreter: {triton_sa.available('cpu')[1]}", allow_module_level=True)

S = 40  # three key blocks of 16 in the interpreter: the carried cumulative sum is exercised
LIBRARY_SAMPLER = triton_sa.DEFAULT_SAMPLER  # what calls naming no sampler take ("auto"), before the fixture below


@pytest.fixture(autouse=True)
def two_pass_by_default(monkeypatch):
    """Calls that name no sampler take the two-pass kernel here, whose tiles, masks and law most tests are about;
    the race's tests name it, and test_auto_sampler_takes_the_race_where_it_was_timed_faster the default."""
    monkeypatch.setattr(triton_sa, "DEFAULT_SAMPLER", "cdf")


class _CausalSDPA(torch.nn.Module):
    """A module whose forward is one causal F.scaled_dot_product_attention call (SA's SDPA path)."""

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _qk(L0=2, H=1, S=S, E=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, H, L0, E, generator=g) * 1.5, torch.randn(1, H, S, E, generator=g)


def _repeat(q, n):
    """(1, H, L0, E) -> (1, H, L0 * n, E): each query row n times (row i * n + r = draw r of query i)."""
    return q.repeat_interleave(n, dim=2)


def _eye(H, S=S, dtype=torch.float32):
    return torch.eye(S, dtype=dtype).expand(1, H, S, S)


@pytest.mark.parametrize("nu", [1, 3, 50, 300])
def test_weights_follow_the_multinomial_law(nu):
    """Mean pi and covariance (diag(pi) - pi pi^T) / nu per query row, two rows x 3000 draws, S = 40 (nu = 300:
    about ten chunks of sorted draws per key block)."""
    q, k = _qk()
    n = 3000
    w = triton_sa.sa_attention_fused(_repeat(q, n), k, _eye(1), nu, seed=11 + nu)[0, 0]  # (2n, S)
    pi = masked_attention_probs(q.double(), k.double())[0, 0]
    assert_counts(w, nu, torch.ones(S, dtype=torch.bool))
    for i in range(2):
        assert_law(w[i * n:(i + 1) * n], pi[i], nu)


@pytest.mark.parametrize("nu", [1, 300])
def test_one_pass_rows_follow_the_law(nu):
    """A row's keys in one tile (tiles one_pass: its statistics from the same scores, no pass 1), with a boolean
    mask and a causal variant: the same law, counts on allowed keys only; the draws equal the two-pass kernel's
    where the counters and the keys' intervals agree (same seed), so most rows are identical."""
    q, k = _qk(seed=30)
    n = 1200
    keep = torch.rand(2, S, generator=torch.Generator().manual_seed(31)) > 0.3
    mask = keep.repeat_interleave(n, dim=0)
    one = triton_sa.sa_attention_fused(_repeat(q, n), k, _eye(1), nu, attn_mask=mask, seed=40 + nu,
                                       tiles={"one_pass": True, "BLOCK_M": 128, "NU_BLOCK": 32})[0, 0]  # fmt: skip
    two = triton_sa.sa_attention_fused(_repeat(q, n), k, _eye(1), nu, attn_mask=mask, seed=40 + nu)[0, 0]
    pi = masked_attention_probs(q.double(), k.double(), keep)[0, 0]
    assert_counts(one, nu, mask)
    for i in range(2):
        assert_law(one[i * n:(i + 1) * n], pi[i], nu)
    assert (one == two).all(-1).double().mean() > 0.99
    qc, kc = torch.randn(2, 2, 24, 8), torch.randn(2, 2, 24, 8)
    w = triton_sa.sa_attention_fused(qc, kc, _eye(2, S=24).expand(2, 2, 24, 24), nu, is_causal=True, seed=3,
                                     tiles={"one_pass": True})  # fmt: skip
    assert_counts(w.reshape(-1, 24), nu, torch.ones(24, 24, dtype=torch.bool).tril().repeat(4, 1))


@pytest.mark.parametrize("one_pass", [False, True])
def test_binary_search_placement_draws_exactly_what_the_compare_tile_draws(one_pass):
    """Placing the points by binary searches (tiles search=True) assigns every point to the key the compare tile
    assigns it (the first positive key whose cumulative sum exceeds it): outputs are equal bit for bit, with masks
    (a fully masked row, masked keys at block edges), causal rows, per-head nu with a deterministic head, nu from 1
    to 300 (many chunks per block), and the law holds."""
    q, k = _qk(L0=6, H=3, seed=50)
    g = torch.Generator().manual_seed(51)
    keep = torch.rand(6, S, generator=g) > 0.35
    keep[1] = False
    keep[2, 14:20] = False
    base = {"one_pass": one_pass, "BLOCK_N": 16, "BLOCK_M": 8}
    for nu in (torch.tensor([1, 0, 7]), torch.tensor([300, 2, 33])):
        for mask, causal in ((keep, False), (None, True)):
            a, b = (triton_sa.sa_attention_fused(q, k, _eye(3), nu, attn_mask=mask, is_causal=causal, seed=9,
                                                 tiles={**base, "NU_BLOCK": nb, "search": se})
                    for nb, se in ((8, False), (32, True)))  # fmt: skip
            assert torch.equal(a, b)
    n, nu = 1000, 5
    w = triton_sa.sa_attention_fused(_repeat(q[:, :1, :2], n), k[:, :1], _eye(1), nu, seed=3,
                                     tiles={**base, "BLOCK_M": 128, "NU_BLOCK": 4, "search": True})[0, 0]  # fmt: skip
    pi = masked_attention_probs(q[:, :1, :2].double(), k[:, :1].double())[0, 0]
    assert_counts(w, nu, torch.ones(S, dtype=torch.bool))
    for i in range(2):
        assert_law(w[i * n:(i + 1) * n], pi[i], nu)


def test_tiles_are_checked():
    q, k = _qk()
    with pytest.raises(ValueError, match="unknown tile settings"):
        triton_sa.sa_attention_fused(q, k, k, 2, seed=0, tiles={"BLOCK_K": 16})
    q, k = _qk(S=300)
    with pytest.raises(ValueError, match="one pass holds"):
        triton_sa.sa_attention_fused(q, k, k, 2, seed=0, tiles={"one_pass": True})


def test_rows_of_one_tile_drawing_in_different_key_blocks():
    """Alternating rows of one tile put their mass in the first and in the last key block (an additive mask of
    +-4), so their draws are consumed in different blocks, in different numbers per block: each row's law holds."""
    q, k = _qk(L0=1, seed=12)
    bias = torch.zeros(2, S)
    bias[0, :10], bias[1, 30:] = 4.0, 4.0
    n, nu = 1500, 20
    rows = q.expand(1, 1, 2 * n, q.shape[-1])  # row 2 r + a: draw r of pattern a
    w = triton_sa.sa_attention_fused(rows, k, _eye(1), nu, attn_mask=bias.repeat(n, 1), seed=17)[0, 0]
    pi = masked_attention_probs(q.double().expand(1, 1, 2, q.shape[-1]), k.double(), bias.double())[0, 0]
    assert_counts(w, nu, torch.ones(S, dtype=torch.bool))
    for a in range(2):
        assert_law(w[a::2], pi[a], nu)


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_masks_are_respected_and_masked_keys_never_drawn(kind):
    """A (L0, S) mask broadcast over the repeated rows: masked keys get no draw; the law is the masked softmax's.
    Additive: -inf on the masked keys, finite offsets elsewhere. A fully masked row returns zeros."""
    q, k = _qk(L0=3, seed=1)
    g = torch.Generator().manual_seed(2)
    keep = torch.rand(3, S, generator=g) > 0.4
    keep[2] = False  # a fully masked row
    keep[0, S - 1] = True  # the last key attendable in one row (the end of the cumulative sum)
    if kind == "bool":
        mask = keep
    else:
        mask = torch.where(keep, torch.randn(3, S, generator=g), torch.tensor(float("-inf")))
    n, nu = 1500, 7
    rep = mask.repeat_interleave(n, dim=0)  # (3n, S)
    w = triton_sa.sa_attention_fused(_repeat(q, n), k, _eye(1), nu, attn_mask=rep, seed=5)[0, 0]
    pi = masked_attention_probs(q.double(), k.double(), mask.double() if kind == "additive" else mask)[0, 0]
    assert_counts(w[: 2 * n], nu, keep[:2].repeat_interleave(n, dim=0))
    assert torch.all(w[2 * n:] == 0)
    for i in range(2):
        assert_law(w[i * n:(i + 1) * n], pi[i], nu)


def test_causal_rows_draw_only_past_keys():
    """is_causal: row i draws among keys 0..i only (top-left aligned), counts sum to nu; row 0 is always key 0."""
    g = torch.Generator().manual_seed(3)
    L = S
    q, k = torch.randn(4, 2, L, 8, generator=g), torch.randn(4, 2, S, 8, generator=g)
    nu = 9
    w = triton_sa.sa_attention_fused(q, k, _eye(2).expand(4, 2, S, S), nu, is_causal=True, seed=7)
    assert_counts(w.reshape(-1, S), nu, torch.ones(L, S, dtype=torch.bool).tril().repeat(8, 1))
    assert torch.all(w[:, :, 0, 0] == 1)


def test_per_head_nu_and_deterministic_heads():
    """nu = (0, 1, 6): head 0 is the deterministic softmax output, head 1 draws one key, head 2 six."""
    q, k = _qk(L0=5, H=3, seed=4)
    g = torch.Generator().manual_seed(5)
    v = torch.randn(1, 3, S, 4, generator=g)
    nu = torch.tensor([0, 1, 6])
    out = triton_sa.sa_attention_fused(q, k, v, nu, seed=3)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out[:, 0], ref[:, 0], rtol=1e-5, atol=1e-5)
    w = triton_sa.sa_attention_fused(q, k, _eye(3), nu, seed=3)
    assert_counts(w[0, 1], 1, torch.ones(S, dtype=torch.bool))
    assert_counts(w[0, 2], 6, torch.ones(S, dtype=torch.bool))


def test_nu_one_returns_one_value_row_per_query():
    """nu = 1: each output row is exactly one row of V (a key the row may attend)."""
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 2, n, e, generator=g) for n, e in ((30, 8), (S, 8), (S, 5)))
    out = triton_sa.sa_attention_fused(q, k, v, 1, is_causal=True, seed=9)
    match = (out[:, :, :, None, :] == v[:, :, None, :, :]).all(-1)  # (B, H, L, S)
    assert torch.all(match.sum(-1) >= 1)
    assert not (match & ~torch.ones(30, S, dtype=torch.bool).tril()).any()


@pytest.mark.parametrize("nu", [1, 16])
def test_race_weights_follow_the_multinomial_law(nu):
    """sampler="race" (one pass, an exponential race per draw): mean pi and covariance (diag(pi) - pi pi^T) / nu."""
    q, k = _qk(seed=20)
    n = 3000
    w = triton_sa.sa_attention_fused(_repeat(q, n), k, _eye(1), nu, seed=21 + nu, sampler="race")[0, 0]
    pi = masked_attention_probs(q.double(), k.double())[0, 0]
    assert_counts(w, nu, torch.ones(S, dtype=torch.bool))
    for i in range(2):
        assert_law(w[i * n:(i + 1) * n], pi[i], nu)


def test_race_masks_causal_rows_seeds_and_limits(monkeypatch):
    """The race: an additive mask's law, -inf keys never drawn and a fully masked row zero; causal rows draw only
    past keys (row 0 always key 0); per-head nu; the same seed reproduces, another differs; nu above RACE_MAX_NU or
    a deterministic head is refused; "auto" takes it only where it was timed faster (nu <= 4, nu S <= 16384)."""
    q, k = _qk(L0=3, seed=22)
    g = torch.Generator().manual_seed(23)
    keep = torch.rand(3, S, generator=g) > 0.4
    keep[2] = False
    mask = torch.where(keep, torch.randn(3, S, generator=g), torch.tensor(float("-inf")))
    n, nu = 1500, 5
    w = triton_sa.sa_attention_fused(_repeat(q, n), k, _eye(1), nu, attn_mask=mask.repeat_interleave(n, dim=0),
                                     seed=24, sampler="race")[0, 0]  # fmt: skip
    assert_counts(w[: 2 * n], nu, keep[:2].repeat_interleave(n, dim=0))
    assert torch.all(w[2 * n:] == 0)
    pi = masked_attention_probs(q.double(), k.double(), mask.double())[0, 0]
    for i in range(2):
        assert_law(w[i * n:(i + 1) * n], pi[i], nu)
    qc, kc = torch.randn(2, 2, 30, 8, generator=g), torch.randn(2, 2, S, 8, generator=g)
    wc = triton_sa.sa_attention_fused(qc, kc, _eye(2).expand(2, 2, S, S), torch.tensor([3, 9]), is_causal=True,
                                      seed=25, sampler="race")  # fmt: skip
    for h, nu_h in enumerate((3, 9)):
        assert_counts(wc[:, h].reshape(-1, S), nu_h, torch.ones(30, S, dtype=torch.bool).tril().repeat(2, 1))
    assert torch.all(wc[:, :, 0, 0] == 1)
    a = triton_sa.sa_attention_fused(q, k, _eye(1), 4, seed=1, sampler="race")
    assert torch.equal(a, triton_sa.sa_attention_fused(q, k, _eye(1), 4, seed=1, sampler="race"))
    other_tiles = {"BLOCK_M": 16, "BLOCK_N": 32, "sample_warps": 4}  # the draws do not depend on the tiles
    assert torch.equal(a, triton_sa.sa_attention_fused(q, k, _eye(1), 4, seed=1, sampler="race", tiles=other_tiles))
    assert not torch.equal(a, triton_sa.sa_attention_fused(q, k, _eye(1), 4, seed=2, sampler="race"))
    for bad in (triton_sa.RACE_MAX_NU + 1, torch.tensor([0])):
        with pytest.raises(ValueError, match="race sampler"):
            triton_sa.sa_attention_fused(q, k, _eye(1), bad, seed=1, sampler="race")
    with pytest.raises(ValueError, match="sampler must be"):
        triton_sa.sa_attention_fused(q, k, _eye(1), 4, seed=1, sampler="gumbel")
    assert torch.equal(a, triton_sa.sa_attention_fused(q, k, _eye(1), 4, seed=1, sampler="auto"))  # the race
    for nu in (5, 16):  # auto: the two-pass kernel, where the race was timed slower
        assert torch.equal(triton_sa.sa_attention_fused(q, k, _eye(1), nu, seed=1, sampler="auto"),
                           triton_sa.sa_attention_fused(q, k, _eye(1), nu, seed=1, sampler="cdf"))  # fmt: skip
    assert not torch.equal(triton_sa.sa_attention_fused(q, k, _eye(1), 5, seed=1, sampler="cdf"),
                           triton_sa.sa_attention_fused(q, k, _eye(1), 5, seed=1, sampler="race"))  # fmt: skip
    two_pass = triton_sa.sa_attention_fused(q, k, _eye(1), 4, seed=1, sampler="cdf")
    assert not torch.equal(a, two_pass)
    monkeypatch.setattr(triton_sa, "AUTO_RACE_MAX_DRAWS", 4 * S - 1)  # nu * S above the limit: the two-pass kernel
    assert torch.equal(triton_sa.sa_attention_fused(q, k, _eye(1), 4, seed=1, sampler="auto"), two_pass)


@pytest.mark.parametrize("nu, chunk", [(1, None), (50, None), (16, 16)], ids=["nu1", "nu50", "nu16-one-sweep"])
def test_groups_weights_follow_the_multinomial_law(nu, chunk):
    """sampler="groups" (each row's points placed first in its groups' masses from pass 1, then within the groups
    that received them): mean pi and covariance (diag(pi) - pi pi^T) / nu. In the interpreter a group is 16 keys
    (three groups in S = 40) and a chunk 8 (each group swept twice: its total, then the placing); chunk 16: one
    sweep."""
    q, k = _qk(seed=30)
    n = 3000
    tiles = None if chunk is None else {"chunk": chunk}
    w = triton_sa.sa_attention_fused(_repeat(q, n), k, _eye(1), nu, seed=31 + nu, sampler="groups", tiles=tiles)[0, 0]
    pi = masked_attention_probs(q.double(), k.double())[0, 0]
    assert_counts(w, nu, torch.ones(S, dtype=torch.bool))
    for i in range(2):
        assert_law(w[i * n:(i + 1) * n], pi[i], nu)


def test_groups_sampler_draws_the_keys_of_the_two_pass_sampler():
    """The groups sampler places the two-pass sampler's sorted points (the same Philox counters) by the same
    cumulative sum taken in two stages (groups, then keys within a group): with the same seed both give every row
    the same keys (V the identity: equal outputs), here with fp32 arithmetic in both (the GPU's tensor-core scores
    of pass 1 may move a point at a rounding boundary). Also under boolean and additive masks with a fully masked
    row (zeros), causal rows (L > S and L < S) and per-head nu; whatever the rows per program and keys per chunk;
    nu above GROUPS_MAX_NU or a deterministic head is refused."""
    g = torch.Generator().manual_seed(32)
    q, k = torch.randn(2, 2, 50, 8, generator=g) * 1.5, torch.randn(2, 2, S, 8, generator=g)
    v = _eye(2).expand(2, 2, S, S)  # outputs are the weight rows: counts / nu, exact in both samplers
    keep = torch.rand(50, S, generator=g) > 0.4
    keep[7] = False
    additive = torch.where(keep, torch.randn(50, S, generator=g), torch.tensor(float("-inf")))
    nu_h = torch.tensor([3, 9])
    cases = [({}, 1), ({}, 64), ({}, nu_h), ({"attn_mask": keep}, 5), ({"attn_mask": additive}, nu_h),
             ({"is_causal": True}, 4), ({"is_causal": True}, 1)]  # fmt: skip
    for kwargs, nu in cases:
        two_pass = triton_sa.sa_attention_fused(q, k, v, nu, seed=33, sampler="cdf", **kwargs)
        for tiles in (None, {"rows": 16, "chunk": 16}):
            groups = triton_sa.sa_attention_fused(q, k, v, nu, seed=33, sampler="groups", tiles=tiles, **kwargs)
            assert torch.equal(groups, two_pass), (kwargs, nu, tiles)
    assert torch.all(triton_sa.sa_attention_fused(q, k, v, 5, seed=33, sampler="groups", attn_mask=keep)[:, :, 7] == 0)
    qs = torch.randn(1, 1, 20, 8, generator=g)  # causal with L < S
    assert torch.equal(triton_sa.sa_attention_fused(qs, k[:1, :1], v[:1, :1], 6, is_causal=True, seed=1,
                                                    sampler="groups"),
                       triton_sa.sa_attention_fused(qs, k[:1, :1], v[:1, :1], 6, is_causal=True, seed=1,
                                                    sampler="cdf"))  # fmt: skip
    for bad in (triton_sa.GROUPS_MAX_NU + 1, torch.tensor([0, 2])):
        with pytest.raises(ValueError, match="groups sampler"):
            triton_sa.sa_attention_fused(q, k, v, bad, seed=1, sampler="groups")
    with pytest.raises(ValueError, match="unknown tile settings"):
        triton_sa.sa_attention_fused(q, k, v, 2, seed=1, sampler="groups", tiles={"ROWS": 4})


def test_groups_sampler_takes_the_one_pass_kernel_where_a_row_fits_one_tile(monkeypatch):
    """Rows of at most ONE_PASS_MAX_KEYS keys (16 in the interpreter) fit one tile: "groups" runs the one-pass
    kernel, one launch placing the same points on the same keys, and still refuses what the groups sampler refuses."""
    kernels, _ = triton_sa._kernels()
    launched = []
    for name in ("_group_mass_kernel", "_groups_kernel"):
        monkeypatch.setattr(kernels, name, type("Never", (), {"__getitem__": lambda self, grid: launched.append(1)})())
    q, k = _qk(L0=6, H=2, S=16, seed=34)
    nu = torch.tensor([2, 7])
    out = triton_sa.sa_attention_fused(q, k, _eye(2, S=16), nu, seed=35, sampler="groups")
    assert torch.equal(out, triton_sa.sa_attention_fused(q, k, _eye(2, S=16), nu, seed=35, sampler="cdf"))
    assert not launched
    with pytest.raises(ValueError, match="groups sampler"):
        triton_sa.sa_attention_fused(q, k, _eye(2, S=16), torch.tensor([0, 2]), seed=1, sampler="groups")


def test_group_keys_keep_the_group_masses_linear_in_the_sequence():
    """Pass 1 of the groups sampler stores (rows, ceil(S / group)) floats: at most GROUPS_MAX_GROUPS per row, groups of
    at least GROUP_MIN_KEYS keys, powers of two (the kernel's binary searches)."""
    for S_ in (1, 40, 1024, 4096, 4097, 16384, 100_000):
        group = triton_sa.group_keys(S_)
        assert group >= triton_sa.GROUP_MIN_KEYS and group & (group - 1) == 0
        assert -(-S_ // group) <= triton_sa.GROUPS_MAX_GROUPS
        assert group == triton_sa.GROUP_MIN_KEYS or -(-S_ // (group // 2)) > triton_sa.GROUPS_MAX_GROUPS
    assert triton_sa.group_keys(40, interpreting=True) == 16


def test_auto_sampler_takes_the_race_where_it_was_timed_faster(monkeypatch):
    """The library's default sampler is "auto": the race at nu = 1 whatever the length (timed faster up to 16k
    keys), at nu <= 4 only up to AUTO_RACE_MAX_DRAWS draws per row, the two-pass kernel otherwise and for per-head
    nu."""
    assert LIBRARY_SAMPLER == "auto"
    monkeypatch.setattr(triton_sa, "DEFAULT_SAMPLER", LIBRARY_SAMPLER)
    monkeypatch.setattr(triton_sa, "AUTO_RACE_MAX_DRAWS", 2)  # below every nu * S here
    q, k = _qk(L0=16, seed=5)  # 16 rows: the two samplers' draws differ in some row
    v = torch.randn(1, 1, S, 3, generator=torch.Generator().manual_seed(6))

    def same(nu, sampler):
        return torch.equal(triton_sa.sa_attention_fused(q, k, v, nu, seed=3),
                           triton_sa.sa_attention_fused(q, k, v, nu, seed=3, sampler=sampler))  # fmt: skip

    assert same(1, "race") and not same(1, "cdf")
    assert same(2, "cdf") and not same(2, "race")
    assert same(torch.tensor([1]), "cdf")
    monkeypatch.setattr(triton_sa, "AUTO_RACE_MAX_DRAWS", 4 * S)
    assert same(4, "race") and same(5, "cdf")


def test_seed_and_offset_reproduce_and_separate_draws():
    q, k = _qk(L0=20, seed=7)
    v = _eye(1)
    a = triton_sa.sa_attention_fused(q, k, v, 4, seed=123)
    assert torch.equal(a, triton_sa.sa_attention_fused(q, k, v, 4, seed=123))
    assert not torch.equal(a, triton_sa.sa_attention_fused(q, k, v, 4, seed=124))
    assert not torch.equal(a, triton_sa.sa_attention_fused(q, k, v, 4, seed=123, offset=20 * 4))


@pytest.mark.parametrize("sampler, S, nu", [("cdf", S, 3), ("cdf", 12, 3), ("race", S, 3), ("groups", S, 5)])
def test_a_seed_in_device_memory_draws_what_the_same_int_seed_draws(sampler, S, nu):
    """seed as a one-element int64 tensor (read by the kernels, as a captured CUDA graph needs) gives the draws of
    the same int seed: the two-pass and one-pass (S = 12) cdf kernels, the race, the groups sampler; and a device
    stream's next call (advance_stream) is the host's (_call_seed, then _call_kernel_seed's mix on CUDA)."""
    from stochattn.attention import _mix

    q, k = _qk(L0=30, H=2, S=S, seed=12)
    v = _eye(2, S=S)
    for seed in (5, 2**62 + 11):
        ints = triton_sa.sa_attention_fused(q, k, v, nu, seed=seed, sampler=sampler)
        held = triton_sa.sa_attention_fused(q, k, v, nu, seed=torch.tensor([seed]), sampler=sampler)
        assert torch.equal(ints, held)
    stream = torch.tensor([2**61 + 3, 7, 0, 0])
    seed = triton_sa.advance_stream(stream)
    call = _mix(2**61 + 3, 7)
    assert stream.tolist() == [2**61 + 3, 8, call, _mix(call, 0)] and seed.data_ptr() == stream[3:].data_ptr()
    assert torch.equal(triton_sa.sa_attention_fused(q, k, v, nu, seed=seed, sampler=sampler),
                       triton_sa.sa_attention_fused(q, k, v, nu, seed=_mix(call, 0), sampler=sampler))  # fmt: skip
    with pytest.raises(ValueError, match="int64"):
        triton_sa.sa_attention_fused(q, k, v, nu, seed=torch.tensor([5], dtype=torch.int32))
    with pytest.raises(ValueError, match="device stream"):
        triton_sa.advance_stream(torch.tensor([1, 2]))


def test_device_streams_go_on_with_the_draws_of_host_streams(monkeypatch):
    """StochasticAttention.streams_to: a model whose streams were moved to "the device" (here the interpreter's CPU,
    a device stream being the 4-element layout) draws, call after call, what it would have drawn with its host
    streams (the kernel seed mixed as on CUDA), advancing the stream once per SA call; the explicit path takes the
    same stream through the host; "cpu" brings the host streams back."""
    from stochattn import attention
    from stochattn.attention import device_stream
    from stochattn.patch import StochasticAttention

    monkeypatch.setattr(attention, "_call_kernel_seed", lambda call_seed, device: attention._mix(call_seed, 0))

    q, k = _qk(L0=20, H=2, S=20)
    v = torch.randn(1, 2, 20, 5, generator=torch.Generator().manual_seed(1))
    block = _CausalSDPA()
    runs = {}
    for where in ("host", "device"):
        with StochasticAttention(block, nu=3, fused=True, generator=torch.Generator().manual_seed(3)) as sa:
            state = next(iter(sa._states.values()))
            first = block(q, k, v)
            if where == "device":
                state.rng = device_stream(state.rng, "cpu")  # a device stream, where the interpreter runs
                assert state.rng.tolist()[:2] == [state.rng[0].item(), 1]
            runs[where] = [first, block(q, k, v), block(q, k, v)]
            assert state.rng[1].item() == 3
            sa.streams_to("cpu")
            assert state.rng.shape == (2,) and state.rng[1].item() == 3
    assert all(torch.equal(a, b) for a, b in zip(runs["host"], runs["device"]))
    assert not torch.equal(runs["host"][1], runs["host"][2])
    with StochasticAttention(block, nu=3, fused=False, generator=torch.Generator().manual_seed(3)) as sa:
        state = next(iter(sa._states.values()))
        host = [block(q, k, v) for _ in range(2)]
        state.rng = device_stream(torch.tensor([state.rng[0].item(), 0]), "cpu")
        device = [block(q, k, v) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(host, device)) and state.rng[1].item() == 2


def test_draws_seeded_on_the_host_are_refused_inside_a_cuda_graph_capture(monkeypatch):
    """Under CUDA graph capture a generator seeded on the host would be replayed with one draw: refused, naming the
    way out (device streams)."""
    from stochattn.attention import call_generator, new_stream

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match="streams_to"):
        call_generator(new_stream()[0], "cuda")


@pytest.mark.parametrize("dtype, nu", [(torch.bfloat16, 5), (torch.bfloat16, 300), (torch.float16, 40)])
def test_half_precision_inputs(dtype, nu):
    """16-bit inputs: counts stay exact integers (beyond 256 draws in bf16, the count x V product runs in fp32); a
    deterministic head (nu = 0) matches SDPA to the dtype's precision."""
    q, k = (t.to(dtype) for t in _qk(L0=16, H=2, seed=8))
    w = triton_sa.sa_attention_fused(q, k, _eye(2, dtype=dtype), torch.tensor([nu, 0]), seed=1)
    assert w.dtype == dtype
    counts = w[0, 0].double() * nu
    assert torch.all((counts - counts.round()).abs() <= counts * 2.0**-7) and torch.all(counts.round().sum(-1) == nu)
    ref = torch.softmax((q[0, 1].double() @ k[0, 1].double().T) / math.sqrt(q.shape[-1]), -1)
    torch.testing.assert_close(w[0, 1].double(), ref, rtol=0.02, atol=2e-3)


def test_agrees_in_law_with_the_explicit_path():
    """Two-sample z-scores of the output's mean and variance (random V, one query, N = 3000 draws each) between the
    fused kernel and stochattn.attention.scaled_dot_product_attention with the same nu and an additive mask."""
    q, k = _qk(L0=1, seed=9)
    g = torch.Generator().manual_seed(10)
    v = torch.randn(1, 1, S, 3, generator=g)
    mask = torch.randn(1, S, generator=g)
    n, nu = 3000, 4
    qn = _repeat(q, n)
    fused = triton_sa.sa_attention_fused(qn, k, v, nu, attn_mask=mask, seed=21)[0, 0].double()
    explicit = scaled_dot_product_attention(qn, k, v, attn_mask=mask, nu=nu, generator=g)[0, 0].double()
    z_mean = (fused.mean(0) - explicit.mean(0)) / torch.sqrt((fused.var(0) + explicit.var(0)) / n)
    assert z_mean.abs().max() < Z_MAX, z_mean
    # var of a sample variance ~ (mu4 - var^2) / n, mu4 from the pooled fourth central moments
    pooled = torch.cat([fused - fused.mean(0), explicit - explicit.mean(0)])
    se = torch.sqrt(2 * ((pooled**4).mean(0) - pooled.var(0) ** 2) / n)
    z_var = (fused.var(0) - explicit.var(0)) / se
    assert z_var.abs().max() < Z_MAX, z_var


def test_unavailable_where_the_kernel_cannot_run(monkeypatch):
    """The caller's fallback signal: available() is (False, reason) and the entry point raises
    FusedUnavailableError, off the interpreter's device and where triton cannot be imported."""
    ok, reason = triton_sa.available("cuda")
    assert not ok and "interpreter" in reason
    q = torch.zeros(1, 1, 2, 8)
    monkeypatch.setattr(triton_sa, "_kernels", lambda: (None, "triton is not importable (test)"))
    assert triton_sa.available("cpu") == (False, "triton is not importable (test)")
    with pytest.raises(triton_sa.FusedUnavailableError, match="not importable"):
        triton_sa.sa_attention_fused(q, q, q, 2, seed=0)


def test_bad_arguments():
    q = torch.zeros(1, 2, 3, 8)
    for nu, err in ((0, ValueError), (torch.tensor([1.0, 2.0]), ValueError), (torch.tensor([1, 2, 3]), ValueError)):
        with pytest.raises(err):
            triton_sa.sa_attention_fused(q, q, q, nu, seed=0)
    with pytest.raises(ValueError, match="is_causal"):
        triton_sa.sa_attention_fused(q, q, q, 2, attn_mask=torch.ones(3, 3, dtype=torch.bool), is_causal=True, seed=0)
    with pytest.raises(TypeError):
        triton_sa.sa_attention_fused(q, q.double(), q, 2, seed=0)


def test_stochastic_attention_runs_the_fused_kernel_on_the_sdpa_path():
    """StochasticAttention(fused=True) on a module that calls F.scaled_dot_product_attention: its SDPA call is the
    kernel's, with the seed drawn from the generator (same generator seed -> the kernel's output at that seed);
    fused=False keeps the explicit path (a different draw of the same law); nu=1 rows are rows of V either way."""
    from stochattn.patch import StochasticAttention

    q, k = _qk(L0=6, H=2, S=6)
    v = torch.randn(1, 2, 6, 5, generator=torch.Generator().manual_seed(1))
    block = _CausalSDPA()
    with StochasticAttention(block, nu=1, fused=True, generator=torch.Generator().manual_seed(3)):
        out = block(q, k, v)
    # the module's random stream is seeded from the generator; its first call's generator draws the kernel's seed
    from stochattn.attention import call_generator, new_stream

    call = call_generator(new_stream(torch.Generator().manual_seed(3))[0], "cpu")
    seed = int(torch.randint(0, 2**62, (1,), generator=call).item())
    assert torch.equal(out, triton_sa.sa_attention_fused(q, k, v, 1, is_causal=True, seed=seed))
    with StochasticAttention(block, nu=1, fused=False, generator=torch.Generator().manual_seed(3)):
        explicit = block(q, k, v)
    for o in (out, explicit):
        assert (o[..., :, None, :] == v[..., None, :, :]).all(-1).any(-1).all()
    with pytest.raises(triton_sa.FusedUnavailableError, match="dropout"):
        scaled_dot_product_attention(q, k, v, dropout_p=0.1, nu=2, fused=True)


@pytest.mark.parametrize("backbone", ["timesfm", "climax"])
def test_foundation_model_adapters_take_the_fused_kernel(backbone, monkeypatch):
    """The TimesFM (its SDPA attention function, left-padding mask) and ClimaX (ViT blocks, and the variable
    aggregation's nn.MultiheadAttention, which asks for no weights) adapters run SA through the SDPA path: with
    fused=True every attention call of the blocks is the kernel's (per-head nu included), the forecast is finite,
    and at nu=512 it lies near the deterministic one (SA's spread shrinks as 1/sqrt(nu))."""
    from stochattn.patch import StochasticAttention

    calls = []
    kernel = triton_sa.sa_attention_fused
    monkeypatch.setattr(triton_sa, "sa_attention_fused", lambda *a, **kw: calls.append(a[3]) or kernel(*a, **kw))
    g = torch.Generator().manual_seed(0)
    if backbone == "timesfm":
        from stochattn.backbones.timesfm import build_timesfm, point_forecast

        model = build_timesfm(num_layers=2, model_dims=32, num_heads=2, seed=0)
        ctx = torch.randn(2, 64, generator=g).cumsum(1)
        mask = torch.zeros_like(ctx, dtype=torch.bool)
        mask[0, :20] = True  # left padding: fully masked query rows in the first patch

        def call():
            return point_forecast(model, ctx, mask, horizon=16)

        per_head = {"*": [2, None]}
    else:
        from stochattn.backbones.climax import build_climax, climax_sa_nu

        model = build_climax(img_size=(8, 16), embed_dim=32, depth=2, num_heads=2, seed=0).eval()
        x = torch.randn(1, 3, 8, 16, generator=g)

        def call():
            return model.forward_encoder(x, 0.72)

        per_head = climax_sa_nu([2, None], ("blocks",))
    with torch.no_grad():
        det = call()
        for nu in (3, per_head, 512):
            calls.clear()
            with StochasticAttention(model, nu, fused=True, generator=torch.Generator().manual_seed(1)):
                out = call()
            assert len(calls) >= 2 and torch.isfinite(out).all(), (nu, len(calls))  # two blocks, each at least once
            if backbone == "climax" and nu == 3:  # and the variable aggregation (nn.MultiheadAttention, no weights)
                assert len(calls) == 3, len(calls)
        assert (out - det).abs().max() < 0.1 * det.abs().max()


def test_a_kernel_that_fails_to_compile_falls_back_once_with_a_warning(monkeypatch):
    """fused=None: a compile failure (Triton's CompilationError) is reported once in a RuntimeWarning and the call
    returns None (the caller's explicit path); later calls do not try the kernel again. fused=True raises it;
    a bad argument (ValueError) is never taken for a kernel failure, nor is the GPU running out of memory (raised,
    the kernel kept on: the review's gap 1, ../shared/notes/fused-kernel-review.md)."""
    from triton.compiler.errors import CompilationError

    from stochattn import attention

    calls = []

    def broken(*a, **kw):
        calls.append(1)
        raise CompilationError("kernel.py", None, "ptxas fatal: unsupported (simulated)")

    monkeypatch.setattr(triton_sa, "sa_attention_fused", broken)
    monkeypatch.setattr(attention, "_fused_failure", None)
    q = torch.randn(1, 1, 4, 8)
    args = (q, q, q, None, 0.0, False, None, 2, None)
    with pytest.raises(CompilationError):
        attention._fused(*args, force=True)
    assert attention._fused_failure is None
    with pytest.warns(RuntimeWarning, match="fused SA kernel failed.*CompilationError"):
        assert attention._fused(*args, force=False) is None
    assert attention._fused(*args, force=False) is None and len(calls) == 2  # not tried again
    assert not triton_sa.is_kernel_failure(ValueError("bad nu")) and triton_sa.is_kernel_failure(RuntimeError("ptxas"))
    # out of GPU memory: the caller's error (the explicit path needs more), and the kernel is tried again later
    assert not triton_sa.is_kernel_failure(torch.OutOfMemoryError("CUDA out of memory"))

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(triton_sa, "sa_attention_fused", out_of_memory)
    monkeypatch.setattr(attention, "_fused_failure", None)
    with pytest.raises(torch.OutOfMemoryError):
        attention._fused(*args, force=False)
    assert attention._fused_failure is None


def test_kernels_compile_for_a_cuda_gpu_without_one(tmp_path):
    """Triton's whole pipeline down to a cubin (ptxas from its wheel) for sm_90 at the GPU tile sizes, head dim 80
    (TimesFM 2.5), bf16, every mask variant, in a process without the interpreter: what the interpreter tests cannot
    see (typing of the loops, tl.dot shapes, register allocation) fails here instead of on a user's GPU."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # compile, never read a cached cubin
    run = subprocess.run([sys.executable, str(repo / "benchmarks" / "triton_compile_check.py"), "--arch", "90",
                          "--dtype", "bf16", "--head-dim", "80", "--nu-max", "1"], capture_output=True, text=True,
                         env=env, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [ln for ln in run.stdout.splitlines() if ln.startswith("sm_90 bf16 E=80")]
    assert len(rows) == 22 and all("  ok  " in ln and "registers" in ln for ln in rows), run.stdout  # 4 x 5 + 2


_SEED_IN_MEMORY = r"""
import sys
sys.path.insert(0, sys.argv[1])
from triton_compile_check import VARIANTS, compile_rows
for row in compile_rows((90,), ("bf16",), VARIANTS[:1], (64,), 16, seed_in_memory=True):
    print(row["check"], "ok" if row["ok"] else "FAIL", row["value"])
"""


def test_kernels_reading_their_seed_from_device_memory_compile_for_a_cuda_gpu(tmp_path):
    """The drawing kernels with a pointer seed (a device stream's, for CUDA graphs: a compile-time branch on the
    argument's type, which the interpreter does not exercise) and the stream's advance kernel compile to cubins for
    sm_90."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    run = subprocess.run([sys.executable, "-c", _SEED_IN_MEMORY, str(repo / "benchmarks")], capture_output=True,
                         text=True, env=env, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    rows = run.stdout.splitlines()
    kernels = ("_sample_kernel", "_race_kernel", "_groups_kernel", "_advance_stream_kernel")
    assert all(any(ln.split(" ok ")[0].endswith(k) for ln in rows) for k in kernels), run.stdout
    assert all(" ok " in ln and "registers" in ln for ln in rows), run.stdout


#: A few of tests/test_triton_sa_cuda.py's cheapest tests, one of each kind of its helpers' use: counts per head, a
#: one-pass masked row per sampler, the CUDA-graph test's eager part.
_CUDA_FILE_DRY_RUN = "per_head or (masks and one-pass and (race or autotuned)) or (captured and cdf)"


def test_the_cuda_test_file_runs_its_own_code_in_the_interpreter():
    """tests/test_triton_sa_cuda.py runs only where a GPU is lent, rarely and for minutes; its dry run
    (SA_CUDA_TESTS_ON_CPU=1: CPU tensors in the interpreter) runs a few of its tests here, so that a broken test is
    found before a device session spends its time on it (2026-12-05: the CUDA-graph test passed a dtype's name where
    torch wants the dtype, and would have failed at its first line on the GPU)."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, SA_CUDA_TESTS_ON_CPU="1", TRITON_INTERPRET="1")
    env.pop("SA_LAW_LOG", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          str(repo / "tests" / "test_triton_sa_cuda.py"), "-k", _CUDA_FILE_DRY_RUN],
                         capture_output=True, text=True, env=env, cwd=repo, timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "3 passed, 1 skipped" in run.stdout and "the eager part ran" in run.stdout, run.stdout[-3000:]


_MMA_COUNT = r"""
import re, sys
sys.path.insert(0, sys.argv[1])
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton_compile_check import _signature
from stochattn import triton_sa_kernels as kernels
for precision in sys.argv[2:]:
    meta = {"MASK_KIND": 0, "IS_CAUSAL": False, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_E": 64, "PRECISION": precision,
            "UPCAST": False}
    fn = kernels._stats_kernel
    constexprs = {(fn.arg_names.index(k),): v for k, v in meta.items()}
    src = ASTSource(fn, _signature(fn, "fp32", 0, meta), constexprs=constexprs)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
    print(precision, len(re.findall(r"\bmma\.", ptx)), len(re.findall(r"cvt\.rna\.tf32", ptx)))
"""


def test_fp32_scores_run_on_the_tensor_cores_where_tf32_exists(tmp_path, monkeypatch):
    """fp32 q k^T: 3xTF32 where the GPU has TF32 (compute capability >= 8.0, as torch's memory-efficient SDPA), FFMA
    before (V100) and off CUDA; 16-bit operands as they are. Compiled for sm_90 (no GPU), the fp32 stats kernel then
    issues tensor-core mma instructions on split operands (cvt.rna.tf32); with "ieee" it issues none."""
    import subprocess
    import sys
    from pathlib import Path

    assert triton_sa.scores_precision(torch.float32, (9, 0)) == triton_sa.FP32_SCORES_PRECISION == "tf32x3"
    assert triton_sa.scores_precision(torch.float32, (8, 0)) == "tf32x3"
    assert triton_sa.scores_precision(torch.float32, (7, 0)) == "ieee"
    assert triton_sa.scores_precision(torch.float32, None) == "ieee"
    assert triton_sa.scores_precision(torch.bfloat16, (9, 0)) == "tf32"
    assert triton_sa._capability(torch.device("cpu")) is None
    asked = []  # a CUDA device's capability is read once, then cached (no query per attention call)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: asked.append(index) or (9, 0))
    monkeypatch.setattr(torch.version, "hip", None)
    triton_sa._capability_of.cache_clear()
    try:
        assert [triton_sa._capability(torch.device("cuda", 1)) for _ in range(3)] == [(9, 0)] * 3
    finally:
        triton_sa._capability_of.cache_clear()
    assert asked == [1]
    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    run = subprocess.run([sys.executable, "-c", _MMA_COUNT, str(repo / "benchmarks"), "tf32x3", "ieee"],
                         capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    counts = {line.split()[0]: [int(x) for x in line.split()[1:]] for line in run.stdout.splitlines()}
    assert counts["tf32x3"][0] > 0 and counts["tf32x3"][1] > 0, counts
    assert counts["ieee"] == [0, 0], counts


def test_the_draw_tile_never_leaves_a_scan_shorter_than_a_thread_holds():
    """nu = 1 on the first H200 run (Triton 3.6.0, 2026-11-29) stopped in ScanOpToLLVM.cpp: NU_BLOCK was capped at
    nu's next power of two (1), and the draws' cumulative spacings were scanned over a (32, 1) tile whose layout holds
    2 elements per thread along the axis. The draw tile is now at least MIN_NU_BLOCK, and the compile check's
    detector finds the scan in that run's TTGIR (and none in a whole one)."""
    import sys
    from pathlib import Path

    from stochattn.triton_sa import MIN_NU_BLOCK, ONE_PASS_CONFIGS, SAMPLE_CONFIGS, draw_tile

    benchmarks = str(Path(__file__).resolve().parents[1] / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    from triton_compile_check import replicated_scans

    assert [draw_tile(64, n) for n in (1, 2, 3, 16, 17, 33, 4096)] == [16, 16, 16, 16, 32, 64, 64]
    assert draw_tile(8, 4096) == MIN_NU_BLOCK
    assert min(c[2] for c in (*SAMPLE_CONFIGS, *ONE_PASS_CONFIGS)) >= MIN_NU_BLOCK
    ttgir = (
        "#blocked = #ttg.blocked<{sizePerThread = [2, 2], threadsPerWarp = [2, 16], warpsPerCTA = [8, 1], "
        "order = [1, 0]}>\n"
        "#blocked4 = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [8], order = [0]}>\n"
    ) + """
        %248 = "tt.scan"(%204) <{axis = 1 : i32, reverse = false}> ({
        ^bb0(%arg48: f32, %arg49: f32):
          %329 = arith.addf %arg48, %arg49 : f32
          tt.scan.return %329 : f32
        }) : (tensor<32x32xf32, #blocked>) -> tensor<32x32xf32, #blocked>
          %413 = "tt.scan"(%412) <{axis = 1 : i32, reverse = false}> ({
          ^bb0(%arg51: f32, %arg52: f32):
            %445 = arith.addf %arg51, %arg52 : f32
            tt.scan.return %445 : f32
          }) : (tensor<32x1xf32, #blocked>) -> tensor<32x1xf32, #blocked>
"""  # fmt: skip
    assert replicated_scans(ttgir) == ["32x1 in sizePerThread [2, 2]"]
    assert replicated_scans(ttgir.replace("32x1xf32", "32x16xf32")) == []


def test_every_launch_keyword_is_a_kernel_parameter_or_a_launch_option(monkeypatch):
    """The compiled launcher refuses a keyword that is neither a parameter of the kernel nor a launch option
    (``KeyError: Keyword argument ... was specified but unrecognised``); the interpreter accepts it silently. The
    first version passed pass 2's NU_BLOCK to pass 1 and would have failed on its first GPU call."""
    kernels, _ = triton_sa._kernels()
    launch_options = {"num_warps", "num_stages", "num_ctas", "maxnreg"}
    seen = {}
    for name in ("_stats_kernel", "_sample_kernel", "_race_kernel", "_group_mass_kernel", "_groups_kernel"):
        kernel = getattr(kernels, name)

        class Recorder:
            def __getitem__(self, grid, _kernel=kernel, _name=name):
                def launch(*args, **kwargs):
                    seen[_name] = set(kwargs) - set(_kernel.arg_names) - launch_options
                    return _kernel[grid](*args, **kwargs)

                return launch

        monkeypatch.setattr(kernels, name, Recorder())
    monkeypatch.setattr(triton_sa, "_interpreting", lambda _kernels: True)  # the recorders hide the interpreter
    q, k = _qk(L0=4, H=2, seed=13)
    triton_sa.sa_attention_fused(q, k, k, torch.tensor([3, 0]), attn_mask=torch.ones(4, S, dtype=torch.bool), seed=1)
    triton_sa.sa_attention_fused(q, k, k, 3, attn_mask=torch.ones(4, S, dtype=torch.bool), seed=1, sampler="race")
    triton_sa.sa_attention_fused(q, k, k, 3, attn_mask=torch.ones(4, S, dtype=torch.bool), seed=1, sampler="groups")
    assert seen == {name: set() for name in ("_stats_kernel", "_sample_kernel", "_race_kernel", "_group_mass_kernel",
                                             "_groups_kernel")}, seen  # fmt: skip


def test_output_is_laid_out_as_fused_sdpa_lays_out_its_own():
    """(B, H, L, Ev) in (B, L, H, Ev) memory, as torch's fused SDPA: ``out.transpose(1, 2).reshape(B, L, H * Ev)``
    is a view (no copy per attention call), for every sampler; with V the identity every head's rows are still
    that head's weight rows W / nu (counts summing to nu), so the kernels write through the strides."""
    q, k = _qk(L0=5, H=3, seed=40)
    for sampler in ("cdf", "race", "groups"):
        out = triton_sa.sa_attention_fused(q, k, _eye(3), torch.tensor([2, 3, 4]), seed=7, sampler=sampler)
        assert out.shape == (1, 3, 5, S) and out.transpose(1, 2).is_contiguous()
        assert out.transpose(1, 2).reshape(1, 5, 3 * S).data_ptr() == out.data_ptr()
        for h, nu in enumerate((2, 3, 4)):
            assert_counts(out[0, h], nu, torch.ones(S, dtype=torch.bool))


def test_launcher_tunes_once_per_key_then_launches_the_chosen_configuration():
    """triton_sa._Launcher: the first call of a key goes through the autotuner (which times and launches); later
    calls of that key launch its JIT function with the chosen configuration's keywords, and keep ``best_config``
    as the autotuner's own launch would; another key is tuned anew."""
    launches = []

    class Config:
        def __init__(self, warps):
            self.warps = warps

        def all_kwargs(self):
            return {"BLOCK_M": 16, "num_warps": self.warps}

    class Jit:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append(("jit", grid, args, kwargs))

    class Tuner:
        fn, best_config, configs = Jit(), None, {"a": Config(2), "b": Config(8)}

        def __getitem__(self, grid):
            def run(*args, **kwargs):
                self.best_config = self.configs[kwargs["which"]]
                launches.append(("tuner", grid, args, kwargs))

            return run

    tuner = Tuner()
    launcher = triton_sa._Launcher(tuner)
    launcher(("a",), "grid", (1, 2), {"which": "a"})
    launcher(("a",), "grid", (3, 4), {"which": "a"})
    tuner.best_config = None
    launcher(("a",), "grid", (5, 6), {"which": "a"})
    launcher(("b",), "grid", (7,), {"which": "b"})
    assert [x[0] for x in launches] == ["tuner", "jit", "jit", "tuner"]
    assert launches[1] == ("jit", "grid", (3, 4), {"which": "a", "BLOCK_M": 16, "num_warps": 2})
    assert tuner.best_config is tuner.configs["b"] and launcher.chosen[("a",)] is tuner.configs["a"]


def test_launcher_refuses_to_tune_inside_a_cuda_graph_capture(monkeypatch):
    """Tuning times kernels (synchronising), which a capture refuses: a key not tuned yet says to run the forward
    once first; a tuned key launches under capture."""
    launches = []

    class Tuner:
        best_config = None

        class fn:
            def __class_getitem__(cls, grid):
                return lambda *args, **kwargs: launches.append("jit")

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append("tuner")

    launcher = triton_sa._Launcher(Tuner())
    launcher.chosen[("tuned",)] = type("Config", (), {"all_kwargs": lambda self: {}})()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match="run the forward once before capturing"):
        launcher(("new",), "grid", (), {})
    launcher(("tuned",), "grid", (), {})
    assert launches == ["jit"]
