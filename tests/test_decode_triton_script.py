"""benchmarks/decode_triton.py, the script behind notebook 10 §6's stored Triton decode record: on the CPU it
compares numpy with itself (the Triton run needs a GPU or the interpreter), and the stored record says every
prompt decoded to the same tokens."""
from bench_scripts import ROOT, load


def _script():
    return load("decode_triton")


def test_numpy_against_numpy_decodes_the_same_tokens(tmp_path, capsys):
    out = tmp_path / "rec.txt"
    assert _script().main([str(out), "--backend", "numpy", "--prompts", "2", "--new", "3"]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 3 and lines[0].startswith("retrieval/hysparse2 seed 1, greedy decode of 3 tokens")
    for i, line in enumerate(lines[1:]):
        assert line.startswith(f"prompt {i}: answer ") and " same True " in line
        assert float(line.rsplit(" ", 1)[1]) < 1e-4          # early exit vs full prefill, float32


def test_stored_record_is_every_prompt_the_same_under_triton():
    (record,) = sorted((ROOT / "hybrid_lab" / "trained" / "checkpoints").glob("decode_triton_*.txt"))
    lines = record.read_text().splitlines()
    assert "numpy vs triton" in lines[0]
    assert len(lines) == 7 and all(" same True " in line for line in lines[1:])


def test_the_record_is_what_the_committed_weights_give_under_numpy():
    """The stored record's numpy tokens are what the committed weights give today (the Triton side needs a GPU)."""
    (record,) = sorted((ROOT / "hybrid_lab" / "trained" / "checkpoints").glob("decode_triton_*.txt"))
    stored = record.read_text().splitlines()[1:]
    now = _script().decode_lines("numpy", n_prompts=len(stored))
    tokens = [line.split("  numpy ")[1].split("  ")[0] for line in stored]
    assert tokens == [line.split("  numpy ")[1].split("  ")[0] for line in now]
