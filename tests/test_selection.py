"""Tests for stochattn.selection: choice on validation data only by the CRPS of the predictive samples (RMSE for
point models), failed candidates, the "worse than the mean" guard, and the selection record in a run's meta.json."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from stochattn.data.uci import load_prepared
from stochattn.experiments import uci
from stochattn.io import load_json
from stochattn.selection import CandidateFit, SelectionError, ValidationSplit, select_on_validation
from stochattn.training import fit_regressor, predict

pytestmark = pytest.mark.usefixtures("one_thread")


def linear_split(seed=0, n=200, m=60):
    """y = x @ w + 0.1 noise: a linear model fits it to RMSE ~0.1 (the mean predictor: ~1.7)."""
    rng = np.random.default_rng(seed)
    w = np.array([1.0, -1.0, 0.5])
    x = rng.standard_normal((n + m, 3))
    y = x @ w + 0.1 * rng.standard_normal(n + m)
    return ValidationSplit(x[:n], y[:n], x[n:], y[n:])


def sgd_linear_fit(candidate, split):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    fit_regressor(model, split.x_fit, split.y_fit, split.x_val, split.y_val, seed=0, batch_size=32, max_epochs=20,
                  patience=None, progress=False,
                  optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=candidate["lr"]))
    return CandidateFit(model, predict(model, split.x_val))


@pytest.mark.filterwarnings("ignore:training loss became")
def test_absurd_learning_rate_is_never_selected():
    split = linear_split()
    sel = select_on_validation("sgd", [{"lr": 1e3}, {"lr": 0.05}], sgd_linear_fit, split, metric="rmse")
    assert sel.index == 1 and sel.candidate == {"lr": 0.05}
    rec = sel.record
    assert rec["metric"] == "val_rmse" and rec["grid"] == [{"lr": 1e3}, {"lr": 0.05}]
    assert rec["chosen"] == {"index": 1, "candidate": {"lr": 0.05}}
    assert len(rec["seconds"]) == 2 and all(s >= 0 for s in rec["seconds"])
    assert rec["scores"][1] < 0.2  # noise sd 0.1
    assert rec["scores"][0] is None or rec["scores"][0] > 10 * rec["scores"][1]
    # the chosen model really is the one scored
    assert split.rmse(predict(sel.result, split.x_val)) == pytest.approx(rec["scores"][1], rel=1e-6)


def test_diverging_candidate_scores_none_and_ties_go_to_the_first():
    split = linear_split()

    def fit(c, s):
        if c["k"] == 0:
            raise FloatingPointError("loss became nan")
        return CandidateFit(c["k"], 0.5 * s.y_val)  # k = 1 and 2 tie

    sel = select_on_validation("m", [{"k": 0}, {"k": 1}, {"k": 2}], fit, split, metric="rmse")
    assert sel.index == 1 and sel.record["scores"][0] is None and "FloatingPointError" in sel.record["errors"][0]
    assert sel.record["scores"][1] == sel.record["scores"][2]


def test_worse_than_the_training_mean_raises_naming_method_and_grid():
    split = linear_split()
    const = float(split.y_fit.mean())

    def fit(c, s):
        return CandidateFit(None, np.full(len(s.y_val), const + c["offset"]))

    # offset 0 is exactly the mean predictor: not better than it, so an error as well
    with pytest.raises(SelectionError, match=r"ivon on yacht/split0: no candidate beats .*'offset': 0\.5"):
        select_on_validation("ivon", [{"offset": 0.5}, {"offset": 0.0}], fit, split, label="yacht/split0",
                             metric="rmse")  # fmt: skip
    with pytest.raises(SelectionError, match="no candidate beats"):
        select_on_validation("hsa", [{"offset": 0.0}], lambda c, s: CandidateFit(None, [np.nan] * len(s.y_val)), split,
                             metric="rmse")  # fmt: skip
    assert issubclass(SelectionError, ValueError)


def gaussian_candidates(split, sds, shift=0.0, S=64, seed=0):
    """Fit function whose candidate ``k`` predicts the truth's mean (the noise-free linear model, + ``shift``) with
    S Gaussian samples of standard deviation ``sds[k]``."""
    w = np.array([1.0, -1.0, 0.5])

    def fit(c, s):
        mean = s.x_val @ w + c.get("shift", shift)
        rng = np.random.default_rng(seed)
        return CandidateFit(c["k"], mean, mean + sds[c["k"]] * rng.standard_normal((S, len(mean))))

    return fit


def test_crps_prefers_the_spread_that_fits_the_residuals_among_equal_means():
    """Three candidates with the same point prediction (so the same RMSE): the CRPS picks the sample spread of the
    noise (sd 0.1), not the collapsed (0.001) or the far too wide one (2.0); every candidate's validation CRPS (as
    scoringrules computes it), RMSE and PI-95 coverage is recorded."""
    from stochattn.metrics import crps

    split = linear_split()
    sds = [0.001, 0.1, 2.0]
    fit = gaussian_candidates(split, sds)
    sel = select_on_validation("swag", [{"k": 0}, {"k": 1}, {"k": 2}], fit, split)
    rec = sel.record
    assert sel.index == 1 and rec["metric"] == "val_crps" and rec["scores"] == rec["val_crps"]
    assert rec["val_rmse"][0] == rec["val_rmse"][1] == rec["val_rmse"][2]  # point RMSE could not choose
    for k in range(3):
        assert rec["val_crps"][k] == pytest.approx(float(crps(fit({"k": k}, split).val_samples, split.y_val).mean()))
    cov = rec["val_coverage_95"]
    # 95 % intervals of the right spread cover ~0.95 of 60 points (binomial se 0.028); collapsed ones almost none
    assert abs(cov[1] - 0.95) < 3 * math.sqrt(0.95 * 0.05 / 60) + 0.02 and cov[0] < 0.2 and cov[2] == 1.0
    assert select_on_validation("swag", [{"k": 0}, {"k": 1}], fit, split, metric="rmse").index == 0  # a tie


def test_crps_winner_must_still_beat_the_mean_on_accuracy():
    """A candidate far off the truth with an enormous spread can have a lower CRPS than an accurate but badly
    dispersed one; it is not eligible when its point prediction does not beat the training mean."""
    split = linear_split()
    fit = gaussian_candidates(split, [1e-4, 1.6])
    # the mean predictor's validation RMSE is 1.46: k=0 (shift 1.3, RMSE 1.30) beats it with a collapsed spread
    # (CRPS ~1.3); k=1 (shift 1.6, RMSE 1.60) does not, with a spread of its error's size (CRPS ~0.96)
    assert 1.35 < split.mean_predictor_rmse() < 1.55
    grid = [{"k": 0, "shift": 1.3}, {"k": 1, "shift": 1.6}]
    assert select_on_validation("m", grid, fit, split, require_skill=False).index == 1
    sel = select_on_validation("m", grid, fit, split)
    assert sel.index == 0 and sel.record["val_crps"][1] < sel.record["val_crps"][0]
    with pytest.raises(ValueError, match="needs the candidates' val_samples"):
        select_on_validation("m", [{"k": 0}], lambda c, s: CandidateFit(0, fit(c, s).val_point), split)


def test_validation_split_is_a_read_only_copy_of_four_arrays():
    data = {"x_train": np.ones((5, 2)), "y_train": np.arange(5.0), "x_val": np.zeros((3, 2)), "y_val": np.ones(3),
            "x_test": np.full((4, 2), 7.0), "y_test": np.full(4, 7.0)}
    split = ValidationSplit.from_prepared(data)
    assert set(vars(split)) == {"x_fit", "y_fit", "x_val", "y_val"}
    with pytest.raises(ValueError, match="read-only"):
        split.y_val[0] = 3.0
    data["y_val"][0] = 5.0  # the caller's array is not shared either
    assert split.y_val[0] == 1.0
    assert split.mean_predictor_rmse() == pytest.approx(math.sqrt(np.mean((np.ones(3) - 2.0) ** 2)))


# ------------------------------------------------------------------------------------------------------------------
# the baselines of stochattn.experiments.uci: only fitting/validation arrays reach the selection; meta.json record
# ------------------------------------------------------------------------------------------------------------------
MODEL = dict(n_blocks=1, d_block=16, attention_n_heads=2)
TRAIN = dict(max_epochs=15, patience=None, lr=3e-3, batch_size=64)
CFG = {
    "swag": dict(epochs=2, max_rank=2, lr=1e-4, grid=[{"lr": 1e3}, {"lr": 1e-4}]),
    "multiswag": dict(components=2, epochs=2, max_rank=2, lr=1e-4, grid=[{"lr": 1e3}, {"lr": 1e-4}]),
    "ivon": dict(lr=1.0, hess_init=3.0, clip_radius=1e-3, ess_factor=10.0, grid=[{"lr": 1e3, "clip_radius": None}, {}]),
    "hsa": dict(tau1=4.0, tau2=4.0, grid=[{"lr": 1e3}, {}]),
}
S = 4


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("selection")
    uci.prepare_sinusoid(d / "prepared.npz", n=240, seed=0)
    uci.train_backbone(d / "prepared.npz", d / "backbone/model.pt", d / "backbone/meta.json", model=MODEL,
                       train=TRAIN, seed=0, progress=False)
    return d


@pytest.mark.filterwarnings("ignore:training loss became")  # the absurd lr diverges
@pytest.mark.parametrize("method", ["swag", "multiswag", "ivon", "hsa"])
def test_baseline_selects_on_validation_only_and_records_it(workdir, method, monkeypatch):
    import stochattn.selection as selection

    seen = []
    real = selection.select_on_validation

    def recording(method_name, grid, fit, split, **kw):
        def recording_fit(candidate, s):
            seen.append(s)
            return fit(candidate, s)

        return real(method_name, grid, recording_fit, split, **kw)

    monkeypatch.setattr(selection, "select_on_validation", recording)
    out = workdir / method
    meta = uci.run_method(method, workdir / "prepared.npz", out, backbone_path=workdir / "backbone/model.pt",
                          model=MODEL, train=TRAIN, method_cfg=CFG[method], num_samples=S, seed=1, progress=False)
    data = load_prepared(workdir / "prepared.npz")
    assert len(seen) == (4 if method == "multiswag" else 2)  # MultiSWAG: SWAG's scoring, then the pooled samples
    for s in seen:  # exactly the fitting and validation arrays; nothing else is reachable from the split
        assert set(vars(s)) == {"x_fit", "y_fit", "x_val", "y_val"}
        np.testing.assert_array_equal(s.x_fit, data["x_train"])
        np.testing.assert_array_equal(s.y_fit, data["y_train"])
        np.testing.assert_array_equal(s.x_val, data["x_val"])
        np.testing.assert_array_equal(s.y_val, data["y_val"])
    rec = load_json(out / "meta.json")["selection"]
    assert rec == meta["selection"]
    assert rec["chosen"]["index"] == 1 and rec["grid"][0]["lr"] == 1e3 and len(rec["seconds"]) == 2
    assert rec["metric"] == "val_crps" and rec["val_rmse"][1] < rec["mean_predictor_rmse"]
    assert rec["scores"][0] is None or rec["scores"][0] > rec["scores"][1]
    assert all(len(rec[k]) == 2 for k in ("val_crps", "val_rmse", "val_coverage_95"))
    assert meta["seconds"]["train"] >= sum(rec["seconds"])  # every candidate's training is the method's cost
    if method == "swag":
        assert rec["reference"]["start_val_rmse"] == pytest.approx(
            load_json(workdir / "backbone/meta.json")["val_rmse_standardised"], rel=1e-5)
    if method == "multiswag":
        assert rec["chosen_on"].startswith("pooled validation samples of the 2 components")


def test_baseline_worse_than_the_mean_is_an_error_of_the_run(workdir):
    cfg = dict(CFG["hsa"], grid=[{"lr": 1e-9, "max_epochs": 1}])  # an untrained network
    with pytest.raises(SelectionError, match=r"hsa on .*prepared\.npz: no candidate beats .*'lr': 1e-09"):
        uci.run_method("hsa", workdir / "prepared.npz", workdir / "bad", model=MODEL, train=TRAIN, method_cfg=cfg,
                       num_samples=S, seed=1, progress=False)
    assert not (workdir / "bad" / "samples.npz").exists()


def test_require_skill_false_keeps_a_skill_less_candidate_and_records_it():
    x = np.zeros((6, 1))
    split = ValidationSplit(x, np.array([0.0, 2.0, 0.0, 2.0, 0.0, 2.0]), x[:2], np.array([1.0, 1.0]))
    fit = lambda c, s: CandidateFit(c["v"], np.full(2, c["v"]))  # noqa: E731
    with pytest.raises(SelectionError, match="no candidate beats"):
        select_on_validation("m", [{"v": 3.0}], fit, split, metric="rmse")
    sel = select_on_validation("m", [{"v": 3.0}], fit, split, require_skill=False, metric="rmse")
    assert sel.result == 3.0 and sel.record["beats_mean_predictor"] is False


def test_choose_over_records_of_separate_fits_is_the_single_search():
    """The workflow's split search: each candidate fitted alone (fit_candidate), its entry written as JSON and read
    back, then choose(): the same index and record (seconds aside) as select_on_validation, failed and non-finite
    candidates included; no eligible candidate is the same SelectionError."""
    import json

    from stochattn.selection import choose, entry_from_record, entry_record, fit_candidate

    split = linear_split()

    def fit(c, s):
        if c["k"] == 0:
            raise FloatingPointError("loss became nan")
        if c["k"] == 1:
            return CandidateFit(c["k"], np.full(s.y_val.shape, np.nan), np.zeros((2, *s.y_val.shape)))
        return CandidateFit(c["k"], c["k"] / 4 * s.y_val, np.stack([s.y_val, 0.5 * s.y_val]))

    grid = [{"k": k} for k in range(5)]
    sel = select_on_validation("m", grid, fit, split)
    entries = [entry_from_record(json.loads(json.dumps(entry_record(fit_candidate("m", c, fit, split)[1]))))
               for c in grid]  # fmt: skip
    index, record = choose("m", grid, entries, split.mean_predictor_rmse())
    assert index == sel.index
    def timeless(r):
        return {k: v for k, v in r.items() if k != "seconds"}

    assert timeless(record) == timeless(sel.record)
    with pytest.raises(SelectionError, match="no candidate beats"):
        choose("m", grid[:2], entries[:2], split.mean_predictor_rmse())


# ------------------------------------------------------------------------------------------------------------------
# widening a grid whose edge was chosen (stochattn.selection.Widening)
# ------------------------------------------------------------------------------------------------------------------
def spread_candidates(split, best_sd=0.1, S=64, seed=0):
    """Fit function whose candidate predicts the noise-free mean with S Gaussian samples of SD ``c["sd"]``: the
    validation CRPS is lowest near the noise's SD (0.1), so a grid of SDs far from it has its edge chosen."""
    w = np.array([1.0, -1.0, 0.5])

    def fit(c, s):
        mean = s.x_val @ w
        rng = np.random.default_rng(seed)
        return CandidateFit(c["sd"], mean, mean + c["sd"] * rng.standard_normal((S, len(mean))))

    return fit


