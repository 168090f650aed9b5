"""Test helpers shared by the torch twins' tests (tests/test_trained_*.py): one torch thread, next-token loss, Adam.

Imported by the test modules (``from trained_helpers import ...``; pytest puts tests/ on sys.path, as for conftest).
Not in conftest.py: it imports torch, which most of the suite does not need.
"""
import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny tensors: a second intra-op thread only adds spin contention (10x slower on a busy 2-core machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits (B, T, V) at positions 0..T-2 against tokens (B, T) at 1..T-1."""
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))


def adam_steps(model, data, steps: int, lr: float = 1e-2) -> list:
    """``steps`` Adam steps of next-token loss; data: tokens (B, T), or step -> tokens (a fresh batch per step).
    Returns the losses before each step (floats)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        tokens = data(step) if callable(data) else data
        loss = next_token_loss(model(tokens), tokens)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
