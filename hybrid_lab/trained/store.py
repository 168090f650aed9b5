"""Where the trained models live: fp16 weights (``.npz``) + a JSON meta per checkpoint, and their aggregate.

``CHECKPOINTS/EXPERIMENT/MODEL/seedK.json`` (config, seed, command, machine, curves, final accuracies) +
``seedK.npz`` (the weights). An experiment listed in :data:`KEEP_WEIGHTS` keeps the weights of only some seeds
(:func:`prune_weights`): the others keep their meta, the SHA-256 of their fp16 weights (``hybrid-lab train EXP
--verify`` retrains them and compares bit for bit) and what the probes measured on them, so every seed is still
reported and explained while the repository stays small.
Used by the training (``train.py``), the DSA experiment (``dsa.py``) and the notebooks; imports no torch.
"""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.trained import families as fam

__all__ = ["CHECKPOINTS", "RESULTS", "KEEP_WEIGHTS", "save_checkpoint", "read_checkpoint", "read_meta",
           "load_checkpoint", "list_checkpoints", "kept_seeds", "weights_sha256", "fingerprint", "prune_weights"]

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
RESULTS = CHECKPOINTS / "results.json"
DTYPES = ("float32", "float64")                 # what a checkpoint's fp16 weights are read back as
FP16_MAX = float(np.finfo(np.float16).max)      # 65504: larger weights would be stored as inf
# {experiment: {model ("*": every model): the seeds whose weights stay in the repository}}; the other seeds keep
# their meta, the fingerprint of their weights and (where a notebook explains each seed) the probe numbers. Every
# seed a notebook loads keeps its weights; the budget for all checkpoints is 40 MB (weights + metas).
# - mqar: the pure Mamba-2 models and the hybrid keep seed 0 (notebook 10 runs it live); the attention-only models,
#   which notebook 10 probes seed by seed, keep all ten.
# - ablation9: 5 models x 20 seeds of 237 K parameters would add 47 MB; no seed keeps its weights (retrieval9 keeps
#   those of hysparse2_9, the same spec), every seed keeps its probe numbers (~0.8 MB of metas in all).
KEEP_WEIGHTS = {"mqar": {"mamba2": (0,), "mamba2_N32": (0,), "mamba2_N64": (0,), "mamba2_hybrid": (0,)},
                "ablation9": {"*": ()}}


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
        if path.with_suffix(".json").is_file() and "weights_sha256" in _meta_or_empty(path):
            raise ValueError(f"path: {path} keeps its meta but not its weights (store.KEEP_WEIGHTS); retrain it with "
                             f"hybrid-lab train (its meta's command) to get them") from None
        raise ValueError(f"path: no checkpoint at {path} (.npz + .json); list them with list_checkpoints()") from None
    except (ValueError, OSError, zipfile.BadZipFile) as e:       # JSONDecodeError is a ValueError
        raise ValueError(f"path: {path} (.npz + .json) is not a readable checkpoint: {e}") from None
    if not isinstance(meta, dict):
        raise ValueError(f"path: the meta {path.with_suffix('.json')} must hold a JSON object, got "
                         f"{type(meta).__name__}")
    return weights, meta


def read_meta(path) -> dict:
    """The meta of a stored checkpoint (``…/seedK``, with or without suffix), its weights kept or not."""
    path = _path("path", path).with_suffix("")
    try:
        meta = json.loads(path.with_suffix(".json").read_text())
    except FileNotFoundError:
        raise ValueError(f"path: no checkpoint meta at {path}.json; list them with list_checkpoints()") from None
    except (ValueError, OSError) as e:
        raise ValueError(f"path: {path}.json is not a readable checkpoint meta: {e}") from None
    if not isinstance(meta, dict):
        raise ValueError(f"path: the meta {path}.json must hold a JSON object, got {type(meta).__name__}")
    return meta


def kept_seeds(experiment: str, model: str):
    """The seeds of (experiment, model) whose weights :data:`KEEP_WEIGHTS` keeps: a tuple, or None (all)."""
    for name, v in (("experiment", experiment), ("model", model)):
        if not isinstance(v, str) or not v:
            raise ValueError(f"{name} must be a non-empty str, got {v!r}")
    rule = KEEP_WEIGHTS.get(experiment, {})
    return rule.get(model, rule.get("*"))


def load_checkpoint(path, dtype: str = "float32"):
    """(numpy model, meta) of a stored checkpoint (``…/seedK`` with or without suffix); weights fp16 -> ``dtype``."""
    weights, meta = read_checkpoint(path, dtype)
    if "model_config" not in meta or meta.get("experiment") == "dsa":
        raise ValueError(f"path must be a model checkpoint (its meta holds model_config; a dsa/indexer checkpoint "
                         f"holds indexers: dsa.load_indexers), got {path}")
    cfg = fam.config_from_json(meta["model_config"], dtype=dtype)
    return fam.numpy_model(cfg, weights), meta


