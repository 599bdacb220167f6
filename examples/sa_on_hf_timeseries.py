"""Stochastic attention on a Hugging Face time-series transformer: train, calibrate nu in one call, sample, score.

    pip install ".[hf]"    # in a checkout (README "Install")
    python examples/sa_on_hf_timeseries.py

A PatchTST forecaster (transformers' PatchTSTForPrediction, built from a config: bring your own checkpoint with
from_pretrained) is fitted on a noisy seasonal series, then stochattn patches every attention module of it with no
adapter code (eager or sdpa alike) and calibrates nu on held-out windows. ``forward=`` picks the forecast out of the
model's output object; y and the forecasts are (n, horizon, channels).
"""

import numpy as np
import torch
from transformers import PatchTSTConfig, PatchTSTForPrediction

import stochattn
from stochattn import metrics
from stochattn.patch import StochasticAttention

torch.manual_seed(0)
CONTEXT, HORIZON = 64, 16
t = np.arange(6000)
noise = 0.3 * np.random.default_rng(0).standard_normal(t.size)
series = np.sin(2 * np.pi * t / 24) + 0.5 * np.sin(2 * np.pi * t / 168) + noise
starts = np.arange(0, t.size - CONTEXT - HORIZON, 8)
windows = np.stack([series[s:s + CONTEXT + HORIZON] for s in starts]).astype(np.float32)[..., None]  # (n, 80, 1)
x, y = torch.from_numpy(windows[:, :CONTEXT]), torch.from_numpy(windows[:, CONTEXT:])
train, cal, test = np.split(np.arange(len(x)), [int(0.6 * len(x)), int(0.8 * len(x))])

config = PatchTSTConfig(num_input_channels=1, context_length=CONTEXT, prediction_length=HORIZON, patch_length=8,
                        patch_stride=8, d_model=32, num_attention_heads=4, num_hidden_layers=2, ffn_dim=64,
                        attn_implementation="sdpa")  # fmt: skip
model = PatchTSTForPrediction(config)
optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(300):  # 1. an ordinary deterministic forecaster
    batch = torch.from_numpy(np.random.default_rng(step).choice(train, 64))
    loss = torch.nn.functional.mse_loss(model(past_values=x[batch]).prediction_outputs, y[batch])
    optimiser.zero_grad()
    loss.backward()
    optimiser.step()
model.eval()


def forecast(inputs):
    return model(past_values=inputs).prediction_outputs  # (b, horizon, channels)


# 2. calibrate nu on held-out windows: both operating points and the BO record
sampler = stochattn.calibrate_sampler(model, x[cal], y[cal], forward=forecast, batch_size=64, num_batches=2,
                                      num_passes=8, budget=8, seed=0)  # fmt: skip
print(sampler)
with StochasticAttention(model, nu=1) as sa:  # what SA reaches in this model (and how)
    print(f"{len(sa.patched)} attention modules patched, {len(sa.unpatched)} left out:",
          sorted(set(sa.patched.values())))

# 3. predictive ensembles on test windows, scored
with torch.no_grad():
    point = forecast(x[test]).numpy()
samples = sampler.sample(x[test], 64).numpy()  # (64, n_test, horizon, 1) at the scale-matching point
scores, pit = metrics.summarize(samples, point, y[test].numpy(), rng=0)
print(f"scale_match nu = {sampler.nu_at('scale_match')}: test CRPS {scores['crps']:.3f}  PIT W1 {scores['w1']:.3f}  "
      f"95% interval coverage {scores['coverage_95']:.3f}  (PIT values: {pit.size})")
