"""Tests for stochattn.baselines.swag (SWAG moments, sampling law, fitting, MultiSWAG pooling)."""

import pytest
import torch
from torch import nn

from stochattn.backbones.ft_transformer import build_ft_transformer
from stochattn.baselines.swag import SWAG, fit_swag, multiswag_samples, swag_samples
from stochattn.training import fit_regressor


pytestmark = pytest.mark.usefixtures("one_thread")


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()


def set_flat(model, v):
    with torch.no_grad():
        i = 0
        for p in model.parameters():
            p.copy_(v[i : i + p.numel()].view_as(p))
            i += p.numel()


def fed_swag(T=30, K=5, seed=0):
    """A Linear(3, 1) (P = 4) fed a known random-walk trajectory of T parameter vectors."""
    g = torch.Generator().manual_seed(seed)
    model = nn.Linear(3, 1)
    traj = torch.cumsum(torch.randn(T, 4, generator=g, dtype=torch.float64), 0) * 0.1 + torch.tensor(
        [1.0, -1.0, 0.5, 2.0], dtype=torch.float64)
    traj = traj.float().double()  # the model stores float32
    swag = SWAG(max_rank=K)
    for t in range(T):
        set_flat(model, traj[t])
        swag.collect(model)
    return model, swag, traj


def test_moments_and_deviations_match_the_trajectory():
    T, K = 30, 5
    model, swag, traj = fed_swag(T, K)
    assert swag.n_collected == T and swag.rank == K and swag.num_params == 4
    assert swag.param_names == ["weight", "bias"]
    assert torch.allclose(swag.mean, traj.mean(0), atol=1e-12)
    assert torch.allclose(swag.variance(), traj.var(0, unbiased=False), atol=1e-10)
    running = torch.cumsum(traj, 0) / torch.arange(1, T + 1, dtype=torch.float64)[:, None]
    expected_dev = (traj - running)[-K:]  # theta_i minus the running mean including theta_i, last K, oldest first
    assert torch.allclose(swag.deviations.double(), expected_dev, atol=1e-6)


def test_sample_covariance_matches_swag_formula():
    K = 5
    model, swag, _ = fed_swag(30, K)
    D = swag.deviations.double().T  # (P, K)
    sigma = 0.5 * (torch.diag(swag.variance()) + D @ D.T / (K - 1))
    g = torch.Generator().manual_seed(1)
    N = 20000
    draws = torch.stack([swag.sample_vector(g) for _ in range(N)])
    emp_mean, emp_cov = draws.mean(0), torch.cov(draws.T)
    # Gaussian standard errors: mean sqrt(S_ii/N); covariance entry sqrt((S_ii S_jj + S_ij^2)/N). Allow 5 SE.
    d = torch.diag(sigma)
    assert torch.all((emp_mean - swag.mean).abs() <= 5 * (d / N).sqrt())
    se_cov = ((d[:, None] * d[None, :] + sigma**2) / N).sqrt()
    assert torch.all((emp_cov - sigma).abs() <= 5 * se_cov)
    # scale multiplies the covariance; diag_only keeps 0.5 * scale * Sigma_diag.
    draws4 = torch.stack([swag.sample_vector(g, scale=4.0, diag_only=True) for _ in range(N)])
    target = 0.5 * 4.0 * swag.variance()
    assert torch.all((draws4.var(0) - target).abs() <= 5 * (2 * target**2 / N).sqrt())
    # the low-rank term must matter here, otherwise the test above would not distinguish the two
    assert (sigma - torch.diag(d)).abs().max() > 20 * se_cov.max()


def test_sample_writes_the_drawn_vector_and_load_mean():
    model, swag, _ = fed_swag()
    v = swag.sample_vector(torch.Generator().manual_seed(3))
    swag.sample(model, torch.Generator().manual_seed(3))
    assert torch.allclose(flat(model), v.float().double(), atol=0)
    swag.load_mean(model)
    assert torch.allclose(flat(model), swag.mean.float().double(), atol=0)


def test_swag_samples_restore_weights_and_state_dict_round_trip():
    model, swag, traj = fed_swag()
    before = flat(model).clone()
    x = torch.randn(6, 3)
    s = swag_samples(model, swag, x, 10, 0)
    assert s.shape == (10, 6) and torch.all(s.std(0) > 0)
    assert torch.equal(before, flat(model))
    s2 = swag_samples(model, SWAG.from_state_dict(swag.state_dict()), x, 10, 0)
    assert torch.equal(s, s2)
    # a posterior collected before the buffer filled up round-trips too
    small = SWAG(max_rank=8)
    for t in range(3):
        set_flat(model, traj[t])
        small.collect(model)
    assert torch.equal(SWAG.from_state_dict(small.state_dict()).deviations, small.deviations)


def test_errors():
    model = nn.Linear(3, 1)
    swag = SWAG(max_rank=4)
    with pytest.raises(RuntimeError, match="at least 1"):
        swag.load_mean(model)
    swag.collect(model)
    swag.sample(model, 0, diag_only=True)  # one snapshot is enough for the diagonal part
    with pytest.raises(RuntimeError, match="2 deviation"):
        swag.sample(model, 0)
    with pytest.raises(ValueError, match="lacks"):
        swag.load_mean(nn.Sequential(nn.Linear(3, 1)))
    with pytest.raises(ValueError, match="max_rank"):
        SWAG(max_rank=0)