def _meta_or_empty(path: Path) -> dict:
    try:
        return read_meta(path)
    except ValueError:
        return {}


def list_checkpoints(root=CHECKPOINTS, experiments=None, weights: bool = True) -> list:
    """The stored checkpoints (paths without suffix, sorted) of ``experiments`` (None: every stored one, including the
    DSA indexers of ``hybrid_lab.trained.dsa``). root: an existing folder; experiments: None or a list of names;
    weights: True, only those whose weights are stored (what a model can be loaded from); False, every checkpoint's
    meta, with or without weights (what the results are aggregated from)."""
    if not isinstance(weights, (bool, np.bool_)):
        raise ValueError(f"weights must be True or False, got {weights!r}")
    root = _path("root", root)
    if not root.is_dir():
        raise ValueError(f"root must be an existing folder of checkpoints, got {root}")
    if experiments is not None and (isinstance(experiments, str) or not isinstance(experiments, (list, tuple, set))
                                    or not all(isinstance(e, str) for e in experiments)):
        raise ValueError(f"experiments must be None or a list of experiment names, got {experiments!r}")
    paths = sorted(p.with_suffix("") for p in root.glob("*/*/seed*.npz"))
    if not weights:
        paths = sorted(set(paths) | {p.with_suffix("") for p in root.glob("*/*/seed*.json")
                                     if "weights_sha256" in _meta_or_empty(p)})
    return paths if experiments is None else [p for p in paths if p.parent.parent.name in experiments]


def weights_sha256(weights: dict) -> str:
    """SHA-256 of a checkpoint's weights as stored (fp16, C order), over the names in sorted order: equal for
    bit-identical weights. weights: {name: float array} (read_checkpoint's float32 copies of fp16 give the same)."""
    if not isinstance(weights, dict) or not weights or not all(isinstance(k, str) for k in weights):
        raise ValueError(f"weights must be a non-empty dict {{name: float array}}, got {weights!r:.80}")
    h = hashlib.sha256()
    for k in sorted(weights):
        a = checks.array(f"weights[{k!r}]", weights[k], kinds="f")
        h.update(k.encode() + b"\0" + str(a.shape).encode() + b"\0")
        h.update(np.ascontiguousarray(a, np.float16).tobytes())
    return h.hexdigest()


def fingerprint(path) -> str:
    """The SHA-256 of a stored checkpoint's fp16 weights (``…/seedK``): computed from its ``.npz``, or the one its
    meta holds where the weights were not kept (what ``--verify`` and a retraining's comparison check bit for bit)."""
    path = _path("path", path).with_suffix("")
    if path.with_suffix(".npz").exists():
        return weights_sha256(read_checkpoint(path)[0])
    meta = read_meta(path)
    if "weights_sha256" not in meta:
        raise ValueError(f"path: {path} has neither weights nor a fingerprint of them in its meta")
    return meta["weights_sha256"]


def prune_weights(folder, keep, probe=None) -> list:
    """Drop the weights of every seed of ``folder`` (an EXPERIMENT/MODEL folder of checkpoints) not in ``keep``: its
    ``.npz`` goes, its meta gains ``weights_sha256`` (the fingerprint of the dropped weights) and, when ``probe`` is
    given, ``probe``: probe(numpy model) (a JSON-serializable dict, measured before the weights go). Every meta is
    written before any weights file is removed. Returns the pruned paths. keep: a list of training seeds."""
    folder = _path("folder", folder)
    if isinstance(keep, (str, bytes)) or not hasattr(keep, "__iter__") or \
            not all(isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)) for k in keep):
        raise ValueError(f"keep must be a list of training seeds (ints), got {keep!r}")
    if probe is not None and not callable(probe):
        raise ValueError(f"probe must be None or a function numpy model -> dict, got {type(probe).__name__}")
    paths = sorted(p.with_suffix("") for p in folder.glob("seed*.npz"))
    if not paths:
        raise ValueError(f"folder must hold checkpoints (seedK.npz + .json), got none in {folder}")
    todo = []
    for p in paths:
        weights, meta = read_checkpoint(p)
        if meta.get("seed") in set(int(k) for k in keep):
            continue
        meta = dict(meta, weights_sha256=weights_sha256(weights))
        if probe is not None:
            meta["probe"] = probe(load_checkpoint(p)[0])
        todo.append((p, json.dumps(meta, indent=1, sort_keys=True) + "\n"))
    for p, text in todo:
        p.with_suffix(".json").write_text(text)
    for p, _ in todo:
        p.with_suffix(".npz").unlink()
    return [p for p, _ in todo]