def test_an_edge_chosen_widens_the_grid_until_the_choice_is_inside():
    """The noise SD is 0.1; a grid of SDs 0.001-0.01 has its top edge chosen: widening by 3x fits 0.03, then 0.09
    (better), then 0.27 (worse), and keeps 0.09, now inside; every added candidate is recorded and scored on the
    same validation part, and the choice is the CRPS arg-min over the widened grid."""
    from stochattn.selection import Widening

    split = linear_split()
    fit = spread_candidates(split)
    grid = [{"sd": 0.001}, {"sd": 0.003}, {"sd": 0.01}]
    plain = select_on_validation("swag", grid, fit, split)
    assert plain.index == 2 and "widened" not in plain.record  # no widening asked for: the edge stays chosen
    sel = select_on_validation("swag", grid, fit, split, widen=Widening(("sd",), factor=3.0, low=1e-4, high=10.0))
    rec = sel.record
    assert [c["sd"] for c in rec["widened"]] == pytest.approx([0.03, 0.09, 0.27])
    assert sel.candidate["sd"] == pytest.approx(0.09) and rec["edge_chosen"] is False
    assert len(rec["grid"]) == len(rec["val_crps"]) == len(rec["val_coverage_95"]) == 6
    assert rec["chosen"]["index"] == int(np.argmin(rec["val_crps"])) == 4
    assert sel.result == pytest.approx(0.09)  # the chosen candidate's own fit is returned
    assert grid == [{"sd": 0.001}, {"sd": 0.003}, {"sd": 0.01}]  # the caller's grid is left as it was


