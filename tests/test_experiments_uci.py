"""The UCI experiment stages on the small sinusoid data set: every method writes the contracted files."""

import numpy as np
import pytest

from stochattn.data.uci import load_prepared
from stochattn.experiments import uci
from stochattn.io import load_json, load_npz, save_npz

MODEL = dict(n_blocks=1, d_block=16, attention_n_heads=2)
TRAIN = dict(max_epochs=3, patience=2, lr=1e-3, batch_size=64)
CFG = {
    "sa": dict(batch_size=64, num_batches=1, num_passes=4, nu_min=1, nu_max=256, budget=4, initial_design=3,
               operating_point="surrogate"),
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


@pytest.mark.parametrize("method", uci.METHODS)
def test_method_writes_contracted_samples_meta_and_metrics(workdir, method):
    out = workdir / method
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
        assert meta["nu"] in (cal["nu_surrogate"], cal["nu_loss_argmin"]) and len(cal["history"]) == 4
    metrics = uci.evaluate(out / "samples.npz", out / "metrics.json", seed=0, dataset="sinusoid", split=0)
    assert len(metrics["pit_native"]) == n and 0 <= metrics["native"]["w1"] <= 0.5
    assert metrics["native"]["nrmse"] == pytest.approx(metrics["native"]["rmse"] / float(run["sigma_y"]))
    if method == "sa":
        assert metrics["scaled"] == metrics["native"] and metrics["temperature"] == 1.0
    else:
        assert metrics["temperature"] > 0


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
    with pytest.raises(ValueError, match="NaN or inf in 'samples'"):
        uci.evaluate(tmp_path / "samples.npz", tmp_path / "metrics.json", seed=0)
    assert not (tmp_path / "metrics.json").exists()
