import pytest

from hybrid_lab.core.progress import progress


def test_progress_iterates_and_counts():
    bar = progress(range(5), desc="x")
    assert list(bar) == [0, 1, 2, 3, 4]
    assert bar.n == 5


def test_progress_can_be_disabled(monkeypatch):
    monkeypatch.setenv("HYBRID_LAB_PROGRESS", "0")
    bar = progress(range(3))
    assert bar.disable and list(bar) == [0, 1, 2]
    bar.update(1)  # callable, and a no-op on a disabled bar
    assert bar.n == 0