def test_widening_goes_down_at_the_low_edge_stops_at_its_bound_and_says_so():
    from stochattn.selection import Widening

    split = linear_split()
    fit = spread_candidates(split)
    grid = [{"sd": 0.5}, {"sd": 1.0}, {"sd": 2.0}]
    sel = select_on_validation("m", grid, fit, split, widen=Widening(("sd",), factor=2.0, low=0.2, high=5.0))
    # 0.5 -> 0.25 -> 0.2 (the bound) -> nothing left to add: the bound's candidate is chosen, still on the edge
    assert [c["sd"] for c in sel.record["widened"]] == pytest.approx([0.25, 0.2])
    assert sel.candidate["sd"] == pytest.approx(0.2) and sel.record["edge_chosen"] is True
    capped = select_on_validation("m", grid, fit, split, widen=Widening(("sd",), 2.0, 1e-3, 5.0, max_steps=1))
    assert len(capped.record["widened"]) == 1 and capped.record["edge_chosen"] is True  # max_steps reached


def test_widening_follows_the_chosen_candidates_line_and_moves_its_keys_together():
    """SWAG's grid holds two lines (SGD and AdamW rates): the edge is judged within the chosen one's line, and
    MC Dropout's two rates move together."""
    from stochattn.selection import Widening

    w = Widening(("lr",), factor=3.0, low=1e-6, high=1.0)
    grid = [{"optimizer": "sgd", "lr": 1e-4}, {"optimizer": "sgd", "lr": 1e-3},
            {"optimizer": "adamw", "lr": 1e-4}, {"optimizer": "adamw", "lr": 1e-2}]
    assert w.extension(grid, 1) == {"optimizer": "sgd", "lr": pytest.approx(3e-3)}  # the top of the SGD line
    assert w.extension(grid, 2) == {"optimizer": "adamw", "lr": pytest.approx(1e-4 / 3)}
    assert w.extension([{"lr": 1e-3, "k": 1}, {"lr": 1e-2, "k": 2}], 0) is None  # lines of one: no direction
    assert w.extension([{"lr": 1e-3}, {"lr": 1e-2}, {"lr": 1e-1}], 1) is None  # inside
    rates = Widening(("attention_dropout", "ffn_dropout"), factor=2.0, low=0.005, high=0.5)
    mc = [{"attention_dropout": 0.01, "ffn_dropout": 0.01, "residual_dropout": 0.0},
          {"attention_dropout": 0.2, "ffn_dropout": 0.1, "residual_dropout": 0.0},
          {"attention_dropout": 0.4, "ffn_dropout": 0.3, "residual_dropout": 0.0}]
    assert rates.extension(mc, 0) == {"attention_dropout": 0.005, "ffn_dropout": 0.005, "residual_dropout": 0.0}
    assert rates.extension(mc, 2) == {"attention_dropout": 0.5, "ffn_dropout": 0.5, "residual_dropout": 0.0}
    with pytest.raises(ValueError, match="factor"):
        Widening(("lr",), factor=1.0, low=1e-6, high=1.0)
    assert Widening.from_config(None) is None
    assert Widening.from_config({"keys": ["lr"], "factor": 3, "low": 1e-5, "high": 0.1}).max_steps == 3


