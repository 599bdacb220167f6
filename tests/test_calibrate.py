"""Calibration of nu: EvalStats, the log-log posterior, the closed-form proposal, and the BO loop."""

import math

import numpy as np
import pytest
import torch
from rtdl_revisiting_models import FTTransformer
from scipy import optimize

from stochattn.calibrate import (
    EvalResult,
    IntegerDomain,
    LogLogPosterior,
    SASampler,
    bo_calibrate,
    eval_stats,
    loss_minimum_scale,
    nu_continuous,
    score_sweep,
    surrogate_objective,
    target_scale,
)


class Regressor(torch.nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        kw = FTTransformer.get_default_kwargs(n_blocks=1)
        kw.update(d_block=32, attention_dropout=0.0, ffn_dropout=0.0, residual_dropout=0.0)
        self.ft = FTTransformer(n_cont_features=5, cat_cardinalities=[], d_out=1, **kw)

    def forward(self, x):
        return self.ft(x, None).squeeze(-1)


def test_posterior_recovers_known_slope_and_intercept():
    rng = np.random.default_rng(0)
    a, ln_b, eps = -0.5, 0.3, 0.05
    nu = np.exp(rng.uniform(0, np.log(2000), size=40))
    s = np.exp(a * np.log(nu) + ln_b + eps * rng.standard_normal(40))
    post = LogLogPosterior.fit(nu, s)
    draws = post.sample(np.random.default_rng(1), 20_000)
    for key, truth in (("a", a), ("ln_b", ln_b)):
        m, sd = draws[key].mean(), draws[key].std()
        assert abs(m - truth) < 4 * sd, (key, m, sd)
        assert sd < 0.05  # the data pin the line down
    # eps^2: posterior InvGamma((n-2)/2, SSR/2); the 99.9 % credible interval must contain the truth
    lo, hi = np.quantile(draws["eps2"], [0.0005, 0.9995])
    assert lo < eps**2 < hi
    # posterior mean of (a, ln b) = least squares under the reference prior
    X = np.column_stack([np.log(nu), np.ones(40)])
    assert np.allclose(post.mean, np.linalg.lstsq(X, np.log(s), rcond=None)[0])


@pytest.mark.parametrize(
    "a, ln_b, eps2, s0", [(-0.5, 0.0, 0.01, 0.2), (-0.3, 1.2, 0.2, 0.5), (-1.1, -0.4, 0.0001, 0.01)]
)
def test_closed_form_nu_cont_matches_numerical_minimisation(a, ln_b, eps2, s0):
    res = optimize.minimize_scalar(
        lambda t: surrogate_objective(np.exp(t), a, ln_b, eps2, s0), bounds=(-20, 40), method="bounded",
        options={"xatol": 1e-10},
    )
    assert float(nu_continuous(a, ln_b, eps2, s0)) == pytest.approx(math.exp(res.x), rel=1e-4)
    # the closed-form objective itself equals the expectation over zeta ~ LogNormal(0, eps2) (Gauss-Hermite)
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    zeta = np.exp(math.sqrt(eps2) * nodes)
    nu = 7.0
    mc = np.sum(weights * (math.exp(ln_b) * nu**a * zeta - s0) ** 2) / np.sqrt(2 * np.pi)
    assert surrogate_objective(nu, a, ln_b, eps2, s0) == pytest.approx(mc, rel=1e-10)


def test_integer_domain_projection_and_initial_design():
    d = IntegerDomain(1, 1024)
    assert d.project(3.4) == 3 and d.project(0.2) == 1 and d.project(5000) == 1024
    assert d.initial_design(3) == [1, 32, 1024]
    listed = IntegerDomain(values=[1, 2, 4, 8, 16])
    assert listed.project(5.9) == 4 and listed.project(6.1) == 8
    with pytest.raises(ValueError, match="low <= high"):
        IntegerDomain(0, 10)


def _synthetic_evaluate(nu_true=16, s_true=1.0, noise=0.01, seed=0):
    """A scale law s(nu) = s_true (nu/nu_true)^-1/2 with multiplicative noise, and the L_SA of independent
    half-normal R and Z (E[(R-Z)^2] = Var R + Var Z + (E R - E Z)^2)."""
    rng = np.random.default_rng(seed)

    def evaluate(nu):
        s = s_true * (nu / nu_true) ** -0.5 * math.exp(noise * rng.standard_normal())
        var = lambda m: m**2 * (math.pi / 2 - 1)  # noqa: E731  half-normal with mean m
        return EvalResult(nu=nu, loss=var(s) + var(s_true) + (s - s_true) ** 2, scale=s)

    return evaluate


def test_bo_is_deterministic_for_a_seed_and_records_both_operating_points():
    r1 = bo_calibrate(_synthetic_evaluate(seed=3), s0=1.0, budget=10, seed=7)
    r2 = bo_calibrate(_synthetic_evaluate(seed=3), s0=1.0, budget=10, seed=7)
    strip = lambda d: {k: v for k, v in d.items() if k != "seconds"}  # noqa: E731  wall-clock differs
    assert strip(r1.to_dict()) == strip(r2.to_dict())
    assert len(r1.history()) == 10 and [h["source"] for h in r1.history()][:3] == ["initial"] * 3
    assert abs(math.log(r1.nu_surrogate / 16)) < 0.15
    # nu is Algorithm 2's return value: the arg-min of the observed loss (repeats of one nu averaged), one of the
    # evaluated candidates; the surrogate's scale-matching point is recorded beside it
    history = r1.history()
    by_nu = {}
    for h in history:
        by_nu.setdefault(h["nu"], []).append(h["loss"])
    assert r1.nu == r1.nu_loss_argmin == min(by_nu, key=lambda v: np.mean(by_nu[v]))
    d = r1.to_dict()
    assert {"nu", "nu_loss_argmin", "nu_surrogate", "nu_surrogate_continuous"} <= set(d)
    assert "operating_point" not in d
    assert len(r1.posterior_draws["nu_cont"]) == 4000


@pytest.mark.parametrize("nu_true, low, expected", [(0.25, 1, True), (2.0, 1, False), (16.0, 1, False),
                                                    (2.0, 8, True)])  # fmt: skip
def test_boundary_flag_exactly_when_nu_is_the_low_end_and_the_surrogate_wants_more_dispersion(nu_true, low, expected):
    """at_boundary: Algorithm 2's nu is the domain's low end (nu = 1: SA's largest dispersion) AND the surrogate's
    continuous scale-matching optimum lies below it. nu_true = 2 may end at nu = 1 by the loss, but its surrogate
    optimum (~2) is inside the domain: no flag. (With low = 4 the loss's own arg-min, nu ~ 5 where E[R] = (2/pi) s0,
    lies inside the domain: no flag either; low = 8 is past both.)"""
    r = bo_calibrate(_synthetic_evaluate(nu_true=nu_true, seed=1), s0=1.0, domain=IntegerDomain(low, 1024), budget=10,
                     seed=2)  # fmt: skip
    below = r.nu_surrogate_continuous < low
    assert below == (nu_true < low)
    assert r.at_boundary is (below and r.nu == low) and r.at_boundary is expected
    assert r.at_boundary_surrogate is (below and r.nu_surrogate == low)
    assert r.to_dict()["at_boundary"] is expected


def test_scale_match_design_closes_in_on_the_scale_matching_nu_and_log_spaced_spans_the_domain():
    """Default design: the pilot at the low end, then nu = nu_p (s(nu_p) / s0)^2 (SA's 1/nu variance law), then the
    log-log secant: on a law s ~ nu^-1/2 the second point is nu_true itself and the third its nearest free
    neighbour. On a law that bends (exponent -1/4 from nu = 1) the secant still finds the root. The labelled
    variant spans the domain. An SA at its most dispersed still too narrow gets the domain's lowest values."""
    from stochattn.calibrate import scale_match_design

    ev = _synthetic_evaluate(nu_true=16, noise=0.0)
    r = bo_calibrate(ev, s0=1.0, domain=IntegerDomain(1, 4096), budget=6, seed=0)
    assert r.design == "scale_match" and [h["nu"] for h in r.history()[:3]] == [1, 16, 17]
    assert [h["source"] for h in r.history()] == ["initial"] * 3 + ["thompson"] * 3
    assert all(8 <= h["nu"] <= 32 for h in r.history()[3:])  # the proposals refine around nu_true = 16
    spanning = bo_calibrate(ev, s0=1.0, domain=IntegerDomain(1, 4096), budget=6, seed=0, design="log_spaced")
    assert [h["nu"] for h in spanning.history()[:3]] == [1, 64, 4096] and spanning.to_dict()["design"] == "log_spaced"
    # a bending law s = 4 (nu / 1)^-1/4 near 1, steeper later: s = 1 at nu = 100 with a secant of (1, 4), (256, 1)
    law = {1: 4.0, 256: 1.0 / 16 ** 0.5 * 2.0}  # s(256) = 0.5
    secant = scale_match_design([EvalResult(nu=n, loss=1.0, scale=v) for n, v in law.items()], 1.0,
                                IntegerDomain(1, 4096))  # fmt: skip
    assert secant == round(math.exp(math.log(256) * math.log(4) / math.log(8)))  # ln s linear in ln nu: s = 1 there
    too_narrow = [EvalResult(nu=1, loss=1.0, scale=0.25)]
    assert scale_match_design(too_narrow, 1.0, IntegerDomain(1, 4096)) == 2  # nu0 = 1/16 -> 1 (taken) -> 2
    r = bo_calibrate(_synthetic_evaluate(nu_true=0.25, noise=0.0), s0=1.0, budget=4, seed=0)
    assert [h["nu"] for h in r.history()[:3]] == [1, 2, 3]
    with pytest.raises(ValueError, match="design"):
        bo_calibrate(ev, s0=1.0, design="random")


def test_loss_argmin_averages_repeated_evaluations_of_one_nu():
    """A nu evaluated twice (losses 0.5 and 2.0, mean 1.25) loses to a nu evaluated once at 1.0, although its
    luckier single estimate (0.5) is the smallest triple of the history (Algorithm 2's literal arg-min)."""
    from stochattn.calibrate import BOStep, _loss_by_nu

    steps = [BOStep(k=i, source="initial", nu_continuous=None, draw={}, result=EvalResult(nu=nu, loss=loss, scale=1.0))
             for i, (nu, loss) in enumerate([(4, 0.5), (16, 1.0), (4, 2.0), (64, 3.0)])]
    losses = _loss_by_nu(steps)
    assert losses == {4: 1.25, 16: 1.0, 64: 3.0}
    assert min(losses, key=losses.get) == 16


def test_bo_bad_input():
    ev = _synthetic_evaluate()
    with pytest.raises(ValueError, match="s0 must be positive"):
        bo_calibrate(ev, s0=0.0)
    with pytest.raises(ValueError, match="budget"):
        bo_calibrate(ev, s0=1.0, budget=2, initial_design=3)
    with pytest.raises(TypeError, match="operating_point"):
        bo_calibrate(ev, s0=1.0, operating_point="surrogate")  # both points are always returned


def test_bo_recovers_nu_true_on_a_constructed_sa_problem():
    """Targets are themselves SA passes at nu_true, so the residual scale equals SA's deviation at nu_true."""
    nu_true, n = 16, 600
    model = Regressor().eval()
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        point = model(x)
    with SASampler(model, generator=torch.Generator().manual_seed(99)) as sampler:
        y = sampler(nu_true, x, 1)[0]
        z = (y - point).abs()
        s0 = target_scale(y, point)
        for seed in (0, 1, 2):
            gen = torch.Generator().manual_seed(seed)
            evaluate = lambda nu, gen=gen: eval_stats(  # noqa: E731 - gen bound now (B023)
                nu, sampler, x, y, point, batch_size=300, num_batches=2, num_passes=8, generator=gen
            )
            res = bo_calibrate(evaluate, s0, domain=IntegerDomain(1, 1024), budget=10, seed=seed)
            a = -0.5  # Prop. 2: s ~ nu^-1/2 near the deterministic limit
            # ln nu* error = (ln s0 error)/|a|; SE of ln s0 from n residuals, SE of ln s(nu) from 2*300*8 passes
            se_ln_s0 = float(z.std() / z.mean()) / math.sqrt(n)
            se_ln_nu = math.sqrt(se_ln_s0**2 + (se_ln_s0 / math.sqrt(8)) ** 2) / abs(a)
            tol = 4 * se_ln_nu + 0.5 / nu_true  # plus integer rounding
            assert abs(math.log(res.nu_surrogate_continuous / nu_true)) < tol, (seed, res.nu_surrogate_continuous, tol)
            slope = res.posterior["mean"][0]
            assert -0.6 < slope < -0.4


def test_eval_stats_rejects_nan_and_bad_shapes():
    x, y = torch.randn(10, 3), torch.randn(10)
    point = torch.zeros(10)
    ok = lambda nu, xb, m: torch.zeros(m, len(xb))  # noqa: E731
    r = eval_stats(4, ok, x, y, point, batch_size=5, num_batches=2, num_passes=3)
    assert r.scale == 0 and r.loss > 0
    with pytest.raises(ValueError, match="contain NaN"):
        eval_stats(4, lambda nu, xb, m: torch.full((m, len(xb)), float("nan")), x, y, point, batch_size=5,
                   num_batches=1, num_passes=2)  # fmt: skip
    with pytest.raises(ValueError, match="point .* contains NaN"):
        eval_stats(4, ok, x, y, torch.full((10,), float("nan")), batch_size=5, num_batches=1, num_passes=2)
    with pytest.raises(ValueError, match="sample_fn returned shape"):
        eval_stats(4, lambda nu, xb, m: torch.zeros(m, len(xb), 2), x, y, point, batch_size=5, num_batches=1,
                   num_passes=2)  # fmt: skip
    with pytest.raises(ValueError, match="same shape"):
        target_scale(y, torch.zeros(9))


def _batch_se(stat, r, z, chunks=20):
    """Standard error of ``stat(r, z)`` over the columns, from ``chunks`` disjoint column blocks."""
    values = [stat(rb, zb) for rb, zb in zip(np.array_split(r, chunks, axis=1), np.array_split(z, chunks))]
    return float(np.std(values, ddof=1) / math.sqrt(chunks))


def test_loss_minimum_scale_is_the_loss_arg_min_over_scalings_and_its_closed_forms():
    """The ratio is where mean (c R - Z)^2 is least over c (a fine grid), times mean R / mean Z; Gaussian deviations
    independent of the residuals give kappa = 2/pi and rho = 1; deviations proportional to half-normal residuals
    give rho = E Z^2 / (E Z)^2 = pi/2 (tolerances: 5 standard errors from 20 disjoint blocks)."""
    rng = np.random.default_rng(0)
    m, n = 16, 20000
    z = np.abs(rng.standard_normal(n)) * 0.3
    r = np.abs(rng.standard_normal((m, n))) * 0.7
    out = loss_minimum_scale(r, z)
    grid = np.linspace(0.01, 2.0, 4001)
    losses = [np.mean((c * r - z) ** 2) for c in grid]
    c_star = grid[int(np.argmin(losses))]
    assert abs(c_star * r.mean() / z.mean() - out["ratio"]) < (grid[1] - grid[0]) * r.mean() / z.mean()
    assert out["scale"] == pytest.approx(r.mean()) and out["s0"] == pytest.approx(z.mean())
    for q in (0.3, 0.62, 1.0):  # the loss at the scale q s0, in closed form
        c = q * z.mean() / r.mean()
        curve = out["s0"] ** 2 * (q**2 / out["kappa"] - 2 * out["rho"] * q) + out["z2"]
        assert curve == pytest.approx(np.mean((c * r - z) ** 2), rel=1e-9)
    kappa = lambda rb, zb: loss_minimum_scale(rb, zb)["kappa"]  # noqa: E731
    rho = lambda rb, zb: loss_minimum_scale(rb, zb)["rho"]  # noqa: E731
    assert abs(out["kappa"] - 2 / math.pi) < 5 * _batch_se(kappa, r, z)
    assert abs(out["rho"] - 1.0) < 5 * _batch_se(rho, r, z)
    tracking = z * np.abs(rng.standard_normal((m, n)))  # the spread follows the residual
    out = loss_minimum_scale(tracking, z)
    assert abs(out["rho"] - math.pi / 2) < 5 * _batch_se(rho, tracking, z)
    assert abs(out["ratio"] - 2 / math.pi) < 5 * _batch_se(lambda a, b: loss_minimum_scale(a, b)["ratio"], tracking, z)


def test_loss_minimum_scale_bad_input():
    with pytest.raises(ValueError, match=r"\(M, n\)"):
        loss_minimum_scale(np.ones(5), np.ones(5))
    with pytest.raises(ValueError, match=r"\(M, n\)"):
        loss_minimum_scale(np.ones((2, 5)), np.ones(4))
    with pytest.raises(ValueError, match="finite norms"):
        loss_minimum_scale(-np.ones((2, 5)), np.ones(5))
    with pytest.raises(ValueError, match="all be zero"):
        loss_minimum_scale(np.zeros((2, 5)), np.ones(5))


def test_score_sweep_finds_the_crps_optimal_scale():
    """Gaussian predictive N(0, (c^2/nu)) for y ~ N(0, sigma^2): CRPS is minimised at c^2/nu = sigma^2."""
    c, sigma = 4.0, 1.0  # optimum nu = 16
    y = torch.randn(4000, generator=torch.Generator().manual_seed(0)) * sigma
    gen = torch.Generator().manual_seed(1)
    sample = lambda nu, xb, m: torch.randn(m, len(xb), generator=gen) * c / math.sqrt(nu)  # noqa: E731
    out = score_sweep(sample, torch.zeros(4000, 1), y, [4, 8, 16, 32, 64], num_samples=19)
    assert out["nu"] == 16 and len(out["scores"]) == 5


def test_sampler_set_generator_makes_draws_reproducible_per_stream():
    model = Regressor().eval()
    x = torch.randn(40, 5, generator=torch.Generator().manual_seed(0))
    with SASampler(model, generator=torch.Generator().manual_seed(1)) as sampler:
        a = sampler(4, x, 3)
        sampler.patch.set_generator(torch.Generator().manual_seed(1))
        b = sampler(4, x, 3)
        c = sampler(4, x, 3)
    assert a.device.type == "cpu" and torch.equal(a, b) and not torch.equal(b, c)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_sampler_runs_a_cuda_model_from_cpu_inputs_and_a_cpu_generator():
    """The calibration code passes CPU tensors and a CPU generator; the passes must run on the model's GPU, draw
    from a stream seeded by that generator (reproducible), and come back on the CPU."""
    model = Regressor().cuda().eval()
    x = torch.randn(64, 5, generator=torch.Generator().manual_seed(0))
    draws = []
    for _ in range(2):
        with SASampler(model, generator=torch.Generator().manual_seed(3)) as sampler:
            draws.append(sampler(8, x, 4))
    assert draws[0].device.type == "cpu" and draws[0].shape[:2] == (4, 64)
    assert torch.equal(draws[0], draws[1]) and draws[0].std(0).mean() > 0


def test_calibrate_sampler_in_one_call_equals_the_low_level_calls_on_the_same_seed():
    """stochattn.calibrate_sampler: the same BO record (hence both operating points) as SASampler + target_scale +
    eval_stats + bo_calibrate with one seed; a DataLoader of (x, y) batches and a forward that picks the output give
    the same; sample(x, n) draws at the chosen point, reproducibly for the seed."""
    import stochattn
    from stochattn.calibrate import CalibratedSampler, calibrate_sampler

    model = Regressor().eval()
    x = torch.randn(160, 5, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        point = model(x)
    y = point + 0.1 * torch.randn(160, generator=torch.Generator().manual_seed(1))
    kw = dict(batch_size=80, num_batches=2, num_passes=4)
    gen = torch.Generator().manual_seed(5)
    with SASampler(model, generator=gen) as sampler:
        low = bo_calibrate(lambda nu: eval_stats(nu, sampler, x, y, point, generator=gen, **kw), target_scale(y, point),
                           domain=IntegerDomain(1, 512), budget=5, seed=5)  # fmt: skip
    one = stochattn.calibrate_sampler(model, x, y, domain=IntegerDomain(1, 512), budget=5, seed=5, **kw)
    assert isinstance(one, CalibratedSampler) and one.result.s0 == low.s0
    strip = lambda r: [{k: v for k, v in h.items() if k != "seconds"} for h in r.history()]  # noqa: E731
    assert strip(one.result) == strip(low)
    assert (one.nu_loss_argmin, one.nu_scale_match) == (low.nu_loss_argmin, low.nu_surrogate)
    assert one.nu == one.nu_at("scale_match") == low.nu_surrogate and one.nu_at("loss_argmin") == low.nu
    assert one.at_boundary is low.at_boundary_surrogate

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y.unsqueeze(-1)), batch_size=64)
    picked = calibrate_sampler(model, loader, forward=lambda xb: model(xb).unsqueeze(-1), operating_point="loss_argmin",
                               domain=IntegerDomain(1, 512), budget=5, seed=5, **kw)  # fmt: skip
    assert strip(picked.result) == strip(low) and picked.nu == low.nu and picked.at_boundary is low.at_boundary

    draws = one.sample(x[:7], 3)
    assert draws.shape == (3, 7) and draws.std(0).mean() > 0
    again = calibrate_sampler(model, x, y, domain=IntegerDomain(1, 512), budget=5, seed=5, **kw)
    assert torch.equal(again.sample(x[:7], 3), draws)
    assert picked.sample(x[:7], 2, operating_point="scale_match").shape == (2, 7, 1)
    with torch.no_grad():
        assert torch.equal(model(x), point)  # the model is left unpatched
    with pytest.raises(ValueError, match="forward="):
        calibrate_sampler(model, x, y.unsqueeze(-1), budget=3)
    with pytest.raises(ValueError, match="operating_point"):
        calibrate_sampler(model, x, y, operating_point="median")


