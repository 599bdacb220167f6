"""Tests for stochattn.baselines.ivon (IVON training through the shared loop, posterior sampling)."""

import ivon as ivon_opt
import pytest
import torch
from torch import nn

from stochattn.backbones.ft_transformer import build_ft_transformer, predict
from stochattn.baselines.ivon import fit_ivon, ivon_samples, ivon_step, make_ivon
from stochattn.training import fit_regressor


pytestmark = pytest.mark.usefixtures("one_thread")


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 3, generator=g)
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(300, generator=g)
    return x[:200], y[:200], x[200:], y[200:]


@pytest.fixture(scope="module")
def trained():
    xt, yt, xv, yv = data()
    model = build_ft_transformer(3, n_blocks=1, d_block=16, attention_n_heads=2, seed=0)
    res = fit_ivon(model, xt, yt, xv, yv, lr=0.1, hess_init=10.0, seed=0, batch_size=32, max_epochs=30,
                   patience=10, progress=False)
    return model, res, xv, yv


def test_ivon_trains(trained):
    model, res, xv, yv = trained
    assert isinstance(res.optimizer, ivon_opt.IVON)
    assert res.optimizer.param_groups[0]["ess"] == 200  # ess defaults to the number of training rows
    # constant predictor: RMSE ~= std(y) = 0.75; typical result ~0.35
    assert res.best_val_rmse < 0.7 * float(yv.std())
    rmse = float((predict(model, xv) - yv).double().pow(2).mean().sqrt())
    assert rmse == pytest.approx(res.best_val_rmse, abs=1e-6)


def test_samples_differ_keep_mean_weights_and_centre_on_mean_prediction(trained):
    model, res, xv, _ = trained
    before = [p.detach().clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    S = 200
    s = ivon_samples(model, res.optimizer, xv, S, 0)
    assert torch.equal(rng, torch.get_rng_state())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert s.shape == (S, len(xv)) and torch.all(s.std(0) > 0)
    assert torch.equal(s[:5], ivon_samples(model, res.optimizer, xv, 5, 0)[:5])
    assert not torch.equal(s[:5], ivon_samples(model, res.optimizer, xv, 5, 1))
    mean_pred = predict(model, xv)
    gap = float((s.mean(0) - mean_pred).pow(2).mean().sqrt())
    spread = float(s.std(0).mean())
    # Averaging S draws lands near the mean-weights prediction: MC error spread/sqrt(S) (0.07 spread) plus a
    # second-order nonlinearity bias; measured gap/spread 0.23 (spread 0.10). A single draw, or draws around
    # anything but the mean weights, sits ~1 spread away (measured 1.2 for one draw).
    assert gap < 0.5 * spread


def test_early_stopping_restores_the_posterior_variance_too():
    xt, yt, xv, yv = data()
    model = build_ft_transformer(3, n_blocks=1, d_block=8, attention_n_heads=2, seed=0)
    holder = {}

    def make(m):
        holder["opt"] = make_ivon(m, lr=0.3, ess=len(xt), hess_init=10.0)
        return holder["opt"]

    hess = []
    res = fit_regressor(model, xt, yt, xv, yv, seed=0, batch_size=32, max_epochs=12, patience=3,
                        optimizer=make, step_fn=ivon_step(2),
                        on_epoch_end=lambda e, m: hess.append(holder["opt"].param_groups[0]["hess"].clone()),
                        progress=False)
    assert res.best_epoch < res.epochs_run
    assert torch.equal(res.optimizer.param_groups[0]["hess"], hess[res.best_epoch - 1])
    assert not torch.equal(hess[res.best_epoch - 1], hess[-1])


def test_unused_parameter_and_wrong_optimizer():
    class WithUnused(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 1)
            self.unused = nn.Parameter(torch.zeros(2))

        def forward(self, x):
            return self.lin(x)[:, 0]

    xt, yt, xv, yv = data()
    res = fit_ivon(WithUnused(), xt, yt, xv, yv, lr=0.1, seed=0, max_epochs=2, progress=False)
    assert res.epochs_run == 2
    model = WithUnused()
    with pytest.raises(TypeError, match="ivon.IVON"):
        fit_regressor(model, xt, yt, seed=0, optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
                      step_fn=ivon_step(), max_epochs=1, progress=False)
    with pytest.raises(TypeError, match="optimizer"):
        ivon_samples(model, torch.optim.SGD(model.parameters(), lr=0.1), xv, 3, 0)


def test_ivon_lora_settings_draw_weights_with_the_claimed_posterior_sd():
    """IVON-LoRA's settings (lr 0.03 without lr rescaling, clip 1e-3, no weight decay, ess x h0 = 1e3) on the
    'adapter' of a frozen network: the weight draws of sampled_params are centred on the mean weights with standard
    deviation 1/sqrt(ess (h + delta)) per weight, the posterior IVON claims; tolerances from the standard error of
    an SD estimated from n draws (1/sqrt(2 (n - 1)) relative)."""
    import math

    xt, yt, xv, yv = data()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
    model[0].requires_grad_(False)  # the frozen backbone; model[2] is the adapter
    res = fit_ivon(model, xt, yt, xv, yv, lr=0.03, ess=1e6, hess_init=1e-3, weight_decay=0.0, clip_radius=1e-3,
                   rescale_lr=False, seed=0, batch_size=32, max_epochs=5, patience=None, progress=False)  # fmt: skip
    opt = res.optimizer
    group = opt.param_groups[0]
    assert group["lr"] == 0.03 and opt.rescale_lr is False and group["clip_radius"] == 1e-3
    params = [p for p in model.parameters() if p.requires_grad]
    mean = torch.cat([p.detach().flatten() for p in params]).double()
    n = 2000
    draws = []
    for _ in range(n):
        with opt.sampled_params():
            draws.append(torch.cat([p.detach().flatten() for p in params]).double())
    draws = torch.stack(draws)
    claimed = 1.0 / torch.sqrt(group["ess"] * (group["hess"].double() + group["weight_decay"]))
    ratio = draws.std(0) / claimed
    se = 1.0 / math.sqrt(2 * (n - 1))
    assert abs(float(ratio.mean()) - 1) < 4 * se / math.sqrt(len(ratio)) and float((ratio - 1).abs().max()) < 5 * se
    z = (draws.mean(0) - mean) / (claimed / math.sqrt(n))
    assert float(z.abs().max()) < 5
    assert torch.equal(torch.cat([p.detach().flatten() for p in params]).double(), mean)  # restored after draws
    assert 0.02 < float(claimed.mean()) < 0.04  # ess x h0 = 1e3: SD ~ 0.03, IVON-LoRA's warmest setting