@pytest.mark.parametrize("sds, chosen, widened", [
    ([0.001, 0.003, 0.01], 0.09, [0.03, 0.09, 0.27]),  # an added candidate wins: the choosing job's own fit
    ([0.03, 0.1], 0.1, [0.3]),  # the added one loses: the grid's edge stays chosen, loaded from its job's file
])  # fmt: skip
def test_a_search_in_jobs_widens_in_its_choosing_job_as_the_single_job_does(tmp_path, sds, chosen, widened):
    """The grid's candidates fitted one a job (methods.write_candidate), the candidates beyond the chosen edge
    fitted by methods.choose_candidate: the same widened grid, scores and choice as methods.search_run."""
    from stochattn.experiments import methods

    split = linear_split()
    data = {"x_train": split.x_fit, "y_train": split.y_fit, "x_val": split.x_val, "y_val": split.y_val}
    fitted = []

    def search():
        def fit(c, s):
            fitted.append(c["sd"])
            return spread_candidates(split)(c, s)

        widen = {"keys": ["sd"], "factor": 3.0, "low": 1e-4, "high": 10.0}
        return methods.Search("m", [{"sd": sd} for sd in sds], fit, lambda sel, t: sel, lambda sd: {"sd": sd},
                              lambda state, c: state["sd"], widen=widen)  # fmt: skip

    one = methods.search_run(search(), data)
    paths = [tmp_path / f"{k}.pt" for k in range(len(sds))]
    for k in reversed(range(len(sds))):
        methods.write_candidate(search(), data, paths[k], index=k, seed=0)
    fitted.clear()
    split_run = methods.choose_candidate(search(), data, paths)
    assert fitted == pytest.approx(widened)  # only the widening's candidates are fitted in the choosing job
    assert split_run.result == pytest.approx(chosen) and split_run.result == one.result
    drop = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    assert drop(split_run.record) == drop(one.record)
    assert [c["sd"] for c in split_run.record["widened"]] == pytest.approx(widened)