def test_fit_swag_collects_each_epoch_from_pretrained_weights():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 3, generator=g)
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(120, generator=g)
    model = build_ft_transformer(3, n_blocks=1, d_block=8, attention_n_heads=2, seed=0)
    fit_regressor(model, x, y, seed=0, lr=3e-3, batch_size=32, max_epochs=5, progress=False)
    pretrained = flat(model).clone()
    swag = fit_swag(model, x, y, lr=1e-2, epochs=6, seed=0, max_rank=4, batch_size=32, progress=False)
    assert swag.n_collected == 6 and swag.rank == 4
    assert swag.num_params == pretrained.numel()
    assert not torch.equal(flat(model), pretrained)
    # the SWA mean lies near the pretrained weights (a few constant-lr SGD epochs)
    assert (swag.mean - pretrained).abs().max() < 0.5
    # collect_every and a restricted parameter list (as for LoRA adapters): other weights stay fixed
    names = ["ft.backbone.output.linear.weight", "ft.backbone.output.linear.bias"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    swag2 = fit_swag(model, x, y, lr=1e-2, epochs=4, collect_every=2, param_names=names, seed=0,
                     batch_size=32, progress=False)
    assert swag2.n_collected == 2 and swag2.num_params == 8 + 1 and swag2.param_names == names
    after = dict(model.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in before if n not in names)
    assert not torch.equal(before[names[0]], after[names[0]])
    with pytest.raises(ValueError, match="fewer than 2"):
        fit_swag(model, x, y, lr=1e-2, epochs=3, collect_every=2, seed=0, progress=False)


def test_swag_lora_recipe_continues_adamw_anneals_then_collects_several_snapshots_per_epoch(monkeypatch):
    """SWAG-LoRA (Onal et al. 2024): the adapter's AdamW continued, its rate annealed linearly by SWALR from the
    training rate to the SWAG rate over anneal_epochs, then collect_per_epoch snapshots evenly spaced in each
    collection epoch; only the named (adapter) parameters move."""
    steps = []

    class SpyAdamW(torch.optim.AdamW):
        def step(self, closure=None):
            steps.append(self.param_groups[0]["lr"])
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "AdamW", SpyAdamW)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g)
    y = x[:, 0] + 0.1 * torch.randn(40, generator=g)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    names = ["2.weight", "2.bias"]  # the "adapter"
    frozen = model[0].weight.detach().clone()
    swag = fit_swag(model, x, y, lr=1e-3, start_lr=1e-2, optimizer="adamw", anneal_epochs=2, epochs=2,
                    collect_per_epoch=5, batch_size=8, max_rank=20, param_names=names, seed=0, progress=False)
    assert swag.n_collected == 10 and swag.rank == 10 and swag.num_params == 8 + 1  # 10 snapshots, K = 10 columns
    assert len(steps) == 4 * 5  # 2 annealing + 2 collection epochs of 5 steps, all by AdamW
    assert swag.trajectory["optimizer"] == "adamw"
    assert swag.trajectory["lr_per_epoch"] == pytest.approx([1e-2, 5.5e-3, 1e-3, 1e-3])
    assert swag.trajectory["snapshot_steps"] == [(e, i) for e in (3, 4) for i in range(1, 6)]
    assert torch.equal(model[0].weight, frozen)
    two = fit_swag(model, x, y, lr=1e-3, optimizer="adamw", epochs=1, collect_per_epoch=2, batch_size=8,
                   param_names=names, seed=0, progress=False)  # fmt: skip
    assert two.trajectory["snapshot_steps"] == [(1, 3), (1, 5)]  # evenly spaced, the last at the epoch's end
    with pytest.raises(ValueError, match="optimizer"):
        fit_swag(model, x, y, lr=1e-3, optimizer="adam", epochs=2, seed=0, progress=False)


def test_multiswag_splits_budget_and_pools_components():
    members = []
    for w in (1.0, -1.0, 3.0):
        m = nn.Sequential(nn.Linear(2, 1, bias=False), nn.Flatten(0))
        with torch.no_grad():
            m[0].weight.fill_(w)
        s = SWAG(max_rank=3)
        for _ in range(3):  # identical snapshots: zero covariance, every draw is the component mean
            s.collect(m)
        members.append((m, s))
    x = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    out = multiswag_samples(members, x, 7, 0)
    assert out.shape == (7, 2)
    expected = torch.tensor([[2.0, 1.0]] * 3 + [[-2.0, -1.0]] * 2 + [[6.0, 3.0]] * 2)
    assert torch.allclose(out, expected, atol=1e-6)
    out2 = multiswag_samples(members, x, 2, 0)  # S < L: first S components, one draw each
    assert torch.allclose(out2, torch.tensor([[2.0, 1.0], [-2.0, -1.0]]), atol=1e-6)
