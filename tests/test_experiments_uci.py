"""The UCI experiment stages on the small sinusoid data set: every method writes the contracted files."""

import numpy as np
import pytest
import torch

from stochattn.data.uci import load_prepared
from stochattn.experiments import grids, uci
from stochattn.experiments.evaluate import evaluate
from stochattn.io import load_json, load_npz, save_json, save_npz, sha256_record

MODEL = dict(n_blocks=1, d_block=16, attention_n_heads=2)
TRAIN = dict(max_epochs=3, patience=2, lr=1e-3, batch_size=64)
CFG = {
    "sa": dict(batch_size=64, num_batches=1, num_passes=4, nu_min=1, nu_max=256, budget=4, initial_design=3),
    "mc_dropout": {},
    "swag": dict(lr=1e-3, epochs=2),
    "multiswag": dict(lr=1e-3, epochs=2, components=2),
    "ivon": dict(lr=0.01, hess_init=10.0, grid=[{"hess_init": 10.0}, {"hess_init": 30.0}]),
    "hsa": {},
}
S = 5


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("uci")
    uci.prepare_sinusoid(d / "prepared.npz", n=160, seed=0)
    uci.train_backbone(d / "prepared.npz", d / "backbone/model.pt", d / "backbone/meta.json", model=MODEL, train=TRAIN,
                       seed=0, progress=False)
    return d


@pytest.fixture(scope="module")
def sa_run(workdir):
    """run_method("sa"): one calibration, two runs (sa/ and sa_match/)."""
    return uci.run_method("sa", workdir / "prepared.npz", workdir / "sa", backbone_path=workdir / "backbone/model.pt",
                          model=MODEL, train=TRAIN, method_cfg=CFG["sa"], num_samples=S, seed=1, progress=False)


def test_names():
    assert uci.METHODS[:2] == ("sa", "sa_match") and uci.DERIVED_METHODS == {"sa_match": "sa"}
    assert uci.RUN_METHODS == tuple(m for m in uci.METHODS if m != "sa_match")


def test_sa_writes_both_operating_points_from_one_calibration(workdir, sa_run):
    cal = load_json(workdir / "sa" / "calibration.json")
    assert len(cal["history"]) == 4 and not (workdir / "sa_match" / "calibration.json").exists()
    assert cal["nu"] == cal["nu_loss_argmin"]
    assert cal["runs"] == {
        "sa": {"operating_point": "loss_argmin", "nu": cal["nu_loss_argmin"], "at_boundary": cal["at_boundary"]},
        "sa_match": {"operating_point": "surrogate", "nu": cal["nu_surrogate"],
                     "at_boundary": cal["at_boundary_surrogate"]},
    }  # fmt: skip
    assert cal["at_boundary"] == (cal["nu"] == 1 and cal["nu_surrogate_continuous"] < 1)
    metas = {m: load_json(workdir / m / "meta.json") for m in ("sa", "sa_match")}
    assert metas["sa"] == sa_run
    for name, op, nu in (("sa", "loss_argmin", cal["nu_loss_argmin"]), ("sa_match", "surrogate", cal["nu_surrogate"])):
        meta = metas[name]
        assert meta["method"] == name and meta["operating_point"] == op and meta["nu"] == nu
        assert (meta["nu_loss_argmin"], meta["nu_surrogate"]) == (cal["nu_loss_argmin"], cal["nu_surrogate"])
        assert meta["calibration"] == str(workdir / "sa" / "calibration.json")
        assert meta["seconds"]["calibrate"] == metas["sa"]["seconds"]["calibrate"] > 0  # the shared calibration
    a, b = load_npz(workdir / "sa" / "samples.npz"), load_npz(workdir / "sa_match" / "samples.npz")
    for key in ("y", "point", "cal_y", "cal_point"):
        np.testing.assert_array_equal(a[key], b[key])  # same backbone, same split
    assert a["samples"].shape == b["samples"].shape and not np.array_equal(a["samples"], b["samples"])
    # both metrics.json: SA native and the reference; sa_match matched to SA's calibration coverage
    m_sa = evaluate(workdir / "sa" / "samples.npz", workdir / "sa" / "metrics.json", seed=0)
    m_match = evaluate(workdir / "sa_match" / "samples.npz", workdir / "sa_match" / "metrics.json", seed=0,
                           reference_path=workdir / "sa" / "samples.npz")
    assert (m_sa["nu"], m_match["nu"]) == (cal["nu_loss_argmin"], cal["nu_surrogate"])
    assert (m_sa["operating_point"], m_match["operating_point"]) == ("loss_argmin", "surrogate")
    assert m_sa["matched"]["factor_95"] == 1.0
    # the same interval, computed through the factor-1 rescaling: equal up to rounding (1 ulp seen with one thread)
    assert m_sa["matched"]["width_95"] == pytest.approx(m_sa["native"]["width_95"], rel=1e-12)
    assert m_match["matched"]["target_coverage_95"] == m_sa["matched"]["cal_coverage_95"]
    with pytest.raises(ValueError, match="written by run_method"):
        uci.run_method("sa_match", workdir / "prepared.npz", workdir / "x", backbone_path=workdir / "backbone/model.pt",
                       model=MODEL, train=TRAIN, method_cfg=CFG["sa"], num_samples=S, seed=1, progress=False)
    with pytest.raises(ValueError, match="operating_point"):
        uci.run_method("sa", workdir / "prepared.npz", workdir / "x", backbone_path=workdir / "backbone/model.pt",
                       model=MODEL, train=TRAIN, method_cfg={**CFG["sa"], "operating_point": "surrogate"},
                       num_samples=S, seed=1, progress=False)