def _noisy_regression(n, seed, noise=1.0):
    """x ~ N(0, I), y = the frozen model's prediction + N(0, noise^2): residuals far beyond what SA's spread gives on
    a random 1-block FT-Transformer, exchangeable across calibration and test points."""
    model = Regressor().eval()
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        point = model(x)
    return model, x, point + noise * torch.randn(n, generator=torch.Generator().manual_seed(seed + 1))


def test_calibrate_sampler_rescale_conformal_holds_the_level_where_sa_is_too_narrow():
    """rescale="conformal": nu on one half of the calibration points (the same BO record as the low-level calls on
    exactly those points), the factor on the other half from num_samples draws per point; SA natively covers far
    less than 95 % of fresh points (at the boundary nu = 1), the rescaled 95 % interval covers 95 % up to the split
    conformal spread (SD sqrt(L (1 - L) / n_scale) over calibration draws, plus the test binomial SD)."""
    import stochattn
    from stochattn import metrics, scaling
    from stochattn.calibrate import Rescaling

    n_cal, n_test = 400, 2000
    model, x, y = _noisy_regression(n_cal + n_test, seed=11)
    kw = dict(batch_size=100, num_batches=2, num_passes=4, budget=5, domain=IntegerDomain(1, 512), seed=3)
    with pytest.warns(UserWarning, match="rescaled by the conformal factor"):
        sampler = stochattn.calibrate_sampler(model, x[:n_cal], y[:n_cal], rescale="conformal", num_samples=40, **kw)
    r = sampler.rescaling
    assert isinstance(r, Rescaling) and (r.n_nu, r.n_scale, r.num_samples, r.level) == (200, 200, 40, 0.95)
    assert sampler.at_boundary and sampler.nu == 1 and "rescaled: conformal factor" in sampler.describe()
    # the split: nu calibrated on the points the seeded permutation leaves after the first n_scale
    order = torch.from_numpy(np.random.default_rng(3).permutation(n_cal))
    nu_idx, scale_idx = order[200:], order[:200]
    assert set(nu_idx.tolist()).isdisjoint(scale_idx.tolist())
    with torch.no_grad():
        point = model(x)
    gen = torch.Generator().manual_seed(3)
    with SASampler(model, generator=gen) as low:
        res = bo_calibrate(lambda nu: eval_stats(nu, low, x[nu_idx], y[nu_idx], point[nu_idx], generator=gen,
                                                 batch_size=100, num_batches=2, num_passes=4),
                           target_scale(y[nu_idx], point[nu_idx]), domain=IntegerDomain(1, 512), budget=5, seed=3)
    strip = lambda rec: [{k: v for k, v in h.items() if k != "seconds"} for h in rec.history()]  # noqa: E731
    assert strip(sampler.result) == strip(res)
    # the factor is split conformal's on the kept draws of the scale half
    draws, p_scale, y_scale = sampler._scale_data
    assert draws.shape == (40, 200) and np.array_equal(y_scale, y[scale_idx].double().numpy())
    assert r.factor == scaling.fit_conformal_scale(draws, p_scale, y_scale, coverage=0.95, level=0.95)
    assert r.factor > 3 and r.native_coverage < 0.6 and r.rescaled_coverage >= 0.95
    # fresh points: native far below, rescaled at the level
    xt, yt = x[n_cal:], y[n_cal:].double().numpy()
    lo, hi = sampler.interval(xt)
    cov = float(((lo.numpy() <= yt) & (yt <= hi.numpy())).mean())
    sd = math.sqrt(0.95 * 0.05 * (1 / 200 + 1 / n_test))
    assert abs(cov - 0.95) < 3 * sd
    native = sampler.sample(xt, rescaled=False).double().numpy()
    assert metrics.coverage_and_width(native, yt, (0.95,))[0.95]["coverage"] < 0.6
    # another level: its own factor, fitted on first use from the same draws; sample() at that level matches it
    lo9, hi9 = sampler.interval(xt, 0.9)
    assert sampler.scale_factor(0.9) == scaling.fit_conformal_scale(draws, p_scale, y_scale, coverage=0.9, level=0.9)
    cov9 = float(((lo9.numpy() <= yt) & (yt <= hi9.numpy())).mean())
    assert abs(cov9 - 0.9) < 3 * math.sqrt(0.9 * 0.1 * (1 / 200 + 1 / n_test))
    assert sampler.sample(xt[:5]).shape == (40, 5)
    # the factor belongs to the operating point it was fitted at
    import copy
    import dataclasses

    other = copy.copy(sampler)
    other.result = dataclasses.replace(sampler.result, nu_loss_argmin=sampler.nu + 1)
    with pytest.raises(ValueError, match="rescaled=False"):
        other.sample(xt[:5], operating_point="loss_argmin")
    assert other.sample(xt[:5], 3, operating_point="loss_argmin", rescaled=False).shape == (3, 5)


