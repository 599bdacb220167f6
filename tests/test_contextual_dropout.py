"""Contextual dropout (Gaussian variant): mask law, KL, detached dropout net, installation, training, sampling."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from stochattn.baselines.contextual_dropout import (
    ContextualDropout,
    add_contextual_dropout,
    contextual_dropout_generator,
    contextual_dropout_modules,
    contextual_dropout_samples,
    contextual_dropout_step,
    elbo_kl_weight,
    fit_contextual_dropout,
    gaussian_mask_kl,
    kl_divergence,
    mean_masks,
)
from stochattn.training import predict

pytestmark = pytest.mark.usefixtures("one_thread")


class TokenNet(nn.Module):
    """Transformer-ish toy: x (B, F) -> tokens (B, F, d) -> residual MLP block -> mean pool -> head (B,) / (B, H)."""

    def __init__(self, n_features=3, d=16, n_out=None):
        super().__init__()
        self.embed = nn.Parameter(torch.randn(n_features, d))
        self.block = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, 1 if n_out is None else n_out)
        self.n_out = n_out

    def forward(self, x):
        tokens = x[..., None] * self.embed
        tokens = tokens + self.block(tokens)
        out = self.head(tokens.mean(dim=1))
        return out[:, 0] if self.n_out is None else out


class LoraLike(nn.Module):
    """The layout of a peft LoRA Linear: ``base_layer`` plus adapters in ModuleDicts."""

    def __init__(self, d_in=8, d_out=4, r=2):
        super().__init__()
        self.base_layer = nn.Linear(d_in, d_out)
        self.lora_A = nn.ModuleDict({"default": nn.Linear(d_in, r, bias=False)})
        self.lora_B = nn.ModuleDict({"default": nn.Linear(r, d_out, bias=False)})

    def forward(self, x):
        return self.base_layer(x) + self.lora_B["default"](self.lora_A["default"](x))


def mlp(n_in=3, hidden=32, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def set_rates(module: ContextualDropout, log_alpha_target: torch.Tensor) -> None:
    """Input-independent rates: zero last weight, bias giving log alpha = ``log_alpha_target`` (d,)."""
    m = module.log_alpha_max
    with torch.no_grad():
        module.net[2].weight.zero_()
        module.net[2].bias.copy_(m - torch.log(torch.expm1(m - log_alpha_target)))


def regression_data(n=320, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = torch.sin(2 * x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.05 * torch.randn(n, generator=g)
    return x, y


# ------------------------------------------------------------------------------------------------------------------
# the module
# ------------------------------------------------------------------------------------------------------------------
def test_shapes_init_and_validation():
    torch.manual_seed(0)
    cd = ContextualDropout(16, gamma=4)
    assert cd.net[0].out_features == 4 and cd.net[2].out_features == 16
    for shape in [(16,), (7, 16), (3, 5, 16)]:
        x = torch.randn(shape)
        assert cd(x).shape == shape
        assert cd.log_alpha(x).shape == shape
        assert cd.last_kl.shape == ()
        rate = cd.rate(x)
        assert torch.allclose(rate, torch.full_like(rate, 0.1), atol=0.03)  # init rate ~ 0.1, small input effect
    assert ContextualDropout(5, gamma=8).net[0].out_features == 1
    with pytest.raises(ValueError, match=r"\(\.\.\., 16\)"):
        cd(torch.randn(4, 15))
    for kwargs in [{"gamma": 0}, {"init_rate": 0.0}, {"prior_rate": 1.0}, {"init_rate": 0.95, "max_rate": 0.9}]:
        with pytest.raises(ValueError):
            ContextualDropout(16, **kwargs)
    with pytest.raises(ValueError, match="positive integer"):
        ContextualDropout(0)


def test_mask_mean_one_and_variance_alpha():
    torch.manual_seed(0)
    d, n = 6, 40_000
    cd = ContextualDropout(d, gamma=2)
    set_rates(cd, torch.linspace(-3.0, 1.0, d))  # alpha from 0.05 to 2.7: variance alpha, not rate p, is tested
    cd.generator = torch.Generator().manual_seed(1)
    x = torch.linspace(0.5, 2.0, d).expand(n, d).contiguous()
    z = cd(x) / x
    alpha = cd.log_alpha(x[:1])[0].exp()
    assert torch.allclose(alpha, torch.linspace(-3.0, 1.0, d).exp(), rtol=1e-4)
    mean, var = z.mean(0), z.var(0)
    assert torch.all((mean - 1).abs() < 5 * torch.sqrt(alpha / n)), (mean, alpha)
    assert torch.all((var - alpha).abs() < 5 * alpha * math.sqrt(2 / (n - 1))), (var, alpha)


def test_kl_closed_form_monte_carlo_and_zero_at_prior():
    log_alpha0 = math.log(0.1 / 0.9)
    log_alpha = torch.tensor([-4.0, -2.0, log_alpha0, 0.0, 1.5])
    kl = gaussian_mask_kl(log_alpha, log_alpha0)
    # hand computation: KL(N(x, alpha x^2) || N(x, alpha0 x^2)) for any activation x, here x = -1.7
    x = torch.tensor(-1.7, dtype=torch.float64)
    q = torch.distributions.Normal(x, (0.5 * log_alpha.double()).exp() * x.abs())
    p = torch.distributions.Normal(x, math.exp(0.5 * log_alpha0) * x.abs())
    assert torch.allclose(kl.double(), torch.distributions.kl_divergence(q, p), rtol=1e-5, atol=1e-7)
    # Monte Carlo E_q[log q - log p]
    g = torch.Generator().manual_seed(0)
    v = q.mean + q.stddev * torch.randn(200_000, 5, generator=g, dtype=torch.float64)
    terms = q.log_prob(v) - p.log_prob(v)
    se = terms.std(0) / math.sqrt(len(v))
    assert torch.all((terms.mean(0) - kl.double()).abs() < 5 * se + 1e-6)
    assert kl[2] == 0 and torch.all(kl[[0, 1, 3, 4]] > 0)

    # module: per-unit KL summed over units and tokens, averaged over rows; 0 when every alpha == alpha0
    torch.manual_seed(0)
    cd = ContextualDropout(8, gamma=2, prior_rate=0.2)
    xb = torch.randn(4, 3, 8)
    cd(xb)
    expected = gaussian_mask_kl(cd.log_alpha(xb), cd.log_alpha0).sum() / 4
    assert torch.allclose(cd.last_kl, expected)
    set_rates(cd, torch.full((8,), cd.log_alpha0))
    cd(xb)
    assert cd.last_kl.abs() < 1e-5


def test_rates_depend_on_input_and_gradients_skip_the_site_input():
    torch.manual_seed(0)
    cd = ContextualDropout(12, gamma=3)
    x = torch.randn(5, 12) * 2
    la = cd.log_alpha(x)
    assert (la[0] - la[1]).abs().max() > 1e-3  # two inputs, two different rate vectors
    assert (cd.log_alpha(x + 1.0) - la).abs().max() > 1e-3

    x.requires_grad_(True)
    cd.generator = torch.Generator().manual_seed(3)
    y = cd(x)
    (y.sum() + 10 * cd.last_kl).backward()
    eps = torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    z = 1 + (0.5 * cd.log_alpha(x)).exp() * eps
    # d(x * z)/dx = z exactly: nothing flows back to x through the (detached) dropout network or the KL
    assert torch.allclose(x.grad, z.detach(), atol=1e-6)
    for name, p in cd.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


# ------------------------------------------------------------------------------------------------------------------
# installation
# ------------------------------------------------------------------------------------------------------------------
def test_install_names_state_dict_and_errors():
    torch.manual_seed(0)
    model = TokenNet()
    reference = copy.deepcopy(model)
    before = torch.get_rng_state()
    sites = add_contextual_dropout(model, ["block.0", "block.2", "head"], gamma=4, seed=5)
    assert torch.equal(torch.get_rng_state(), before)  # seeded init leaves the global RNG alone
    assert list(sites) == ["block.0", "block.2", "head"]
    assert [m.d for m in sites.values()] == [16, 32, 16]
    assert contextual_dropout_modules(model) == list(sites.values())
    assert isinstance(model.block[0], nn.Linear)  # the site keeps its class and parameter names
    keys = set(model.state_dict())
    assert {"block.0.weight", "block.0.bias", "head.weight", "embed"} <= keys
    assert {"block.0.contextual_dropout.net.0.weight", "head.contextual_dropout.net.2.bias"} <= keys
    assert "block.2.contextual_dropout.net.0.weight" in dict(model.named_parameters())
    # same seed -> same dropout networks
    other = copy.deepcopy(reference)
    add_contextual_dropout(other, ["block.0", "block.2", "head"], gamma=4, seed=5)
    for (k, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items(), strict=True):
        assert torch.equal(a, b), k

    with pytest.raises(ValueError, match="not a module"):
        add_contextual_dropout(copy.deepcopy(reference), ["block.7"])
    with pytest.raises(TypeError, match=r"not an nn\.Linear"):
        add_contextual_dropout(copy.deepcopy(reference), ["block.1"])
    with pytest.raises(ValueError, match="duplicate"):
        add_contextual_dropout(copy.deepcopy(reference), ["head", "head"])
    with pytest.raises(ValueError, match="at least one"):
        add_contextual_dropout(copy.deepcopy(reference), [])
    with pytest.raises(ValueError, match="already has"):
        add_contextual_dropout(model, ["head"])


def test_masks_applied_and_zero_rates_reproduce_the_original():
    torch.manual_seed(0)
    model = TokenNet()
    reference = copy.deepcopy(model)
    add_contextual_dropout(model, ["block.0", "block.2", "head"], seed=0)
    x = torch.randn(8, 3)
    with torch.no_grad():
        ref = reference(x)
        model.eval()
        assert not torch.allclose(model(x), ref, atol=1e-3)  # masks are on in eval mode by default
        with mean_masks(model):  # mean mask z = 1: exactly the original network, deterministically
            assert torch.equal(model(x), ref) and torch.equal(model(x), ref)
        assert all(m.sample_in_eval for m in contextual_dropout_modules(model))  # restored
        assert not torch.equal(model(x), model(x))
        for m in contextual_dropout_modules(model):
            set_rates(m, torch.full((m.d,), -40.0))  # rates ~ 4e-18
        for mode in (True, False):
            model.train(mode)
            assert torch.allclose(model(x), ref, atol=1e-5)
    model(x)  # with autograd: last_kl is a non-leaf tensor
    assert torch.isfinite(kl_divergence(model)) and kl_divergence(model).requires_grad
    clone = copy.deepcopy(model)  # works all the same (last_kl is dropped from the copy)
    assert all(m.last_kl is None for m in contextual_dropout_modules(clone))
    assert kl_divergence(model).requires_grad  # the original keeps its own


def test_lora_like_site_and_bypassed_site():
    torch.manual_seed(0)
    model = nn.Sequential(LoraLike(), nn.ReLU(), nn.Linear(4, 1))
    add_contextual_dropout(model, ["0.base_layer", "0.lora_A.default"])
    names = dict(model.named_parameters())
    assert {"0.base_layer.weight", "0.lora_A.default.weight", "0.base_layer.contextual_dropout.net.0.weight"} <= set(
        names
    )
    assert isinstance(model[0].base_layer, nn.Linear)
    model(torch.randn(5, 8))
    assert kl_divergence(model) > 0
    with pytest.raises(TypeError, match=r"LoraLike, not an nn\.Linear"):
        add_contextual_dropout(model, ["0"])

    # nn.MultiheadAttention uses out_proj through its weights only: the hook never runs, which is reported
    attn = nn.ModuleDict({"attn": nn.MultiheadAttention(8, 2, batch_first=True)})
    add_contextual_dropout(attn, ["attn.out_proj"])
    x = torch.randn(2, 3, 8)
    attn["attn"](x, x, x)
    with pytest.raises(ValueError, match="did not run"):
        kl_divergence(attn)
    with pytest.raises(ValueError, match="no ContextualDropout"):
        kl_divergence(mlp())


def test_real_peft_lora_layer():
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    peft.inject_adapter_in_model(peft.LoraConfig(r=2, lora_alpha=2, target_modules=["0"]), model)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    with torch.no_grad():
        model[0].lora_B["default"].weight.normal_()  # make the adapter path matter
    reference = copy.deepcopy(model)
    sites = add_contextual_dropout(model, ["0", "0.lora_A.default"], seed=0)
    assert [m.d for m in sites.values()] == [8, 8]
    names = dict(model.named_parameters())
    assert {"0.base_layer.weight", "0.lora_B.default.weight", "0.contextual_dropout.net.0.weight"} <= set(names)
    assert names["0.contextual_dropout.net.2.bias"].requires_grad and not names["0.base_layer.weight"].requires_grad
    x = torch.randn(6, 8)
    with torch.no_grad():
        assert not torch.allclose(model(x), reference(x), atol=1e-3)
        assert kl_divergence(model) > 0
        for m in sites.values():
            set_rates(m, torch.full((8,), -40.0))
        assert torch.allclose(model(x), reference(x), atol=1e-5)


# ------------------------------------------------------------------------------------------------------------------
# training
# ------------------------------------------------------------------------------------------------------------------
def test_step_objective():
    model = mlp()
    add_contextual_dropout(model, ["2", "4"], seed=0)
    x, y = regression_data(32)
    step = contextual_dropout_step(n_train=100, kl_weight=3.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with contextual_dropout_generator(model, torch.Generator().manual_seed(7)):
        got = step(model, opt, x, y, F.mse_loss)
    assert all(m.last_kl is None for m in contextual_dropout_modules(model))  # graph released
    with contextual_dropout_generator(model, torch.Generator().manual_seed(7)), torch.no_grad():
        pred = model(x)[:, 0]
        expected = F.mse_loss(pred, y) + 3.0 * kl_divergence(model) / 100
    assert torch.allclose(got, expected)
    with pytest.raises(ValueError, match="n_train"):
        contextual_dropout_step(0)
    with pytest.raises(ValueError, match="kl_weight"):
        contextual_dropout_step(10, kl_weight=-1.0)


def test_fit_decreases_loss_with_deterministic_validation():
    x, y = regression_data()
    xtr, ytr, xva, yva = x[:256], y[:256], x[256:], y[256:]
    kwargs = {"seed": 0, "lr": 1e-2, "max_epochs": 25, "batch_size": 64, "patience": None, "progress": False}

    model = mlp()
    add_contextual_dropout(model, ["2", "4"], seed=0)
    res = fit_contextual_dropout(model, xtr, ytr, xva, yva, **kwargs)
    loss = res.history["train_loss"]
    assert loss[-1] < 0.5 * loss[0], loss
    assert all(m.sample_in_eval for m in contextual_dropout_modules(model))  # restored after the fit
    # validation used the mean mask: the restored best state reproduces its RMSE deterministically
    with mean_masks(model):
        rmse = float(torch.sqrt(torch.mean((predict(model, xva).double() - yva.double()) ** 2)))
    assert rmse == pytest.approx(res.best_val_rmse, rel=1e-6)

    again = mlp()
    add_contextual_dropout(again, ["2", "4"], seed=0)
    fit_contextual_dropout(again, xtr, ytr, xva, yva, **kwargs)
    for (k, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), k  # same seed, same run

    # frozen backbone: only the dropout networks move
    frozen = mlp()
    for p in frozen.parameters():
        p.requires_grad_(False)
    add_contextual_dropout(frozen, ["2", "4"], seed=0)
    start = copy.deepcopy(frozen.state_dict())
    fit_contextual_dropout(frozen, xtr, ytr, **{**kwargs, "max_epochs": 2})
    end = frozen.state_dict()
    for k in start:
        assert torch.equal(start[k], end[k]) == ("contextual_dropout" not in k), k

    with pytest.raises(ValueError, match="step_fn"):
        fit_contextual_dropout(model, xtr, ytr, step_fn=None, **kwargs)
    with pytest.raises(ValueError, match="no ContextualDropout"):
        fit_contextual_dropout(mlp(), xtr, ytr, **kwargs)


# ------------------------------------------------------------------------------------------------------------------
# predictive samples
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_out", [None, 2])
def test_samples_shape_spread_and_reproducibility(n_out):
    torch.manual_seed(0)
    model = TokenNet(n_out=n_out)
    add_contextual_dropout(model, ["block.0", "head"], seed=0)
    x = torch.randn(10, 3)
    state = torch.get_rng_state()
    s = contextual_dropout_samples(model, x, 16, generator=3, batch_size=64)
    assert torch.equal(torch.get_rng_state(), state)
    assert s.shape == ((16, 10) if n_out is None else (16, 10, 2))
    assert torch.all(s.std(0) > 1e-4)  # passes differ for every row and output
    assert torch.equal(s, contextual_dropout_samples(model, x, 16, generator=3, batch_size=64))
    g = torch.Generator().manual_seed(3)
    assert torch.equal(s, contextual_dropout_samples(model, x, 16, generator=g, batch_size=64))
    assert not torch.equal(s, contextual_dropout_samples(model, x, 16, generator=4, batch_size=64))
    assert model.training  # flags restored

    # masks are drawn even where eval-mode passes would use the mean mask; the flag is restored
    model.eval()
    with mean_masks(model):
        s2 = contextual_dropout_samples(model, x, 4, generator=3)
        assert torch.all(s2.std(0) > 1e-4)
        assert not any(m.sample_in_eval for m in contextual_dropout_modules(model))
    with pytest.raises(ValueError, match="num_samples"):
        contextual_dropout_samples(model, x, 0)
    with pytest.raises(ValueError, match="no ContextualDropout"):
        contextual_dropout_samples(mlp(), x, 2)


def test_elbo_kl_weight_makes_the_step_objective_the_negative_elbo(monkeypatch):
    """With kl_weight = 2 sigma^2 n_train / H the step's objective MSE + kl_weight KL / n_train, times H / (2 sigma^2),
    is the per-data-point negative ELBO: the Gaussian NLL sum_h r^2 / (2 sigma^2) plus the masks' KL."""
    import stochattn.baselines.contextual_dropout as cd

    torch.manual_seed(0)
    H, n_train, sigma2 = 3, 50, 0.3
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, H))
    add_contextual_dropout(model, ["2"], seed=0)
    monkeypatch.setattr(cd, "kl_divergence", lambda m: torch.tensor(7.5))  # a known KL
    x, y = torch.randn(10, 4), torch.randn(10, H)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay: the prediction below is the step's
    weight = elbo_kl_weight(sigma2, n_train, H)
    torch.manual_seed(1)
    total = float(contextual_dropout_step(n_train, weight)(model, opt, x, y, F.mse_loss))
    torch.manual_seed(1)  # the same mask draw
    model.train()
    with torch.no_grad():
        nll = float(((model(x) - y) ** 2).sum(1).mean()) / (2 * sigma2)
    assert total * H / (2 * sigma2) == pytest.approx(nll + 7.5, rel=1e-5)
    with pytest.raises(ValueError, match="noise_variance"):
        elbo_kl_weight(0.0, n_train, H)