@pytest.mark.parametrize("method", uci.RUN_METHODS)
def test_method_writes_contracted_samples_meta_and_metrics(workdir, sa_run, method):
    out = workdir / method
    if method == "sa":
        meta = sa_run
    else:
        meta = uci.run_method(method, workdir / "prepared.npz", out, backbone_path=workdir / "backbone/model.pt",
                              model=MODEL, train=TRAIN, method_cfg=CFG[method], num_samples=S, seed=1, progress=False)
    data = load_prepared(workdir / "prepared.npz")
    run = load_npz(out / "samples.npz")
    n, n_cal = len(data["y_test"]), len(data["y_cal"])
    assert run["samples"].shape == (S, n) and run["point"].shape == (n,)
    assert run["cal_samples"].shape == (S, n_cal) and run["cal_point"].shape == (n_cal,)
    assert np.allclose(run["y"], data["y_test_raw"])  # original units
    assert np.all(np.isfinite(run["samples"])) and run["samples"].std(0).mean() > 0
    assert set(meta["seconds"]) >= {"train", "calibrate", "predict", "backbone_train"}
    if method == "sa":
        cal = load_json(out / "calibration.json")
        assert meta["nu"] == cal["nu_loss_argmin"] and len(cal["history"]) == 4
    ref = None if method == "sa" else workdir / "sa" / "samples.npz"
    metrics = evaluate(out / "samples.npz", out / "metrics.json", seed=0, dataset="sinusoid", split=0,
                           reference_path=ref)
    assert len(metrics["pit_native"]) == n and 0 <= metrics["native"]["w1"] <= 0.5
    assert metrics["native"]["nrmse"] == pytest.approx(metrics["native"]["rmse"] / float(run["sigma_y"]))
    if method == "sa":
        assert metrics["scaled"] == metrics["native"] and metrics["temperature"] == 1.0
    else:
        assert metrics["temperature"] > 0
    matched = metrics["matched"]
    n_cal = len(data["y_cal"])
    for key in ("25", "50", "75", "95"):
        gap = matched[f"cal_coverage_{key}"] - matched[f"target_coverage_{key}"]
        assert (0 <= gap < 1 / n_cal + 1e-12) or (key != "95" and np.isnan(matched[f"factor_{key}"])), (key, gap)