def test_mc_dropout_run_widens_its_rates_when_the_lowest_is_chosen(workdir):
    """Through uci.run_method: a grid whose lowest rate wins is widened below it, the added network trained and
    scored on the validation part like the others (meta.json's selection record lists it)."""
    cfg = {"grid": [{"attention_dropout": 0.02, "ffn_dropout": 0.02}, {"attention_dropout": 0.6, "ffn_dropout": 0.6}],
           "widen": {"keys": ["attention_dropout", "ffn_dropout"], "factor": 2.0, "low": 0.01, "high": 0.9,
                     "max_steps": 1}}
    out = workdir / "mc_dropout_widen"
    meta = uci.run_method("mc_dropout", workdir / "prepared.npz", out, backbone_path=workdir / "backbone/model.pt",
                          model=MODEL, train=TRAIN, method_cfg=cfg, num_samples=S, seed=1, progress=False)
    rec = meta["selection"]
    assert len(rec["grid"]) == 2 + len(rec["widened"]) == len(rec["val_crps"])
    if rec["widened"]:  # the edge 0.02 or 0.6 was chosen: one more network beyond it
        added = rec["widened"][0]
        assert added["attention_dropout"] in (0.01, 0.9) and added["attention_dropout"] == added["ffn_dropout"]
        assert rec["val_crps"][2] is not None
    assert rec["chosen"]["index"] == int(np.nanargmin([np.inf if v is None else v for v in rec["val_crps"]]))


