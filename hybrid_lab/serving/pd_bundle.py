"""The prefill -> decode hand-off bundle of HySparse2 (HySparse2 §3, inference deployment; notebook 07).

A D worker that continues a request on its own needs every state the next token reads:

    field                  shape (L = prompt length)               why D needs it
    self FA KV             k (L, Hkv, d_qk), v (L, Hkv, d_v)       the next token's Self FA reads all history
    self SWA windows       per SWA layer (w, Hkv, d), pos (w,)     the next token's Self SWA reads the last w
    cross KV (bridged)     per group k (L, Hkv, d_qk), v (L, ...)  Cross FA/SA read all history (no Self re-run)
    boundary state         (d_model,)                              Cross at the last prompt position -> token 1
    metadata               header                                  length, positions, dtype, layout, model hash

The paper stresses the cross KV; the other fields are what correct execution requires (a system derivation, not
a published wire protocol). Serialized form = a small JSON header + an ordered list of arrays (:func:`wire_plan`);
the two global KVs are cut into chunks of ``chunk_size`` positions so P can send chunk c while it computes c + 1.
D checks the header against its own model (:func:`verify_header`) BEFORE allocating anything, and a SHA-256 of the
payload (the trailer) before installing.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.models.hysparse2 import (HySparse2Cache, HySparse2Config, KVCache, WindowKVCache,
                                         self_decoder_weight_names)

__all__ = ["WIRE_VERSION", "LAYOUT", "BundleError", "PDBundle", "config_hash", "weights_hash", "p_weight_names",
           "make_header", "verify_header", "wire_plan", "encode_header", "decode_header", "payload_digest",
           "bundle_bytes", "source_hidden_bytes"]

WIRE_VERSION = "hybrid-lab-pd/1"
LAYOUT = "kv:(S,Hkv,d) swa:(w,Hkv,d)+pos boundary:(D,) chunks:self_fa,cross[g]"


class BundleError(ValueError):
    """D refuses a bundle: a header field does not match D's model, or the payload is inconsistent."""


