"""Stochastic attention on a plain PyTorch transformer (torch.nn.TransformerEncoder): train, calibrate, sample.

    pip install .    # in a checkout (README "Install")
    python examples/sa_on_torch.py

The encoder's nn.MultiheadAttention layers are patched as they are (the fast path is switched off while SA is on and
back on after). The task: the sum of a random subset of a sequence's tokens, marked by a flag feature, plus noise.
"""

import numpy as np
import torch
from torch import nn

import stochattn
from stochattn import metrics

torch.manual_seed(0)
n, length = 3000, 12
rng = np.random.default_rng(0)
values, flags = rng.standard_normal((n, length)), rng.integers(0, 2, (n, length))
x = torch.from_numpy(np.stack([values, flags], -1).astype(np.float32))  # (n, 12, 2)
y = torch.from_numpy(((values * flags).sum(1) / 2 + 0.2 * rng.standard_normal(n)).astype(np.float32))  # (n,)
train, cal, test = np.split(np.arange(n), [2000, 2500])


class Regressor(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.embed = nn.Linear(2, d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(d, 1)

    def forward(self, tokens):  # (b, length, 2) -> (b,)
        return self.head(self.encoder(self.embed(tokens)).mean(1)).squeeze(-1)


model = Regressor()
optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
for _ in range(300):  # 1. an ordinary deterministic model
    batch = torch.from_numpy(rng.choice(train, 128))
    loss = nn.functional.mse_loss(model(x[batch]), y[batch])
    optimiser.zero_grad()
    loss.backward()
    optimiser.step()
model.eval()

sampler = stochattn.calibrate_sampler(model, x[cal], y[cal], batch_size=250, num_batches=2, num_passes=8, budget=8,
                                      seed=0)  # 2. nu in one call  # fmt: skip
print(sampler)
with torch.no_grad():
    point = model(x[test]).numpy()
for op in ("loss_argmin", "scale_match"):  # 3. predictive ensembles at each operating point
    samples = sampler.sample(x[test], 64, operating_point=op).numpy()  # (64, n_test)
    scores, _ = metrics.summarize(samples, point, y[test].numpy(), rng=0)
    print(f"{op:12s} nu = {sampler.nu_at(op):4d}: test CRPS {scores['crps']:.3f}  PIT W1 {scores['w1']:.3f}  "
          f"95% interval coverage {scores['coverage_95']:.3f}")