def test_multiswag_chooses_its_one_setting_on_the_pooled_validation_samples():
    """The ERA5 stand-in's defect (docs/measurements.md#ett-method_params-swag): component 0 alone scored best at
    the largest rate, where the other members' phases ran away. MultiSWAG's choice is made on the pooled samples of
    all its components: the candidate where any component is far off loses, a diverged phase (None) fails its
    candidate, and the run's test and cal samples are the chosen candidate's pooled draws, component 0 first."""
    from stochattn.experiments.methods import multiswag_choose

    rng = np.random.default_rng(0)
    n, y_val = 50, rng.normal(size=50)
    data = {"x_train": rng.normal(size=(200, 1)), "y_train": rng.normal(size=200), "x_val": np.zeros((n, 1)),
            "y_val": y_val}  # fmt: skip

    def draw(centre, spread, count):  # samples around ``centre`` (val), test and cal alike
        return {part: torch.as_tensor(centre + spread * rng.normal(size=(count, n))) for part in ("val", "test", "cal")}

    grid = [{"lr": 1e-2, "scale": 1.0}, {"lr": 3e-2, "scale": 1.0}, {"lr": 1e-1, "scale": 1.0}]
    good, wide = 0.9 * y_val, 0.99 * y_val
    draws = [[draw(good, 0.6, 3), draw(wide, 0.45, 3), draw(wide, 0.45, 3)],  # component 0: best alone at 3e-2
             [draw(good, 0.6, 3), draw(y_val + 3.0, 0.45, 3), None]]  # fmt: skip
    alone = [ValidationSplit(data["x_train"], data["y_train"], data["x_val"], y_val).crps(d["val"]) for d in draws[0]]
    assert int(np.argmin(alone)) == 1
    run = multiswag_choose(data, grid, draws, seconds=7.0, num_samples=6)
    record = run["extra"]["selection"]
    assert record["chosen"]["index"] == 0 and record["scores"][2] is None and "diverged" in record["errors"][2]
    np.testing.assert_array_equal(run["samples"], torch.cat([draws[0][0]["test"], draws[1][0]["test"]]))
    np.testing.assert_array_equal(run["cal_point"], torch.cat([draws[0][0]["cal"], draws[1][0]["cal"]]).mean(0))
    assert run["seconds"]["train"] == 7.0
    with pytest.raises(ValueError, match="share is 2 of 5"):
        multiswag_choose(data, grid, draws, seconds=7.0, num_samples=5)
    with pytest.raises(ValueError, match="every component needs a draw"):
        multiswag_choose(data, grid, draws * 4, seconds=7.0, num_samples=6)


