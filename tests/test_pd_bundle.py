"""The P -> D hand-off bundle: packing, wire order, header checks, refusal, byte accounting."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hybrid_lab.models.hysparse2 import HySparse2, HySparse2Config
from hybrid_lab.serving.pd_bundle import (BundleError, PDBundle, bundle_bytes, config_hash, decode_header, encode_header,
                                  make_header, p_weight_names, payload_digest, source_hidden_bytes, verify_header,
                                  weights_hash, wire_plan)

CFG = HySparse2Config(self_swa_before=2, self_swa_after=2, cross_layers=8, group_size=4, d_model=16, window=2,
                      topk=4, swa_window=3)
MODEL = HySparse2(CFG)
DIGEST = weights_hash(MODEL.weights, p_weight_names(CFG))


def _bundle(L=11, chunk=4, request=0):
    tokens = np.random.default_rng(L).integers(0, CFG.vocab, L)
    cache = MODEL.prefill_self(tokens)
    return tokens, PDBundle.from_cache(cache, CFG, DIGEST, chunk, request)


def test_roundtrip_first_token_and_decode_equal_single_process():
    tokens, b = _bundle()
    arrays = b.to_arrays()
    back = PDBundle.from_arrays(b.header, arrays, CFG, DIGEST, digest=payload_digest(arrays))
    cache = back.to_cache(CFG)
    ref_logits, ref_cache = MODEL.prefill(tokens)
    np.testing.assert_allclose(MODEL.first_token(cache), ref_logits[-1], rtol=0, atol=1e-12)
    ref_tokens, _ = MODEL.generate(tokens, 4)
    got = [int(np.argmax(MODEL.first_token(cache)))]
    for _ in range(3):
        lg, cache = MODEL.decode_step(got[-1], cache)
        got.append(int(np.argmax(lg)))
    assert got == list(ref_tokens)
    assert cache.pos == len(tokens) + 3


def test_bundle_holds_the_three_cache_kinds_and_boundary():
    _, b = _bundle(L=7)
    assert b.self_fa_k.shape == (7, CFG.n_heads_kv, CFG.d_qk)
    assert len(b.swa_k) == CFG.n_self - 1 and all(k.shape[0] == CFG.swa_window for k in b.swa_k)
    assert len(b.cross_k) == CFG.n_groups and all(k.shape[0] == 7 for k in b.cross_k)
    assert b.boundary.shape == (CFG.d_model,) and np.abs(b.boundary).sum() > 0
    # the four cross KVs are distinct (own projections), not copies of one cache
    assert not np.allclose(b.cross_k[0], b.cross_k[1])
    assert [list(p) for p in b.swa_pos] == [[4, 5, 6]] * (CFG.n_self - 1)


def test_wire_plan_matches_payload_and_bytes_formula():
    _, b = _bundle(L=10, chunk=4)
    arrays = b.to_arrays()
    plan = wire_plan(b.header)
    assert [(a.shape, a.dtype.name) for a in arrays] == [(tuple(s), d) for _, s, d in plan]
    assert b.header["n_chunks"] == 3
    nb = b.nbytes()
    computed = bundle_bytes(CFG, 10)
    assert computed["total"] == nb["total"] - nb["header"] == sum(a.nbytes for a in arrays)
    assert computed["cross"] == CFG.n_groups * computed["self_fa"] > 0


def test_source_hidden_alternative():
    # one shared source (the self FA input) for every group: L x d_model elements
    assert source_hidden_bytes(CFG, 10) == 10 * CFG.d_model * 8
    two = HySparse2Config(**{**CFG.__dict__, "bridge_sources": ("self_fa_input", "boundary")})
    assert source_hidden_bytes(two, 10) == 2 * 10 * CFG.d_model * 8


def test_hashes():
    full = weights_hash(MODEL.weights, p_weight_names(CFG))
    subset = {n: MODEL.weights[n] for n in p_weight_names(CFG)}
    assert weights_hash(subset) == full                    # P (subset) and D (full) agree
    other = dict(subset)
    other["bridge.0.wk"] = other["bridge.0.wk"] + 1e-9
    assert weights_hash(other) != full
    assert config_hash(CFG) != config_hash(HySparse2Config(**{**CFG.__dict__, "seed": 1}))
    with pytest.raises(ValueError, match="missing"):
        weights_hash({}, ["embed"])
    with pytest.raises(ValueError, match="dataclass"):
        config_hash({"a": 1})


@pytest.mark.parametrize("field,value", [("config_hash", "0" * 16), ("weights_hash", "f" * 16), ("dtype", "float32"),
                                         ("version", "other/9"), ("n_chunks", 99), ("next_pos", 3),
                                         ("prompt_len", 0), ("d_model", 7), ("n_groups", 1)])
def test_verify_header_names_the_bad_field(field, value):
    h = make_header(CFG, DIGEST, 11, 4)
    verify_header(h, CFG, DIGEST)                           # the good one passes
    h[field] = value
    with pytest.raises(BundleError, match=field):
        verify_header(h, CFG, DIGEST)


def test_max_len_and_header_codec():
    h = make_header(CFG, DIGEST, 11, 4, request=3)
    assert decode_header(encode_header(h)) == h
    with pytest.raises(BundleError, match="prompt_len"):
        verify_header(h, CFG, DIGEST, max_len=10)
    with pytest.raises(BundleError, match="JSON"):
        decode_header(np.frombuffer(b"\xff\xfe", np.uint8))
    with pytest.raises(BundleError, match="object"):
        decode_header(np.frombuffer(b"[1]", np.uint8))
    with pytest.raises(ValueError, match="chunk_size"):
        make_header(CFG, DIGEST, 11, 0)


def test_from_arrays_refuses_corrupt_or_misshapen_payload():
    _, b = _bundle()
    arrays = b.to_arrays()
    good = payload_digest(arrays)
    bad = [a.copy() for a in arrays]
    bad[0].flat[0] += 1.0
    with pytest.raises(BundleError, match="SHA-256"):
        PDBundle.from_arrays(b.header, bad, CFG, DIGEST, digest=good)
    with pytest.raises(BundleError, match="payload has"):
        PDBundle.from_arrays(b.header, arrays[:-1], CFG, DIGEST)
    wrong = list(arrays)
    wrong[-1] = wrong[-1][:-1]
    with pytest.raises(BundleError, match="boundary"):
        PDBundle.from_arrays(b.header, wrong, CFG, DIGEST)
    shifted = list(arrays)
    i = [n for n, _, _ in wire_plan(b.header)].index("swa0.pos")
    shifted[i] = shifted[i] - 1
    with pytest.raises(BundleError, match="swa0.pos"):
        PDBundle.from_arrays(b.header, shifted, CFG, DIGEST)


def test_from_cache_needs_a_prefilled_cache():
    with pytest.raises(ValueError, match="boundary"):
        PDBundle.from_cache(MODEL.new_cache(), CFG, DIGEST)


@settings(max_examples=15, deadline=None)
@given(L=st.integers(1, 12), chunk=st.integers(1, 13))
def test_property_any_chunking_roundtrips_exactly(L, chunk):
    tokens, b = _bundle(L, chunk)
    plan = wire_plan(b.header)
    assert sum(s[0] for n, s, _ in plan if n.endswith("self_fa.k")) == L
    back = PDBundle.from_arrays(b.header, b.to_arrays(), CFG, DIGEST)
    for x, y in zip(back.cross_k + [back.self_fa_v, back.boundary], b.cross_k + [b.self_fa_v, b.boundary]):
        np.testing.assert_array_equal(x, y)


def test_to_cache_refuses_another_config():
    _, b = _bundle()
    other = HySparse2Config(**{**CFG.__dict__, "seed": 5})
    with pytest.raises(BundleError, match="made for config"):
        b.to_cache(other)


@pytest.mark.parametrize("call, match", [
    (lambda: make_header(CFG, DIGEST, 0, 4), "prompt_len"),
    (lambda: make_header(CFG, DIGEST, 4.0, 4), "prompt_len"),
    (lambda: make_header(CFG, DIGEST, 4, 4, request=-1), "request"),
    (lambda: make_header(CFG, 123, 4, 4), "weights_digest"),
    (lambda: make_header({"d_model": 16}, DIGEST, 4, 4), "HySparse2Config"),
    (lambda: verify_header(make_header(CFG, DIGEST, 4, 4), CFG, DIGEST, max_len=2.5), "max_len"),
    (lambda: wire_plan({**make_header(CFG, DIGEST, 4, 4), "prompt_len": -5}), "prompt_len"),
    (lambda: wire_plan({k: v for k, v in make_header(CFG, DIGEST, 4, 4).items() if k != "n_kv"}), "n_kv"),
    (lambda: encode_header("header"), "dict"),
    (lambda: encode_header({**make_header(CFG, DIGEST, 4, 4), "chunk_size": 1.5}), "chunk_size"),
    (lambda: payload_digest(5), "arrays"),
    (lambda: bundle_bytes(CFG, 0), "prompt_len"),
    (lambda: bundle_bytes(CFG, 10, itemsize=0), "itemsize"),
    (lambda: source_hidden_bytes(CFG, 2.5), "prompt_len"),
    (lambda: p_weight_names("cfg"), "HySparse2Config"),
    (lambda: weights_hash([1, 2]), "weights"),
    (lambda: PDBundle.from_cache("cache", CFG, DIGEST), "HySparse2Cache"),
])
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()
