"""Stochastic attention on your own transformer in ~30 lines: train, calibrate nu, sample, score.

    python examples/quickstart.py

A 1-D noisy sinusoid and a small FT-Transformer stand in for "your model"; any model whose attention modules are
registered in ``stochattn.patch`` (rtdl FT-Transformer, torch.nn.MultiheadAttention, ...) works the same way.
"""

import numpy as np
import torch

from stochattn import metrics
from stochattn.backbones.ft_transformer import build_ft_transformer
from stochattn.calibrate import IntegerDomain, SASampler, bo_calibrate, eval_stats, target_scale
from stochattn.experiments.uci import sinusoid_features
from stochattn.training import fit_regressor, predict

torch.set_num_threads(2)
rng = np.random.default_rng(0)
u = rng.uniform(-3, 3, size=1200)
y = (np.sin(2 * u) + 0.5 * u + 0.3 * rng.standard_normal(1200)).astype(np.float32)
x = sinusoid_features(u).astype(np.float32)  # (n, 4): one attention token per feature, plus [CLS]
train, val, cal, test = np.split(np.arange(1200), [600, 800, 1000])

# 1. an ordinary deterministic model
model = build_ft_transformer(4, n_blocks=1, d_block=64, seed=0)
fit_regressor(model, x[train], y[train], x[val], y[val], seed=0, lr=1e-3, max_epochs=200, progress=False)

# 2. calibrate nu on held-out data (paper Algorithms 2-3)
x_cal, y_cal = torch.from_numpy(x[cal]), torch.from_numpy(y[cal])
point_cal = predict(model, x_cal)
gen = torch.Generator().manual_seed(0)
with SASampler(model, generator=gen) as sampler:
    result = bo_calibrate(
        lambda nu: eval_stats(nu, sampler, x_cal, y_cal, point_cal, batch_size=200, num_batches=2, num_passes=16,
                              generator=gen),
        target_scale(y_cal, point_cal), domain=IntegerDomain(1, 4096), budget=12, seed=0,
    )
    # 3. predictive ensemble on test data at Algorithm 2's nu (result.nu_surrogate: the scale-matching point)
    samples = sampler(result.nu, torch.from_numpy(x[test]), 200).numpy()  # (200, n_test)

point = predict(model, x[test]).numpy()
scores, _ = metrics.summarize(samples, point, y[test], rng=0)
print(f"nu* = {result.nu} (surrogate {result.nu_surrogate_continuous:.1f}, loss arg-min {result.nu_loss_argmin})")
print(f"test RMSE {scores['rmse']:.3f}  CRPS {scores['crps']:.3f}  PIT W1 {scores['w1']:.3f}  "
      f"95% coverage {scores['coverage_95']:.3f}  mean 95% width {scores['width_95']:.3f}")
