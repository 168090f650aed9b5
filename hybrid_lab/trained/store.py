"""Where the trained models live: fp16 weights (``.npz``) + a JSON meta per checkpoint, and their aggregate.

``CHECKPOINTS/EXPERIMENT/MODEL/seedK.npz`` + ``.json`` (config, seed, command, machine, curves, final accuracies).
Used by the training (``train.py``), the DSA experiment (``dsa.py``) and the notebooks; imports no torch.
"""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.trained import families as fam

__all__ = ["CHECKPOINTS", "RESULTS", "save_checkpoint", "read_checkpoint", "load_checkpoint", "list_checkpoints"]

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
RESULTS = CHECKPOINTS / "results.json"
DTYPES = ("float32", "float64")                 # what a checkpoint's fp16 weights are read back as
FP16_MAX = float(np.finfo(np.float16).max)      # 65504: larger weights would be stored as inf


def _path(name: str, path) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{name} must be a path (str or Path), got {type(path).__name__}")
    return Path(path)


def _dtype(dtype) -> str:
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return dtype


def save_checkpoint(path: Path, weights: dict, meta: dict) -> None:
    """``path``.npz (fp16 weights) + ``path``.json (meta).

    weights: a non-empty {name: finite float array} with |values| <= 65504 (the float16 range: larger ones would be
    stored as inf); meta: a JSON-serializable dict. Everything is checked before anything is written."""
    path = _path("path", path)
    if not isinstance(weights, dict) or not weights or not all(isinstance(k, str) for k in weights):
        raise ValueError(f"weights must be a non-empty dict {{name: float array}}, got {weights!r:.80}")
    for k, v in weights.items():
        a = checks.finite_array(f"weights[{k!r}]", checks.array(f"weights[{k!r}]", v, kinds="f"))
        if a.size and np.abs(a).max() > FP16_MAX:
            raise ValueError(f"weights[{k!r}] must lie within the float16 range ±{FP16_MAX:g} (stored as fp16), got "
                             f"max |value| {np.abs(a).max():.6g}")
    if not isinstance(meta, dict):
        raise ValueError(f"meta must be a dict (stored as JSON), got {type(meta).__name__}")
    try:
        text = json.dumps(meta, indent=1, sort_keys=True) + "\n"
    except (TypeError, ValueError) as e:
        raise ValueError(f"meta must be JSON-serializable, got {e}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path.with_suffix(".npz"), **{k: np.asarray(v, np.float16) for k, v in weights.items()})
    path.with_suffix(".json").write_text(text)


def read_checkpoint(path, dtype: str = "float32") -> tuple:
    """(weights {name: array of ``dtype``}, meta) of a stored checkpoint (``…/seedK``, with or without suffix);
    dtype "float32" or "float64"."""
    path = _path("path", path).with_suffix("")
    dtype = _dtype(dtype)
    try:
        meta = json.loads(path.with_suffix(".json").read_text())
        with np.load(path.with_suffix(".npz")) as z:
            weights = {k: z[k].astype(dtype) for k in z.files}
    except FileNotFoundError:
        raise ValueError(f"path: no checkpoint at {path} (.npz + .json); list them with list_checkpoints()") from None
    except (ValueError, OSError, zipfile.BadZipFile) as e:       # JSONDecodeError is a ValueError
        raise ValueError(f"path: {path} (.npz + .json) is not a readable checkpoint: {e}") from None
    if not isinstance(meta, dict):
        raise ValueError(f"path: the meta {path.with_suffix('.json')} must hold a JSON object, got "
                         f"{type(meta).__name__}")
    return weights, meta


def load_checkpoint(path, dtype: str = "float32"):
    """(numpy model, meta) of a stored checkpoint (``…/seedK`` with or without suffix); weights fp16 -> ``dtype``."""
    weights, meta = read_checkpoint(path, dtype)
    if "model_config" not in meta or meta.get("experiment") == "dsa":
        raise ValueError(f"path must be a model checkpoint (its meta holds model_config; a dsa/indexer checkpoint "
                         f"holds indexers: dsa.load_indexers), got {path}")
    cfg = fam.config_from_json(meta["model_config"], dtype=dtype)
    return fam.numpy_model(cfg, weights), meta


def list_checkpoints(root=CHECKPOINTS, experiments=None) -> list:
    """The stored checkpoints (paths without suffix, sorted) of ``experiments`` (None: every stored one, including the
    DSA indexers of ``hybrid_lab.trained.dsa``). root: an existing folder; experiments: None or a list of names."""
    root = _path("root", root)
    if not root.is_dir():
        raise ValueError(f"root must be an existing folder of checkpoints, got {root}")
    if experiments is not None and (isinstance(experiments, str) or not isinstance(experiments, (list, tuple, set))
                                    or not all(isinstance(e, str) for e in experiments)):
        raise ValueError(f"experiments must be None or a list of experiment names, got {experiments!r}")
    paths = sorted(p.with_suffix("") for p in root.glob("*/*/seed*.npz"))
    return paths if experiments is None else [p for p in paths if p.parent.parent.name in experiments]