def test_swag_run_keeps_the_posterior_it_sampled_as_multiswag_component_0(workdir, tmp_path):
    """SWAG with ``swag_member`` writes the very posterior it sampled from as MultiSWAG's component 0 (the workflow
    trains components 1..L-1 only): redrawn from the file with SWAG's seed it gives SWAG's samples. The file holds
    component 0's share of the samples at every candidate SWAG scored: at SWAG's choice the first rows of SWAG's own
    samples, elsewhere what that candidate's phase from the backbone draws at SWAG's seed. Component 1 draws at every
    candidate; MultiSWAG chooses one of them on the pooled validation samples and pools the kept draws there. The
    file's seconds are a member's (training + SWAG phases), its draws' apart; both count as MultiSWAG's training."""
    from stochattn.baselines.swag import component_counts, swag_samples
    from stochattn.experiments import methods
    from stochattn.selection import ValidationSplit

    cfg = dict(CFG["multiswag"], grid=[{"lr": 1e-3}, {"lr": 3e-3}])
    post = tmp_path / "swag" / "posterior.pt"
    swag_meta = uci.run_method("swag", workdir / "prepared.npz", tmp_path / "swag",
                               backbone_path=workdir / "backbone/model.pt", model=MODEL, train=TRAIN,
                               method_cfg={k: v for k, v in cfg.items() if k != "components"}, num_samples=S, seed=1,
                               swag_member=post, multiswag_components=2, progress=False)  # fmt: skip
    rec = load_json(post.with_suffix(".json"))
    assert rec["component"] == 0 and rec["selection"]["member_of"] == "swag"
    assert rec["seconds"] == pytest.approx(load_json(workdir / "backbone/meta.json")["seconds"]
                                           + swag_meta["seconds"]["train"])  # fmt: skip
    data = load_prepared(workdir / "prepared.npz")
    net, swag, candidate = uci._load_component(data, post)
    redrawn = methods.to_original(swag_samples(net, swag, data["x_test"], S, 1, scale=candidate["scale"]), data)
    np.testing.assert_allclose(redrawn, load_npz(tmp_path / "swag" / "samples.npz")["samples"], rtol=1e-6)
    n0, n1 = component_counts(S, 2)  # 3 and 2 of the 5 samples
    kept = methods.load_multiswag_component(post)
    assert len(kept["selection"]["grid"]) == len(kept["draws"]) == 2 and rec["draw_seconds"] > 0
    split = ValidationSplit.from_prepared(data)
    for c, draws in zip(kept["selection"]["grid"], kept["draws"]):
        assert {k: v.shape[0] for k, v in draws.items()} == {"val": n0, "test": n0, "cal": n0}
        if c == candidate:  # SWAG's own stream: its first n0 samples
            np.testing.assert_allclose(methods.to_original(draws["test"], data), redrawn[:n0], rtol=1e-6)
        member, phase = methods.swag_phase(uci.load_backbone(data, workdir / "backbone/model.pt"), c, split, 1, False)
        again = methods.posterior_draws(member, phase, c, data, 1, n0)
        for part in ("val", "test", "cal"):
            assert torch.equal(again[part], draws[part])
    comp1 = tmp_path / "components" / "1.pt"
    rec1 = uci.train_multiswag_component(workdir / "prepared.npz", comp1, component=1, model=MODEL,
                                         train=dict(TRAIN, max_epochs=30),  # a network with skill, as the backbone's
                                         method_cfg=cfg, seed=2, num_samples=S, first_path=post.with_suffix(".json"),
                                         progress=False)  # fmt: skip
    assert rec1["grid"] == rec["selection"]["grid"] and len(rec1["grid"]) == 2
    drawn = methods.load_multiswag_component(comp1, networks=True)
    assert [d["val"].shape[0] for d in drawn["draws"]] == [n1] * 2  # its share of S at each candidate
    meta = uci.run_method("multiswag", workdir / "prepared.npz", tmp_path / "multiswag", components=[post, comp1],
                          backbone_path=workdir / "backbone/model.pt", model=MODEL, train=TRAIN, method_cfg=cfg,
                          num_samples=S, seed=3, progress=False)  # fmt: skip
    pooled = load_npz(tmp_path / "multiswag" / "samples.npz")["samples"]
    assert np.all(np.isfinite(pooled)) and pooled.std(0).mean() > 0
    assert meta["seconds"]["train"] == pytest.approx(rec["seconds"] + rec["draw_seconds"] + rec1["seconds"])
    sel = meta["selection"]
    assert sel["grid"] == rec["selection"]["grid"] and sel["chosen_on"].startswith("pooled validation samples")
    chosen = sel["chosen"]["index"]
    np.testing.assert_allclose(pooled[:n0], methods.to_original(kept["draws"][chosen]["test"], data), rtol=1e-6)
    np.testing.assert_allclose(pooled[n0:], methods.to_original(drawn["draws"][chosen]["test"], data), rtol=1e-6)
    first = dict(load_json(post.with_suffix(".json")), draws=None)  # a file written before component 0 kept draws
    with pytest.raises(ValueError, match="holds no draws"):
        methods.multiswag_pool(data, None, first, [drawn], S, False)
    with pytest.raises(ValueError, match="component 0 is the SWAG run"):
        uci.train_multiswag_component(workdir / "prepared.npz", tmp_path / "c0.pt", component=0, model=MODEL,
                                      train=TRAIN, method_cfg=cfg, seed=2, num_samples=S,
                                      first_path=post.with_suffix(".json"))  # fmt: skip
    with pytest.raises(ValueError, match="swag_member"):
        uci.run_method("mc_dropout", workdir / "prepared.npz", tmp_path / "x",
                       backbone_path=workdir / "backbone/model.pt", model=MODEL, train=TRAIN, method_cfg={},
                       num_samples=S, seed=1, swag_member=tmp_path / "p.pt", multiswag_components=2)  # fmt: skip
    with pytest.raises(ValueError, match="needs multiswag_components"):
        uci.run_method("swag", workdir / "prepared.npz", tmp_path / "x", backbone_path=workdir / "backbone/model.pt",
                       model=MODEL, train=TRAIN, method_cfg={}, num_samples=S, seed=1, swag_member=tmp_path / "p.pt")
    assert not (tmp_path / "x").exists()