def test_calibrate_sampler_rescale_temperature_and_bad_arguments():
    import stochattn
    from stochattn import scaling

    model, x, y = _noisy_regression(120, seed=21)
    kw = dict(batch_size=60, num_batches=1, num_passes=4, budget=4, domain=IntegerDomain(1, 64), seed=0)
    with pytest.warns(UserWarning, match="temperature factor"):
        sampler = stochattn.calibrate_sampler(model, x, y, rescale="temperature", scale_fraction=0.25,
                                              num_samples=16, **kw)  # fmt: skip
    r = sampler.rescaling
    assert (r.n_nu, r.n_scale) == (90, 30)
    draws, p, t = sampler._scale_data
    assert r.factor == scaling.fit_temperature(draws, p, t) and sampler.scale_factor(0.5) == r.factor
    with pytest.raises(ValueError, match="rescale must be"):
        stochattn.calibrate_sampler(model, x, y, rescale="isotonic", **kw)
    with pytest.raises(ValueError, match="needs at least 19 calibration points"):
        stochattn.calibrate_sampler(model, x[:30], y[:30], rescale="conformal", **kw)
    # without rescale: nothing changes (native draws, no rescaling record)
    with pytest.warns(UserWarning, match="rescale='conformal'"):
        plain = stochattn.calibrate_sampler(model, x, y, **kw)
    assert plain.rescaling is None and plain.scale_factor() == 1.0 and "no rescaling" in plain.describe()