def test_multiswag_widens_its_pooled_choice_beyond_the_grid_edge_as_swag_does():
    """Where the pooled validation CRPS is least at the grid's edge, every component draws at the candidate beyond
    it (``extend``), which is scored like the others, as SWAG's own search widens (selection.Widening): here 3e-1
    beyond the edge 1e-1 is better and is chosen, then 9e-1 beyond it is worse and the choice stays at 3e-1, off
    the edge. The components' draws there are the run's samples; the phases' seconds count as training."""
    from stochattn.experiments.methods import multiswag_choose

    rng = np.random.default_rng(1)
    n, y_val = 60, rng.normal(size=60)
    data = {"x_train": rng.normal(size=(200, 1)), "y_train": rng.normal(size=200), "x_val": np.zeros((n, 1)),
            "y_val": y_val}  # fmt: skip
    error = {1e-2: 1.2, 3e-2: 0.9, 1e-1: 0.6, 3e-1: 0.3, 9e-1: 1.5}  # the rate's distance from y, its draws' spread

    def draw(lr, count):
        return {part: torch.as_tensor(y_val + error[lr] * rng.normal(size=(count, n)))
                for part in ("val", "test", "cal")}  # fmt: skip

    grid = [{"lr": lr, "scale": 1.0} for lr in (1e-2, 3e-2, 1e-1)]
    draws = [[draw(c["lr"], 3) for c in grid], [draw(c["lr"], 2) for c in grid]]
    asked = []

    def extend(candidate):
        asked.append(candidate["lr"])
        return [draw(round(candidate["lr"], 6), 3), draw(round(candidate["lr"], 6), 2)]

    widen = {"keys": ["lr"], "factor": 3.0, "low": 1e-6, "high": 1.0, "max_steps": 3}
    run = multiswag_choose(data, grid, draws, seconds=7.0, num_samples=5, widen=widen, extend=extend)
    record = run["extra"]["selection"]
    assert asked == pytest.approx([0.3, 0.9])
    assert [c["lr"] for c in record["widened"]] == pytest.approx([0.3, 0.9]) and len(record["val_crps"]) == 5
    assert record["chosen"]["candidate"]["lr"] == pytest.approx(0.3) and record["edge_chosen"] is False
    assert run["samples"].shape == (5, n) and run["seconds"]["train"] == pytest.approx(7.0 + record["widened_seconds"])
    assert float((run["samples"] - torch.as_tensor(y_val)).std()) < 0.5  # 3e-1's draws' spread (0.3), not the grid's
    # without widen the choice stays on the edge; a widening without a way to draw fails before any choice
    assert multiswag_choose(data, grid, draws, seconds=7.0, num_samples=5)["extra"]["selection"]["chosen"]["index"] == 2
    with pytest.raises(ValueError, match="no way to draw"):
        multiswag_choose(data, grid, draws, seconds=7.0, num_samples=5, widen=widen)
    with pytest.raises(ValueError, match="share is 3 of 5"):
        multiswag_choose(data, grid, draws, seconds=7.0, num_samples=5, widen=widen,
                         extend=lambda c: [draw(0.3, 2), draw(0.3, 2)])  # fmt: skip