def test_multiswag_widens_its_pooled_choice_with_every_component_drawn_as_its_job_would(workdir, tmp_path):
    """A pooled choice on the grid's edge (two rates: both are edges) adds the rate beyond it (``widen``), drawn by
    component 0 from the backbone and by component 1 from its trained network, rebuilt from its file: the rebuilt
    network draws at the grid's candidates exactly what the component's job drew, and at the added one the run's
    rows. The added phases' seconds count as training; a component file without its network is refused."""
    from stochattn.baselines.swag import component_counts
    from stochattn.experiments import methods

    grid = [{"lr": 1e-3}, {"lr": 3e-3}]
    cfg = dict(CFG["multiswag"], grid=grid, widen={"keys": ["lr"], "factor": 3.0, "low": 1e-6, "high": 0.1,
                                                   "max_steps": 1})  # fmt: skip
    post = tmp_path / "swag" / "posterior.pt"
    swag_cfg = {k: v for k, v in cfg.items() if k not in ("components", "widen")}  # SWAG keeps its 2 rates
    uci.run_method("swag", workdir / "prepared.npz", tmp_path / "swag", backbone_path=workdir / "backbone/model.pt",
                   model=MODEL, train=TRAIN, method_cfg=swag_cfg, num_samples=S, seed=1, swag_member=post,
                   multiswag_components=2, progress=False)  # fmt: skip
    comp1 = tmp_path / "1.pt"
    rec1 = uci.train_multiswag_component(workdir / "prepared.npz", comp1, component=1, model=MODEL,
                                         train=dict(TRAIN, max_epochs=30), method_cfg=cfg, seed=2, num_samples=S,
                                         first_path=post.with_suffix(".json"), progress=False)  # fmt: skip
    data = load_prepared(workdir / "prepared.npz")
    loaded = methods.load_multiswag_component(comp1, networks=True)
    n0, n1 = component_counts(S, 2)
    again, _ = methods.multiswag_draws(uci.component_network(data, loaded), loaded["grid"], data, rec1["seed"], n1,
                                       False)  # fmt: skip
    for drawn, kept in zip(again, loaded["draws"]):
        for part in ("val", "test", "cal"):
            assert torch.equal(drawn[part], kept[part])
    meta = uci.run_method("multiswag", workdir / "prepared.npz", tmp_path / "multiswag", components=[post, comp1],
                          backbone_path=workdir / "backbone/model.pt", model=MODEL, train=TRAIN, method_cfg=cfg,
                          num_samples=S, seed=3, progress=False)  # fmt: skip
    sel = meta["selection"]
    assert sel["grid"][:2] == load_json(post.with_suffix(".json"))["selection"]["grid"]
    assert len(sel["widened"]) == 1 and len(sel["val_crps"]) == 3 and sel["widened"][0]["lr"] in (1e-3 / 3, 9e-3)
    rec0 = load_json(post.with_suffix(".json"))
    assert meta["seconds"]["train"] == pytest.approx(rec0["seconds"] + rec0["draw_seconds"] + rec1["seconds"]
                                                     + sel["widened_seconds"])  # fmt: skip
    added, networks = methods.multiswag_draws(uci.component_network(data, loaded), sel["widened"], data, rec1["seed"],
                                              n1, False)  # fmt: skip
    # the audit's networks at the added rate (benchmarks/uci_bias.py): the same phase, repeated from the file
    _, swa_mean = uci.multiswag_component_networks(data, comp1, sel["widened"][0])
    for name, tensor in methods.trainable_state(swa_mean).items():
        assert torch.equal(tensor, networks[0]["swa_mean"][name])
    pooled = load_npz(tmp_path / "multiswag" / "samples.npz")["samples"]
    if sel["chosen"]["index"] == 2:  # component 1's rows at the added rate
        np.testing.assert_allclose(pooled[n0:], methods.to_original(added[0]["test"], data), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="holds no trained network"):
        uci.component_network(data, dict(loaded, start=None))


