"""Greedy decoding of the trained 4-layer HySparse2 (retrieval/hysparse2, seed 1: notebook 10 §6's model) under the
numpy backend and under the Triton backend, on the first prompts of notebook 10 §6: the generated tokens must be
the same, and the Triton early-exit prefill must match the numpy full prefill at the last position.

    PYTHONPATH=. python3 benchmarks/decode_triton.py [OUT.txt] [--backend triton] [--prompts 6] [--new 4]

On a GPU it writes the record notebook 10 prints (hybrid_lab/trained/checkpoints/decode_triton_<gpu>.txt);
``--backend numpy`` compares numpy with itself (what tests/test_decode_triton_script.py runs on the CPU).
"""
import argparse
import platform
import sys

import numpy as np

import hybrid_lab
from hybrid_lab.trained import tasks, train


def decode_lines(backend: str = "triton", n_prompts: int = 6, n_new: int = 4, seed: int = 1) -> list:
    """One line per prompt: the answer, the greedy tokens under numpy and under ``backend``, whether they are the
    same, and max |logits| difference at the last prompt position (``backend`` early exit vs numpy full prefill)."""
    model, _ = train.load_checkpoint(train.CHECKPOINTS / "retrieval" / "hysparse2" / f"seed{seed}")
    needles = tasks.needles(8, 128, 2, seed=tasks.EVAL_SEED + 800)     # notebook 10 §6's prompts
    lines = []
    for i in range(n_prompts):
        q = int(np.nonzero(needles.targets[i] >= 0)[0][0])              # the first query: its answer comes next
        prompt, answer = needles.tokens[i][: q + 1], int(needles.targets[i][q])
        with hybrid_lab.use_backend("numpy"):
            ref, _ = model.generate(prompt, n_new)
            full, _ = model.prefill(prompt, early_exit=False)
        with hybrid_lab.use_backend(backend):
            got, _ = model.generate(prompt, n_new)
            last, _ = model.prefill(prompt, early_exit=True)
        diff = float(np.abs(full[-1] - last[-1]).max())
        lines.append(f"prompt {i}: answer {answer}  numpy {ref.tolist()}  {backend} {got.tolist()}  "
                     f"same {bool(np.array_equal(ref, got))}  early-exit max|diff| {diff:.2e}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="also write the record here")
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--new", type=int, default=4)
    a = ap.parse_args(argv)
    where = "CPU"
    if a.backend == "triton":
        import torch
        import triton
        if torch.cuda.is_available():
            where = (f"{torch.cuda.get_device_name(0)} (torch {torch.__version__}, CUDA {torch.version.cuda}, "
                     f"Triton {triton.__version__})")
        else:
            where = f"the Triton interpreter on the CPU (torch {torch.__version__}, Triton {triton.__version__})"
    lines = decode_lines(a.backend, a.prompts, a.new)
    text = "\n".join([f"retrieval/hysparse2 seed 1, greedy decode of {a.new} tokens, numpy vs {a.backend} on "
                      f"{where}, Python {platform.python_version()}, numpy {np.__version__}:", *lines])
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0 if all(" same True " in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
