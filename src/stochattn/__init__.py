"""stochattn: Stochastic Attention (SA) for calibrated predictive ensembles from frozen transformers.

Modules (one concept each):
    attention   exact Multinomial(nu, pi)/nu attention weights and a drop-in for scaled_dot_product_attention
    patch       enable SA on any model (global, per-layer or per-head nu), predictive sampling
    calibrate   target scale, EvalStats and the BO-under-uncertainty calibration of nu (paper App. A)
    metrics     PIT, W1, coverage/width, CRPS, Energy Score, accuracy and latitude-weighted scores
    scaling     temperature and conformal post-hoc scaling of ensembles
"""

__version__ = "0.1.0"