def test_bad_method_and_missing_backbone(workdir):
    kw = dict(model=MODEL, train=TRAIN, method_cfg={}, num_samples=S, seed=0, progress=False)
    with pytest.raises(ValueError, match="unknown method 'dropout'"):
        uci.run_method("dropout", workdir / "prepared.npz", workdir / "x", **kw)
    with pytest.raises(ValueError, match="needs backbone_path"):
        uci.run_method("sa", workdir / "prepared.npz", workdir / "x", **kw)


def test_evaluate_refuses_nan_predictions(workdir, tmp_path):
    uci.run_method("mc_dropout", workdir / "prepared.npz", tmp_path, backbone_path=workdir / "backbone/model.pt",
                   model=MODEL, train=TRAIN, method_cfg={}, num_samples=S, seed=1, progress=False)
    run = load_npz(tmp_path / "samples.npz")
    run["samples"][0, 0] = np.nan
    save_npz(tmp_path / "samples.npz", **run)
    meta = load_json(tmp_path / "meta.json")  # as a run that drew a NaN would have recorded it
    save_json(tmp_path / "meta.json", dict(meta, sha256=sha256_record(tmp_path / "samples.npz")))
    with pytest.raises(ValueError, match="NaN or inf in 'samples'"):
        evaluate(tmp_path / "samples.npz", tmp_path / "metrics.json", seed=0)
    assert not (tmp_path / "metrics.json").exists()


