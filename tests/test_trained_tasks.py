"""The synthetic tasks of the trained models: every answer is where the task says, evidence where ``dist`` points."""
import numpy as np
import pytest

from hybrid_lab.trained import tasks


def _answers(b, kind):
    rows, cols = np.nonzero(b.kind == kind)
    return rows, cols, b.dist[rows, cols], b.targets[rows, cols]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mqar_answers_point_at_their_pair(seed):
    b = tasks.mqar(32, 128, (2, 8, 32), seed)
    r, c, d, y = _answers(b, tasks.KIND_MQAR)
    assert len(r) > 0 and (d > 0).all()
    assert (b.tokens[r, c - d] == b.tokens[r, c]).all()          # the key asked is the key d back
    assert (b.tokens[r, c - d + 1] == y).all()                    # its value follows it
    assert ((b.targets >= 0) == (b.kind == tasks.KIND_MQAR)).all()
    for row in range(32):                                         # keys are distinct within a sequence
        n = int((b.kind[row] == tasks.KIND_MQAR).sum())
        keys = b.tokens[row, 0:2 * n:2]
        assert len(set(keys.tolist())) == n and np.isin(keys, tasks.KEYS).all()


@pytest.mark.parametrize("seed", [0, 3])
def test_needles_and_local_in_a_mix(seed):
    b = tasks.mix(16, 256, seed=seed, min_dist=100)
    r, c, d, y = _answers(b, tasks.KIND_NEEDLE)
    assert (d >= 100).all()
    assert (b.tokens[r, c - d - 1] == tasks.NEEDLE).all() and (b.tokens[r, c - 1] == tasks.QUERY).all()
    assert (b.tokens[r, c - d] == b.tokens[r, c]).all() and (b.tokens[r, c - d + 1] == y).all()
    r, c, d, y = _answers(b, tasks.KIND_LOCAL)
    assert len(r) > 0 and ((d >= 1) & (d <= 8)).all()
    assert (b.tokens[r, c - d] == y).all()
    assert np.isin(b.tokens[r, c], tasks.BACK).all()
    assert (np.array(tasks.BACK)[d - 1] == b.tokens[r, c]).all()   # BACK_j asks j back
    # a local query never overwrote a needle or a query (their answers still hold, checked above)


def test_same_seed_same_data_other_seed_other_data():
    a, b = tasks.mix(4, 128, seed=5), tasks.mix(4, 128, seed=5)
    assert (a.tokens == b.tokens).all() and (a.targets == b.targets).all()
    assert (tasks.mix(4, 128, seed=6).tokens != a.tokens).any()


def test_accuracy_counts_only_the_selected_answers():
    b = tasks.mqar(2, 32, 4, 0)
    logits = np.zeros(b.tokens.shape + (tasks.VOCAB,))
    r, c = np.nonzero(b.targets >= 0)
    logits[r[:3], c[:3], b.targets[r[:3], c[:3]]] = 1.0           # 3 right, the rest argmax 0 (wrong)
    acc, n = tasks.accuracy(logits, b)
    assert n == len(r) and acc == pytest.approx(3 / len(r))
    assert np.isnan(tasks.accuracy(logits, b, tasks.KIND_LOCAL)[0])


@pytest.mark.parametrize("call, match", [
    (lambda: tasks.mqar(2, 30, 8, 0), "4 \\* n_pairs"),
    (lambda: tasks.needles(2, 40, 4, 0, min_dist=30), "too short"),
    (lambda: tasks.local_copy(2, 20, 0), "too short"),
    (lambda: tasks.make_task("copy", 2, 32, 0), "task must be one of"),
    (lambda: tasks.mqar(0, 32, 2, 0), "batch"),
])
def test_bad_arguments_say_what_is_wrong(call, match):
    with pytest.raises(ValueError, match=match):
        call()
