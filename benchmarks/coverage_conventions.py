"""Coverage and CRPS conventions on simulated perfectly calibrated ensembles (issue 50, items 3 and 4).

    python benchmarks/coverage_conventions.py [--cases 200000] [--seed 0]

For S = 10, 19, 100 members, truth and members iid N(0, 1) (a perfectly calibrated ensemble), per S:

* the library's nominal 95 % interval (``metrics.central_interval``, interpolated quantiles, the paper's statistic):
  its simulated coverage with a binomial standard error, beside ``metrics.calibrated_coverage(S, 0.95)``;
* the order-statistic interval (``method="order"``): its simulated coverage beside its exact level
  ``(S + 1 - 2k)/(S + 1)``, or the largest reachable level where 95 % is out of reach;
* the CRPS (on the first 20 000 cases): the ensemble (all-pairs) estimator over the fair one (expected ratio 1 + 1/S),
  and the temperature
  ``fit_temperature(objective="crps")`` fits with either estimator (expected 0.90 and 1.00 at S = 19).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from stochattn import metrics
from stochattn.scaling import fit_temperature


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n = args.cases
    print(f"perfectly calibrated Gaussian ensembles, {n} cases per S, nominal 95 %")
    print("| S | interpolated (simulated +- SE) | calibrated_coverage | order statistics (simulated / exact) | "
          "CRPS ensemble / fair | T crps fair | T crps ensemble |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in (10, 19, 100):
        rng = np.random.default_rng([args.seed, s])
        x, y = rng.normal(size=(s, n)), rng.normal(size=n)
        cov = metrics.coverage_and_width(x, y, (0.95,))[0.95]["coverage"]
        se = math.sqrt(cov * (1 - cov) / n)
        k, achieved = metrics.order_statistic_rank(s, 0.95)
        if k >= 1:
            order = metrics.coverage_and_width(x, y, (0.95,), method="order")[0.95]["coverage"]
            order_text = f"{order:.4f} / {achieved:.4f} (k = {k})"
        else:
            order_text = f"not reachable (max {(s - 1) / (s + 1):.3f})"
        dec = metrics.crps_decomposition(x[:, :20_000], y[:20_000])  # (scoringrules' fair kernel is O(S^2) memory)
        fair = dec["error"] - dec["spread"] * s / (s - 1)  # = metrics.crps(..., estimator="fair")
        ratio = float(dec["crps"].mean() / fair.mean())
        m = min(n, 20_000)  # the temperature fits: point 0 (the law's centre), members and truth as drawn
        t_fair = fit_temperature(x[:, :m], np.zeros(m), y[:m], objective="crps")
        t_ens = fit_temperature(x[:, :m], np.zeros(m), y[:m], objective="crps", crps_estimator="ensemble")
        print(f"| {s} | {cov:.4f} +- {se:.4f} | {metrics.calibrated_coverage(s, 0.95):.4f} | {order_text} | "
              f"{ratio:.4f} (1 + 1/S = {1 + 1 / s:.4f}) | {t_fair:.3f} | {t_ens:.3f} |")


if __name__ == "__main__":
    main()