# ------------------------------------------------------------------------------------------------- hashing
def config_hash(cfg) -> str:
    """SHA-256 (hex, 16 chars) of a dataclass config: every field, in a canonical JSON form."""
    if not dataclasses.is_dataclass(cfg):
        raise ValueError(f"cfg must be a dataclass config, got {type(cfg).__name__}")
    blob = json.dumps(dataclasses.asdict(cfg), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cfg(cfg) -> HySparse2Config:
    if not isinstance(cfg, HySparse2Config):
        raise ValueError(f"cfg must be a HySparse2Config, got {type(cfg).__name__}")
    return cfg


def p_weight_names(cfg) -> list:
    """The weights that shape the bundle: embedding, Self-decoder, bridging projections (what a P worker holds)."""
    return self_decoder_weight_names(_cfg(cfg))


def weights_hash(weights: dict, names=None) -> str:
    """SHA-256 (hex, 16 chars) over (name, dtype, shape, bytes) of the named weights, in sorted name order.

    P (holding only the Self-decoder + bridges) and D (holding everything) agree when both hash the P subset.
    """
    if not isinstance(weights, dict):
        raise ValueError(f"weights must be a dict of named arrays, got {type(weights).__name__}")
    names = sorted(weights) if names is None else sorted(names)
    missing = [n for n in names if n not in weights]
    if missing:
        raise ValueError(f"weights is missing {len(missing)} named arrays, first {missing[0]!r}")
    h = hashlib.sha256()
    for n in names:
        a = np.ascontiguousarray(weights[n])
        h.update(f"{n}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------------- header
def make_header(cfg, weights_digest: str, prompt_len: int, chunk_size: int, request: int = 0) -> dict:
    """The metadata D checks before it allocates anything. Everything D needs to know the payload's shapes.

    weights_digest: :func:`weights_hash` of the P weights; prompt_len, chunk_size >= 1; request >= 0.
    """
    cfg = _cfg(cfg)
    prompt_len, chunk_size = checks.pos_int("prompt_len", prompt_len), checks.pos_int("chunk_size", chunk_size)
    request = checks.nonneg_int("request", request)
    if not isinstance(weights_digest, str) or not weights_digest:
        raise ValueError(f"weights_digest must be the hex string of weights_hash, got {weights_digest!r}")
    n_swa = cfg.n_self - 1
    return {"version": WIRE_VERSION, "request": int(request), "config_hash": config_hash(cfg),
            "weights_hash": weights_digest, "dtype": cfg.dtype, "layout": LAYOUT,
            "prompt_len": int(prompt_len), "next_pos": int(prompt_len), "chunk_size": int(chunk_size),
            "n_chunks": -(-int(prompt_len) // int(chunk_size)), "n_swa": n_swa, "n_groups": cfg.n_groups,
            "n_kv": cfg.n_heads_kv, "d_qk": cfg.d_qk, "d_v": cfg.d_v, "d_model": cfg.d_model,
            "swa_window": cfg.swa_window}


def verify_header(header: dict, cfg, weights_digest: str, max_len: int | None = None) -> None:
    """Raise :class:`BundleError` naming the first field of ``header`` that does not match D's model.

    Checked: version, config hash, weights hash, dtype, layout, shapes, and the length bookkeeping
    (prompt_len >= 1, next_pos == prompt_len, n_chunks == ceil(prompt_len / chunk_size), <= max_len).
    """
    if not isinstance(header, dict):
        raise BundleError(f"header must be a dict, got {type(header).__name__}")
    max_len = None if max_len is None else checks.pos_int("max_len", max_len)
    expect = make_header(cfg, weights_digest, 1, 1)
    for key in ("version", "config_hash", "weights_hash", "dtype", "layout", "n_swa", "n_groups", "n_kv", "d_qk",
                "d_v", "d_model", "swa_window"):
        if header.get(key) != expect[key]:
            raise BundleError(f"bundle refused: header field {key!r} is {header.get(key)!r}, "
                              f"D's model expects {expect[key]!r}")
    L, C = header.get("prompt_len"), header.get("chunk_size")
    for key, val in (("prompt_len", L), ("chunk_size", C)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 1:
            raise BundleError(f"bundle refused: header field {key!r} must be an integer >= 1, got {val!r}")
    if header.get("next_pos") != L:
        raise BundleError(f"bundle refused: header field 'next_pos' is {header.get('next_pos')!r}, "
                          f"expected prompt_len = {L} (the first decoded token's position)")
    if header.get("n_chunks") != -(-L // C):
        raise BundleError(f"bundle refused: header field 'n_chunks' is {header.get('n_chunks')!r}, "
                          f"expected ceil({L} / {C}) = {-(-L // C)}")
    if max_len is not None and L > max_len:
        raise BundleError(f"bundle refused: header field 'prompt_len' is {L}, D can hold at most {max_len}")


_SIZES = {"prompt_len": 1, "chunk_size": 1, "n_chunks": 1, "n_groups": 1, "n_kv": 1, "d_qk": 1, "d_v": 1,
          "d_model": 1, "swa_window": 1, "n_swa": 0, "next_pos": 1, "request": 0}      # field -> minimum


def _header_fields(header) -> dict:
    """A header dict holding every field of :func:`make_header`, sizes as integers at their minimum or more
    (raises :class:`BundleError` naming the first bad field)."""
    if not isinstance(header, dict):
        raise BundleError(f"header must be a dict, got {type(header).__name__}")
    for key in ("version", "config_hash", "weights_hash", "dtype", "layout", *_SIZES):
        if key not in header:
            raise BundleError(f"bundle refused: header lacks field {key!r}")
    for key, lo in _SIZES.items():
        v = header[key]
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
            raise BundleError(f"bundle refused: header field {key!r} must be an integer >= {lo}, got {v!r}")
    return header


def wire_plan(header: dict) -> list:
    """The ordered payload D must receive: [(name, shape, dtype)], a pure function of the (verified) header.

    Chunks first (so P streams them as it computes): for each chunk c, the self FA k, v rows then every cross
    group's k, v rows; then every SWA window's k, v, pos; then the boundary state. A header missing a field or
    with a bad size raises :class:`BundleError`.
    """
    _header_fields(header)
    L, C, dt = header["prompt_len"], header["chunk_size"], header["dtype"]
    Hkv, dk, dv = header["n_kv"], header["d_qk"], header["d_v"]
    plan = []
    for c in range(header["n_chunks"]):
        n = min(C, L - c * C)
        plan += [(f"chunk{c}.self_fa.k", (n, Hkv, dk), dt), (f"chunk{c}.self_fa.v", (n, Hkv, dv), dt)]
        for g in range(header["n_groups"]):
            plan += [(f"chunk{c}.cross{g}.k", (n, Hkv, dk), dt), (f"chunk{c}.cross{g}.v", (n, Hkv, dv), dt)]
    w = min(L, header["swa_window"])
    for i in range(header["n_swa"]):
        plan += [(f"swa{i}.k", (w, Hkv, dk), dt), (f"swa{i}.v", (w, Hkv, dv), dt), (f"swa{i}.pos", (w,), "int64")]
    plan.append(("boundary", (header["d_model"],), dt))
    return plan


def encode_header(header: dict) -> np.ndarray:
    """Header (every field of :func:`make_header`) -> uint8 array (UTF-8 JSON), the first message on the wire."""
    _header_fields(header)
    return np.frombuffer(json.dumps(header, sort_keys=True).encode(), dtype=np.uint8).copy()


def decode_header(buf) -> dict:
    """uint8 array -> header dict; a buffer that is not a JSON object raises :class:`BundleError`."""
    try:
        out = json.loads(np.asarray(buf, dtype=np.uint8).tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"bundle refused: the header buf is not valid JSON ({e})") from None
    if not isinstance(out, dict):
        raise BundleError(f"bundle refused: the header buf must hold a JSON object, got {type(out).__name__}")
    return out


def payload_digest(arrays) -> np.ndarray:
    """SHA-256 of the payload arrays (a list, in wire order) -> (32,) uint8 (the trailer D checks before installing)."""
    if not isinstance(arrays, (list, tuple)):
        raise ValueError(f"arrays must be the list of payload arrays, got {type(arrays).__name__}")
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return np.frombuffer(h.digest(), dtype=np.uint8).copy()


# --------------------------------------------------------------------------------------------------- bundle
@dataclass
class PDBundle:
    """Everything D needs to continue a prompt of length L that P prefilled (shapes in the module docstring).

    self_fa_k/v: (L, Hkv, d); swa_k/v: lists (one per self SWA layer) of (w, Hkv, d); swa_pos: list of (w,) int64
    absolute positions; cross_k/v: lists (one per cross group) of (L, Hkv, d); boundary: (d_model,);
    header: the metadata (:func:`make_header`).
    """
    header: dict
    self_fa_k: np.ndarray
    self_fa_v: np.ndarray
    swa_k: list
    swa_v: list
    swa_pos: list
    cross_k: list
    cross_v: list
    boundary: np.ndarray

    # -------------------------------------------------------------------------- P side
    @classmethod
    def from_cache(cls, cache, cfg, weights_digest: str, chunk_size: int = 16, request: int = 0) -> "PDBundle":
        """Pack a P worker's :class:`~hybrid_lab.models.hysparse2.HySparse2Cache` (after ``prefill_self``)."""
        if not isinstance(cache, HySparse2Cache):
            raise ValueError(f"cache must be a HySparse2Cache, got {type(cache).__name__}")
        if cache.boundary is None or cache.pos < 1:
            raise ValueError("cache has no boundary state: run prefill_self on a non-empty prompt first")
        return cls(header=make_header(cfg, weights_digest, cache.pos, chunk_size, request),
                   self_fa_k=cache.self_fa.k, self_fa_v=cache.self_fa.v,
                   swa_k=[w.k for w in cache.self_swa], swa_v=[w.v for w in cache.self_swa],
                   swa_pos=[w.pos for w in cache.self_swa],
                   cross_k=[c.k for c in cache.cross], cross_v=[c.v for c in cache.cross],
                   boundary=cache.boundary)

    def to_arrays(self) -> list:
        """The payload in :func:`wire_plan` order (chunked global KVs, windows, boundary)."""
        L, C = self.header["prompt_len"], self.header["chunk_size"]
        out = []
        for c0 in range(0, L, C):
            sl = slice(c0, min(c0 + C, L))
            out += [self.self_fa_k[sl], self.self_fa_v[sl]]
            for k, v in zip(self.cross_k, self.cross_v):
                out += [k[sl], v[sl]]
        for k, v, p in zip(self.swa_k, self.swa_v, self.swa_pos):
            out += [k, v, np.asarray(p, np.int64)]
        out.append(self.boundary)
        return [np.ascontiguousarray(a) for a in out]

    # -------------------------------------------------------------------------- D side
    @classmethod
    def from_arrays(cls, header: dict, arrays: list, cfg, weights_digest: str, digest=None,
                    max_len: int | None = None) -> "PDBundle":
        """Verify and rebuild a bundle on D. Raises :class:`BundleError` (nothing built) on any mismatch.

        header: decoded header; arrays: the payload in wire order; digest: the (32,) uint8 trailer, if sent.
        """
        verify_header(header, cfg, weights_digest, max_len)
        plan = wire_plan(header)
        if len(arrays) != len(plan):
            raise BundleError(f"bundle refused: payload has {len(arrays)} arrays, the header implies {len(plan)}")
        for (name, shape, dt), a in zip(plan, arrays):
            a = np.asarray(a)
            if a.shape != tuple(shape) or a.dtype != np.dtype(dt):
                raise BundleError(f"bundle refused: array {name!r} is {a.shape} {a.dtype}, expected {tuple(shape)} {dt}")
        if digest is not None and not np.array_equal(np.asarray(digest, np.uint8), payload_digest(arrays)):
            raise BundleError("bundle refused: payload SHA-256 does not match the trailer (corrupted in transit)")
        L, G, nswa = header["prompt_len"], header["n_groups"], header["n_swa"]
        per = 2 + 2 * G
        n_chunk_arrays = header["n_chunks"] * per
        chunks = [arrays[i:n_chunk_arrays:per] for i in range(per)]
        cat = [np.concatenate(c) for c in chunks]
        tail = arrays[n_chunk_arrays:]
        swa_pos = [np.asarray(tail[3 * i + 2]) for i in range(nswa)]
        w = min(L, header["swa_window"])
        for i, p in enumerate(swa_pos):
            if not np.array_equal(p, np.arange(L - w, L)):
                raise BundleError(f"bundle refused: swa{i}.pos is not the last {w} positions of a length-{L} prompt")
        return cls(header=dict(header), self_fa_k=cat[0], self_fa_v=cat[1],
                   swa_k=[tail[3 * i] for i in range(nswa)], swa_v=[tail[3 * i + 1] for i in range(nswa)],
                   swa_pos=swa_pos, cross_k=cat[2::2], cross_v=cat[3::2], boundary=np.asarray(tail[-1]))

    def to_cache(self, cfg):
        """Install: a :class:`~hybrid_lab.models.hysparse2.HySparse2Cache` D continues from (arrays copied).

        cfg must be the config the bundle was made for (its hash is in the header).
        """
        if config_hash(_cfg(cfg)) != self.header.get("config_hash"):
            raise BundleError(f"bundle refused: it was made for config {self.header.get('config_hash')!r}, "
                              f"cfg hashes to {config_hash(cfg)!r}")
        return HySparse2Cache(
            pos=self.header["prompt_len"], self_fa=KVCache(self.self_fa_k.copy(), self.self_fa_v.copy()),
            self_swa=[WindowKVCache(k.copy(), v.copy(), np.asarray(p, np.int64).copy(), cfg.swa_window)
                      for k, v, p in zip(self.swa_k, self.swa_v, self.swa_pos)],
            cross=[KVCache(k.copy(), v.copy()) for k, v in zip(self.cross_k, self.cross_v)],
            boundary=self.boundary.copy())

    def nbytes(self) -> dict:
        """Payload bytes by field: {'self_fa', 'self_swa', 'cross', 'boundary', 'header', 'total'}."""
        out = {"self_fa": self.self_fa_k.nbytes + self.self_fa_v.nbytes,
               "self_swa": sum(k.nbytes + v.nbytes + np.asarray(p).nbytes
                               for k, v, p in zip(self.swa_k, self.swa_v, self.swa_pos)),
               "cross": sum(k.nbytes + v.nbytes for k, v in zip(self.cross_k, self.cross_v)),
               "boundary": self.boundary.nbytes, "header": encode_header(self.header).nbytes}
        out["total"] = sum(out.values())
        return out


# ---------------------------------------------------------------------------------------------- accounting
def bundle_bytes(cfg, prompt_len: int, itemsize: int | None = None) -> dict:
    """Computed payload bytes of a bundle (no header/trailer), from the config alone.

    Global KVs: (1 self FA + n_groups cross) x L x Hkv x (d_qk + d_v); windows: n_swa x min(L, w) x (Hkv (d_qk +
    d_v) elements + one int64 position); boundary: d_model. ``itemsize`` (bytes >= 1) defaults to the config dtype's.
    """
    cfg, prompt_len = _cfg(cfg), checks.pos_int("prompt_len", prompt_len)
    b = np.dtype(cfg.dtype).itemsize if itemsize is None else checks.pos_int("itemsize", itemsize)
    kv_tok = cfg.n_heads_kv * (cfg.d_qk + cfg.d_v) * b
    w = min(prompt_len, cfg.swa_window)
    out = {"self_fa": prompt_len * kv_tok, "cross": cfg.n_groups * prompt_len * kv_tok,
           "self_swa": (cfg.n_self - 1) * w * (kv_tok + 8), "boundary": cfg.d_model * b}
    out["total"] = sum(out.values())
    return out


def source_hidden_bytes(cfg, prompt_len: int, itemsize: int | None = None) -> int:
    """Bytes of the alternative the paper rejects: ship the bridge SOURCE hidden states (L x d_model per distinct
    source) and let D project them, instead of the n_groups projected cross KVs."""
    cfg, prompt_len = _cfg(cfg), checks.pos_int("prompt_len", prompt_len)
    b = np.dtype(cfg.dtype).itemsize if itemsize is None else checks.pos_int("itemsize", itemsize)
    return len(set(cfg.sources)) * prompt_len * cfg.d_model * b
