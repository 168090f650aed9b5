"""Adam and global-norm gradient clipping for the lab's small numpy training loops (indexers, forecast heads)."""
from __future__ import annotations

import numpy as np


def clip_grad_norm(grads: dict, max_norm: float) -> float:
    """Scale all gradients in place so their global L2 norm is at most ``max_norm``; return the norm before clipping."""
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm}")
    total = float(np.sqrt(sum(float(np.sum(g * g)) for g in grads.values())))
    if not np.isfinite(total):
        raise ValueError(f"grads contain NaN or inf (global norm {total})")
    if total > max_norm:
        for g in grads.values():
            g *= max_norm / total
    return total


class Adam:
    """Adam (Kingma & Ba) over a dict of numpy parameters, updated in place.

    params: {name: ndarray}; step(grads) takes {name: ndarray} with the same shapes.
    """

    def __init__(self, params: dict, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        self.params, self.lr, self.betas, self.eps, self.wd = params, lr, betas, eps, weight_decay
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: dict) -> None:
        if set(grads) != set(self.params):
            raise ValueError(f"grads must have keys {sorted(self.params)}, got {sorted(grads)}")
        self.t += 1
        b1, b2 = self.betas
        for k, p in self.params.items():
            g = grads[k]
            if g.shape != p.shape:
                raise ValueError(f"grads[{k!r}] must have shape {p.shape}, got {g.shape}")
            if self.wd:
                g = g + self.wd * p
            self.m[k] = b1 * self.m[k] + (1 - b1) * g
            self.v[k] = b2 * self.v[k] + (1 - b2) * g * g
            mhat = self.m[k] / (1 - b1 ** self.t)
            vhat = self.v[k] / (1 - b2 ** self.t)
            p -= self.lr * mhat / (np.sqrt(vhat) + self.eps)
