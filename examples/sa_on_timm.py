"""Stochastic attention on a timm Vision Transformer: train, calibrate, sample.

    pip install ".[timm]"    # in a checkout; torch and torchvision first, from the same wheel index (README "Install")
    python examples/sa_on_timm.py

timm's Attention calls F.scaled_dot_product_attention when ``fused_attn`` is on and forms the softmax itself when
it is off: stochattn runs both through its SDPA path, with no adapter code. The task: regress the mean brightness of
a random 16 x 16 image's upper-left quadrant (noisy).
"""

import numpy as np
import timm
import torch

import stochattn
from stochattn import metrics, scaling

torch.manual_seed(0)
n = 1500
images = torch.rand(n, 3, 16, 16)
y = images[:, :, :8, :8].mean((1, 2, 3)) * 4 + 0.05 * torch.randn(n)  # (n,)
train, cal, test = np.split(np.arange(n), [1000, 1250])

model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=16, patch_size=4, num_classes=1,
                          embed_dim=48, depth=2, num_heads=3)  # fmt: skip
optimiser = torch.optim.AdamW(model.parameters(), lr=2e-3)
rng = np.random.default_rng(0)
for _ in range(200):  # 1. an ordinary deterministic model
    batch = torch.from_numpy(rng.choice(train, 64))
    loss = torch.nn.functional.mse_loss(model(images[batch]).squeeze(-1), y[batch])
    optimiser.zero_grad()
    loss.backward()
    optimiser.step()
model.eval()


def predict(x):
    return model(x).squeeze(-1)  # (b,)


sampler = stochattn.calibrate_sampler(model, images[cal], y[cal], forward=predict, batch_size=125, num_batches=2,
                                      num_passes=8, budget=8, seed=0)  # 2. nu in one call  # fmt: skip
print(sampler)
with torch.no_grad():
    point, point_cal = predict(images[test]).numpy(), predict(images[cal]).numpy()
samples = sampler.sample(images[test], 64).numpy()  # 3. (64, n_test) at the scale-matching point
# where SA's largest spread (nu = 1) stays below the held-out residuals' (sampler.at_boundary, as here: the CLS
# token of a small ViT moves little when its attention is resampled), widen the ensemble around the point by one
# factor fitted on the calibration split (split conformal), then applied unchanged to the test split
factor = scaling.fit_conformal_scale(sampler.sample(images[cal], 64).numpy(), point_cal, y[cal].numpy())
scaled = scaling.apply_scale(samples, point, factor)
for label, ensemble in (("SA", samples), (f"SA x {factor:.1f} (conformal)", scaled)):
    scores, _ = metrics.summarize(ensemble, point, y[test].numpy(), rng=0)
    print(f"{label:24s} nu = {sampler.nu_at('scale_match')}: test CRPS {scores['crps']:.3f}  "
          f"PIT W1 {scores['w1']:.3f}  95% interval coverage {scores['coverage_95']:.3f}")
