"""Tests for stochattn.training (the shared supervised loop: early stopping, determinism, hooks, groups)."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from stochattn.backbones.ft_transformer import build_ft_transformer, predict
from stochattn.training import fit_regressor, parameter_groups, standard_step


pytestmark = pytest.mark.usefixtures("one_thread")


def data(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(n, generator=g)
    return x[: n // 2], y[: n // 2], x[n // 2 :], y[n // 2 :]


def tiny(seed=0):
    return build_ft_transformer(3, n_blocks=1, d_block=8, attention_n_heads=2, seed=seed)


def test_early_stopping_restores_best_epoch():
    xt, yt, xv, yv = data()
    model = tiny()
    # A large lr makes the validation curve noisy, so the last epoch is rarely the best one.
    res = fit_regressor(model, xt, yt, xv, yv, seed=0, lr=3e-2, batch_size=16, max_epochs=40, patience=4,
                        progress=False)
    hist = res.history["val_rmse"]
    assert res.best_epoch == int(np.argmin(hist)) + 1
    assert res.best_val_rmse == pytest.approx(min(hist), abs=0)
    rmse = float((predict(model, xv) - yv).double().pow(2).mean().sqrt())
    assert rmse == pytest.approx(res.best_val_rmse, abs=1e-6)
    assert res.best_epoch < res.epochs_run  # the restore was exercised, not trivially the last epoch
    if res.stopped_early:
        assert res.epochs_run == res.best_epoch + 4
    assert len(res.history["train_loss"]) == res.epochs_run
    assert res.seconds > 0


def test_same_seed_gives_identical_weights_and_rng_untouched():
    xt, yt, xv, yv = data()
    states = []
    rng = torch.get_rng_state()
    for fit_seed in (5, 5, 6):
        model = tiny(seed=1)
        fit_regressor(model, xt, yt, xv, yv, seed=fit_seed, lr=1e-3, batch_size=16, max_epochs=3,
                      progress=False)
        states.append(model.state_dict())
    assert torch.equal(rng, torch.get_rng_state())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert not all(torch.equal(states[0][k], states[2][k]) for k in states[0])


def test_without_validation_runs_all_epochs_and_calls_hooks():
    xt, yt, _, _ = data()
    model = tiny()
    epochs, steps = [], []

    def step(model, optimizer, x, y, loss_fn):
        steps.append(len(x))
        return standard_step(model, optimizer, x, y, loss_fn)

    def make_sgd(m):
        return torch.optim.SGD(m.parameters(), lr=1e-3)

    res = fit_regressor(model, xt, yt, seed=0, optimizer=make_sgd, batch_size=30, max_epochs=3,
                        step_fn=step, on_epoch_end=lambda e, m: epochs.append(e), progress=False)
    assert epochs == [1, 2, 3] and res.epochs_run == 3 and res.best_epoch == 3
    assert all(math.isnan(v) for v in res.history["val_rmse"])
    assert steps == [30, 30, 30, 10] * 3  # every row once per epoch, last batch partial
    assert isinstance(res.optimizer, torch.optim.SGD)


def test_parameter_groups_follow_rtdl_split_and_skip_frozen():
    model = tiny()
    model.ft.cls_embedding.weight.requires_grad_(False)
    groups = parameter_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decay = [names[id(p)] for p in groups[0]["params"]]
    zero = [names[id(p)] for p in groups[1]["params"]]
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    # rtdl exempts the blocks' norms only; the output head's LayerNorm weight is decayed (rtdl's own choice).
    block_weights = [n for n in decay if n != "ft.backbone.output.normalization.weight"]
    assert all(n.endswith(".weight") and "normalization" not in n and "embedding" not in n for n in block_weights)
    assert "ft.cont_embeddings.weight" in zero and "ft.backbone.blocks.0.ffn_normalization.weight" in zero
    assert "ft.cls_embedding.weight" not in zero + decay
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert sorted(decay + zero) == sorted(trainable)
    order = [n for n in trainable if n in set(zero)]
    assert zero == order  # deterministic, registration order
    only = parameter_groups(model, 0.1, param_names=["ft.backbone.output.linear.weight"])
    assert len(only) == 1 and only[0]["params"][0] is model.ft.backbone.output.linear.weight
    with pytest.raises(ValueError, match="param_names"):
        parameter_groups(model, 0.1, param_names=["nope"])


def test_generic_module_and_numpy_inputs():
    xt, yt, xv, yv = data()
    model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0))
    res = fit_regressor(model, xt.numpy(), yt.numpy(), xv.numpy(), yv.numpy(), seed=0, lr=1e-2,
                        max_epochs=2, progress=False)
    assert res.epochs_run == 2


def test_bad_inputs_raise():
    xt, yt, xv, yv = data()
    model = tiny()
    with pytest.raises(ValueError, match="x_val"):
        fit_regressor(model, xt, yt, xv, None, seed=0, progress=False)
    with pytest.raises(ValueError, match="x_train, y_train"):
        fit_regressor(model, xt, yt[:-1], seed=0, progress=False)
    with pytest.raises(ValueError, match="optimizer"):
        fit_regressor(model, xt, yt, seed=0, optimizer="adam", progress=False)
    with pytest.raises(ValueError, match="x_train"):
        fit_regressor(model, xt[:, 0], yt, seed=0, progress=False)
    with pytest.raises(TypeError, match="seed"):
        fit_regressor(model, xt, yt, seed=None, progress=False)


def test_non_finite_loss_raises():
    xt, yt, xv, yv = data()

    def nan_loss(pred, y):
        return (pred - y).pow(2).mean() * float("nan")

    with pytest.raises(FloatingPointError):
        fit_regressor(tiny(), xt, yt, xv, yv, seed=0, loss=nan_loss, max_epochs=2, progress=False)