def test_mc_dropout_grid_reuses_the_backbone_for_its_own_rates_and_chooses_on_validation_crps(workdir, tmp_path):
    """The candidate with the backbone's dropout rates is the shared backbone (the same samples as without a grid);
    another rate trains its own network; every candidate's validation CRPS is recorded and the lowest is kept."""
    kw = dict(backbone_path=workdir / "backbone/model.pt", model=MODEL, train=TRAIN, num_samples=S, seed=1,
              progress=False)  # fmt: skip
    prepared = workdir / "prepared.npz"
    uci.run_method("mc_dropout", prepared, tmp_path / "plain", method_cfg={}, **kw)
    own = uci.run_method("mc_dropout", prepared, tmp_path / "own", method_cfg={"grid": [{}]}, **kw)
    plain, same = load_npz(tmp_path / "plain" / "samples.npz"), load_npz(tmp_path / "own" / "samples.npz")
    assert all(np.array_equal(plain[k], same[k]) for k in plain)
    assert own["selection"]["grid"] == [{"attention_dropout": 0.2, "ffn_dropout": 0.1, "residual_dropout": 0.0}]

    grid = [{}, {"attention_dropout": 0.5, "ffn_dropout": 0.5}]
    meta = uci.run_method("mc_dropout", prepared, tmp_path / "grid", method_cfg={"grid": grid}, **kw)
    rec = meta["selection"]
    assert rec["metric"] == "val_crps" and rec["grid"][1]["ffn_dropout"] == 0.5 and len(rec["val_crps"]) == 2
    assert rec["chosen"]["index"] == int(np.argmin(rec["val_crps"]))
    other = uci.run_method("mc_dropout", prepared, tmp_path / "other", method_cfg={"grid": grid[1:]}, **kw)
    assert other["selection"]["val_crps"][0] == pytest.approx(rec["val_crps"][1])  # the same network, retrained
    trained = load_npz(tmp_path / "other" / "samples.npz")
    assert not np.allclose(trained["point"], plain["point"])  # not the backbone
    with pytest.raises(ValueError, match="unknown keys \\['p'\\]"):
        uci.run_method("mc_dropout", prepared, tmp_path / "bad", method_cfg={"grid": [{"p": 0.1}]}, **kw)


# --------------------------------------------------------------------------------------------------------------
# evaluate: factors come from calibration arrays only
# --------------------------------------------------------------------------------------------------------------
def _synthetic_split(root, spreads, n=50, n_cal=80, s=19, seed=0):
    """samples.npz + meta.json of SA and one other method on one synthetic split (distinct test / cal arrays)."""
    rng = np.random.default_rng(seed)
    mu, mu_cal = rng.normal(0, 3, n), rng.normal(0, 3, n_cal)
    y, y_cal = mu + rng.normal(0, 1, n), mu_cal + rng.normal(0, 1, n_cal)
    for method, spread in spreads.items():
        save_npz(root / method / "samples.npz", y=y, point=mu, samples=mu + spread * rng.normal(0, 1, (s, n)),
                 cal_y=y_cal, cal_point=mu_cal, cal_samples=mu_cal + spread * rng.normal(0, 1, (s, n_cal)),
                 sigma_y=np.float64(3.0))
        save_json(root / method / "meta.json", {"method": method, "seconds": {}, "nu": None,
                                                "sha256": sha256_record(root / method / "samples.npz")})
    return {m: root / m / "samples.npz" for m in spreads}


def test_evaluate_fits_every_factor_on_calibration_arrays_only(tmp_path, monkeypatch):
    from stochattn import scaling
    from stochattn.experiments import evaluate as ev

    paths = _synthetic_split(tmp_path, {"sa": 1.0, "swag": 0.4})
    run, ref = load_npz(paths["swag"]), load_npz(paths["sa"])
    seen = []
    for name in ("fit_temperature", "fit_conformal_scale"):
        real = getattr(scaling, name)

        def spy(samples, point, y, *args, _real=real, _name=name, **kwargs):
            seen.append((_name, samples, point, y))
            return _real(samples, point, y, *args, **kwargs)

        monkeypatch.setattr(scaling, name, spy)
    real_cov = ev.calibration_coverage
    covs = []
    monkeypatch.setattr(ev, "calibration_coverage", lambda r, levels: covs.append(r) or real_cov(r, levels))
    out = ev.evaluate(paths["swag"], tmp_path / "m.json", seed=0, reference_path=paths["sa"])
    assert [x[0] for x in seen] == ["fit_temperature"] + ["fit_conformal_scale"] * 4
    for _, samples, point, y in seen:  # exactly the calibration arrays, never the test ones
        np.testing.assert_array_equal(samples, run["cal_samples"])
        np.testing.assert_array_equal(point, run["cal_point"])
        np.testing.assert_array_equal(y, run["cal_y"])
        assert samples.shape != run["samples"].shape
    assert len(covs) == 1 and np.array_equal(covs[0]["cal_samples"], ref["cal_samples"])  # SA's target: its cal part
    # and the factors do not move when every test array (of both runs) changes
    for p in paths.values():
        d = load_npz(p)
        d["y"], d["samples"], d["point"] = d["y"] + 5.0, d["samples"][:, ::-1] * 3.0, d["point"] - 1.0
        save_npz(p, **d)
        save_json(p.with_name("meta.json"), dict(load_json(p.with_name("meta.json")), sha256=sha256_record(p)))
    again = ev.evaluate(paths["swag"], tmp_path / "m2.json", seed=0, reference_path=paths["sa"])
    assert again["temperature"] == out["temperature"]
    for key in ("25", "50", "75", "95"):
        for field in ("factor", "target_coverage", "cal_coverage"):
            assert again["matched"][f"{field}_{key}"] == out["matched"][f"{field}_{key}"]
    assert again["matched"]["width_95"] != out["matched"]["width_95"]


