"""Adam and global-norm gradient clipping for the lab's small numpy training loops (indexers, forecast heads).

Parameters and gradients are dicts {name: float ndarray} updated in place; bad hyper-parameters and non-finite
gradients raise ``ValueError`` naming the argument (one ``isfinite`` pass per array and step: cheap next to the
forward and backward passes that produced the gradients).
"""
from __future__ import annotations

import math

import numpy as np

from hybrid_lab.core import checks


def _arrays(name: str, d, finite: bool = True) -> dict:
    """A non-empty dict {key: float ndarray} (ndarrays: they are updated in place), finite unless told."""
    if not isinstance(d, dict) or not d:
        raise ValueError(f"{name} must be a non-empty dict {{name: float array}}, got {d!r:.80}")
    for key, a in d.items():
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
            raise ValueError(f"{name}[{key!r}] must be a float numpy array (updated in place), got "
                             f"{type(a).__name__}" + (f" of dtype {a.dtype}" if isinstance(a, np.ndarray) else ""))
        if finite and not np.isfinite(a).all():
            raise ValueError(f"{name}[{key!r}] must be finite, got NaN or inf")
    return d


def clip_grad_norm(grads: dict, max_norm: float) -> float:
    """Scale all gradients in place so their global L2 norm is at most ``max_norm``; return the norm before clipping.

    grads: a non-empty dict of float arrays; max_norm: a finite number > 0. NaN or inf in a gradient raises."""
    max_norm = checks.positive_number("max_norm", max_norm)
    _arrays("grads", grads, finite=False)          # the global norm below is the finiteness check
    # math.fsum, not sum(): Python 3.12 made the built-in sum of floats compensated (Neumaier), so sum() gives a
    # different last bit on 3.11 and 3.12, and a training run that clips diverges between them (notebook 04
    # differed on a Python 3.12 host from step 13 on). fsum is exactly rounded: the same bits everywhere.
    total = float(np.sqrt(math.fsum(float(np.sum(g * g)) for g in grads.values())))
    if not np.isfinite(total):
        raise ValueError(f"grads contain NaN or inf (global norm {total})")
    if total > max_norm:
        for g in grads.values():
            g *= max_norm / total
    return total


class Adam:
    """Adam (Kingma & Ba) over a dict of numpy parameters, updated in place.

    params: {name: finite float ndarray}; lr > 0; betas: two numbers in [0, 1); eps > 0; weight_decay >= 0 (all
    finite). step(grads) takes {name: finite real ndarray} with the same keys and shapes.
    """

    def __init__(self, params: dict, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        _arrays("params", params)
        checks.positive_number("lr", lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2) in [0, 1), got {betas!r}")
        for i, b in enumerate(betas):
            if not 0 <= checks.finite_number(f"betas[{i}]", b) < 1:
                raise ValueError(f"betas must lie in [0, 1), got {tuple(betas)}")
        checks.positive_number("eps", eps)
        checks.nonneg_number("weight_decay", weight_decay)
        self.params, self.lr, self.betas, self.eps, self.wd = params, lr, tuple(betas), eps, weight_decay
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: dict) -> None:
        if not isinstance(grads, dict) or set(grads) != set(self.params):
            raise ValueError(f"grads must be a dict with keys {sorted(self.params)}, got "
                             f"{sorted(grads) if isinstance(grads, dict) else type(grads).__name__}")
        for k, p in self.params.items():           # check every gradient before touching any state
            g = grads[k]
            if not isinstance(g, np.ndarray) or g.dtype.kind not in "fiu" or g.shape != p.shape:
                raise ValueError(f"grads[{k!r}] must be a real array of shape {p.shape}, got "
                                 f"{getattr(g, 'shape', type(g).__name__)} {getattr(g, 'dtype', '')}".rstrip())
            if not np.isfinite(g).all():
                raise ValueError(f"grads[{k!r}] must be finite, got NaN or inf (a diverged step)")
        self.t += 1
        b1, b2 = self.betas
        for k, p in self.params.items():
            g = grads[k]
            if self.wd:
                g = g + self.wd * p
            self.m[k] = b1 * self.m[k] + (1 - b1) * g
            self.v[k] = b2 * self.v[k] + (1 - b2) * g * g
            mhat = self.m[k] / (1 - b1 ** self.t)
            vhat = self.v[k] / (1 - b2 ** self.t)
            p -= self.lr * mhat / (np.sqrt(vhat) + self.eps)