def test_evaluate_refuses_a_reference_from_another_split(tmp_path):
    a = _synthetic_split(tmp_path / "a", {"sa": 1.0, "swag": 0.4}, seed=1)
    b = _synthetic_split(tmp_path / "b", {"sa": 1.0}, seed=2)
    with pytest.raises(ValueError, match="not the same split"):
        evaluate(a["swag"], tmp_path / "m.json", seed=0, reference_path=b["sa"])
    out = evaluate(a["swag"], tmp_path / "m.json", seed=0)  # no reference: no matched block
    assert "matched" not in out and out["temperature"] > 0


MC_WIDEN = {"keys": ["attention_dropout", "ffn_dropout"], "factor": 2.0, "low": 0.005, "high": 0.9, "max_steps": 2}


@pytest.mark.parametrize("method, cfg", [
    ("ivon", CFG["ivon"]), ("hsa", {"grid": [{"tau1": 1.0}, {"tau1": 4.0}]}),
    # the backbone's own rates and a trained network; both are edges of the line, so a widening always adds one
    ("mc_dropout", {"grid": [{}, {"attention_dropout": 0.5, "ffn_dropout": 0.5}], "widen": MC_WIDEN}),
])  # fmt: skip
def test_grid_fitted_one_candidate_a_job_gives_the_single_job_run(workdir, tmp_path, method, cfg):
    """IVON's, HSA's and MC Dropout's grids fitted one candidate at a time (the workflow's jobs, here in reverse
    order: each candidate alone; MC Dropout's widening in the choosing job), then chosen: the same validation
    scores, choice, samples and values as run_method's single job; only the run times differ."""
    kw = dict(model=MODEL, train=TRAIN, method_cfg=cfg, num_samples=S, seed=4, progress=False)
    if method == "mc_dropout":
        kw["backbone_path"] = workdir / "backbone/model.pt"
    prepared = workdir / "prepared.npz"
    one = uci.run_method(method, prepared, tmp_path / "one", **kw)
    paths = [tmp_path / "candidates" / f"{k}.pt" for k in range(2)]
    records = [uci.fit_candidate(method, prepared, paths[k], index=k, **kw) for k in (1, 0)][::-1]
    assert [r["index"] for r in records] == [0, 1] and all(r["grid_size"] == 2 for r in records)
    assert [r["val_crps"] for r in records] == one["selection"]["val_crps"][:2]
    split = uci.choose_candidate(method, prepared, tmp_path / "split", paths, **kw)
    a, b = load_npz(tmp_path / "one" / "samples.npz"), load_npz(tmp_path / "split" / "samples.npz")
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert {k: v for k, v in split["selection"].items() if k != "seconds"} == \
        {k: v for k, v in one["selection"].items() if k != "seconds"}  # fmt: skip
    widened = len(one["selection"].get("widened", []))
    assert 1 <= widened <= 2 if method == "mc_dropout" else widened == 0  # at most max_steps
    assert len(split["selection"]["seconds"]) == 2 + widened
    assert split["seconds"]["train"] == pytest.approx(sum(split["selection"]["seconds"]))
    assert split["seconds"]["backbone_train"] == one["seconds"]["backbone_train"]
    same = {"seconds", "packages", "provenance", "device", "sha256", "selection"}
    assert {k: v for k, v in split.items() if k not in same} == {k: v for k, v in one.items() if k not in same}
    with pytest.raises(ValueError, match="not the grid"):
        uci.choose_candidate(method, prepared, tmp_path / "bad", paths[::-1], **kw)
    with pytest.raises(ValueError, match="candidate 2 of a grid of 2"):
        uci.fit_candidate(method, prepared, tmp_path / "c2.pt", index=2, **kw)
    assert not (tmp_path / "bad").exists() and not (tmp_path / "c2.pt").exists()


def test_candidate_jobs_only_for_searches_and_the_backbone_only_where_a_candidate_is_it(workdir, tmp_path):
    kw = dict(model=MODEL, train=TRAIN, num_samples=S, seed=4, progress=False)
    with pytest.raises(ValueError, match="has no validation search run one candidate a job"):
        uci.fit_candidate("swag", workdir / "prepared.npz", tmp_path / "c.pt", index=0, method_cfg={}, **kw)
    cfg = {"grid": [{"attention_dropout": 0.5, "ffn_dropout": 0.5}, {}]}
    assert [grids.needs_backbone("mc_dropout", MODEL, cfg, k) for k in (0, 1, 2)] == [False, True, False]
    assert not grids.needs_backbone("ivon", MODEL, CFG["ivon"], 0)
    with pytest.raises(ValueError, match="needs backbone_path"):  # the backbone's candidate, without it
        uci.fit_candidate("mc_dropout", workdir / "prepared.npz", tmp_path / "c.pt", index=1, method_cfg=cfg, **kw)
    with pytest.raises(ValueError, match="needs backbone_path"):
        uci.choose_candidate("mc_dropout", workdir / "prepared.npz", tmp_path / "run", [], method_cfg=cfg, **kw)
    assert not (tmp_path / "c.pt").exists() and not (tmp_path / "run").exists()


def test_widening_bound_counts_the_steps_to_the_bounds():
    """MC Dropout's rates reach their bounds in one step from 0.01 and 0.4 / 0.3; SWAG's SGD line (x / 3 within
    [1e-6, 0.1]) allows max_steps; a line at both bounds, none; the grid builder's rates are the workflow's."""
    import inspect

    from stochattn.backbones.ft_transformer import build_ft_transformer

    mc = {"grid": [{"attention_dropout": 0.01, "ffn_dropout": 0.01}, {},
                   {"attention_dropout": 0.4, "ffn_dropout": 0.3}],
          "widen": {"keys": ["attention_dropout", "ffn_dropout"], "factor": 2.0, "low": 0.005, "high": 0.5}}
    swag = {"grid": [{"lr": 1e-4}, {"lr": 1e-3}, {"optimizer": "adamw", "lr": 1e-2}],
            "widen": {"keys": ["lr"], "factor": 3.0, "low": 1e-6, "high": 0.1, "max_steps": 3}}  # fmt: skip
    assert grids.widening_bound("mc_dropout", MODEL, mc) == 1 and grids.widening_bound("mc_dropout", MODEL, {}) == 0
    assert grids.widening_bound("mc_dropout", MODEL, dict(mc, widen=dict(mc["widen"], low=0.001))) == 3
    assert grids.widening_bound("swag", MODEL, swag) == 3
    assert grids.widening_bound("multiswag", MODEL, dict(swag, grid=[{"lr": 1e-6}, {"lr": 0.1}])) == 0
    defaults = inspect.signature(build_ft_transformer).parameters
    assert grids.FT_TRANSFORMER_DROPOUT == {k: defaults[k].default for k in grids.MC_DROPOUT_KEYS}
