"""Compare a retraining with the stored checkpoints, seed by seed: every weight bit for bit, every recorded number
(the per-seed JSON without its timing and command fields), and the experiment's entry in results.json. A seed whose
weights were not kept (store.KEEP_WEIGHTS) is compared by the SHA-256 of its weights, which its meta holds.

    PYTHONPATH=. python3 benchmarks/compare_checkpoints.py NEW_OUT EXPERIMENT [--models m1 m2 ...] [--against DIR]

NEW_OUT is the --out folder of `hybrid-lab train EXPERIMENT ... --out NEW_OUT`; --against compares it with another
such folder instead of the stored checkpoints (two runs on one machine). The GPU each side ran on is reported on its
own line, not compared: bit-identity across GPU models is what such a run observes. Exits 1 unless everything matches.
"""
import argparse, json, sys
from pathlib import Path

from hybrid_lab.trained import store, train

# Fields that legitimately differ between two runs of the same training: wall time and the command line.
VOLATILE = {"command", "tokens_per_s", "train_seconds", "seconds", "wall_s"}


def _stable(d):
    """The recorded numbers: without timings, the command, the code version and the GPU (the last two are reported on
    their own line; "machine" is the GPU's name again, as train.py writes it)."""
    out = {k: v for k, v in d.items() if k not in VOLATILE and k != "machine" and "second" not in k}
    if isinstance(out.get("versions"), dict):
        out["versions"] = {k: v for k, v in out["versions"].items() if k not in ("code_version", "device")}
    return out


def _pairs(pairs) -> str:
    """(stored, new) pairs as 'a (same)' or 'a -> b'."""
    return ", ".join(f"{a} -> {b}" if a != b else f"{a} (same)" for a, b in sorted(pairs, key=str))


def compare(new: Path, stored: Path, exp: str, models=None) -> list[str]:
    lines, ok = [], True
    new_res = json.loads((new / "results.json").read_text())[exp]
    old_res = json.loads((stored / "results.json").read_text())[exp]
    for model in models or sorted(p.name for p in (new / exp).iterdir() if p.is_dir()):
        seeds = sorted(int(p.stem[4:]) for p in (new / exp / model).glob("seed*.json"))
        w = j = 0
        codes, devices = set(), set()
        for s in seeds:                    # weights bit for bit, by fingerprint where a side kept only its meta
            w += store.fingerprint(new / exp / model / f"seed{s}") == \
                store.fingerprint(stored / exp / model / f"seed{s}")
            ja = json.loads((new / exp / model / f"seed{s}.json").read_text())
            jb = json.loads((stored / exp / model / f"seed{s}.json").read_text())
            j += _stable(ja) == _stable(jb)
            codes.add((jb.get("versions", {}).get("code_version"), ja.get("versions", {}).get("code_version")))
            devices.add((jb.get("versions", {}).get("device"), ja.get("versions", {}).get("device")))
        entry = _stable(new_res["models"][model]) == _stable(old_res["models"][model])
        ok &= w == j == len(seeds) > 0 and entry
        lines.append(f"  {model:14s} every weight identical {w}/{len(seeds)} seeds, every recorded number identical "
                     f"{j}/{len(seeds)}, results.json entry identical: {'yes' if entry else 'NO'}; code version "
                     + _pairs(codes) + "; GPU " + _pairs(devices))
    return lines, ok


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("new"); ap.add_argument("exp"); ap.add_argument("--models", nargs="*")
    ap.add_argument("--against", type=Path, default=train.CHECKPOINTS,
                    help="the folder to compare with (default: the stored checkpoints)")
    a = ap.parse_args()
    lines, ok = compare(Path(a.new), a.against, a.exp, a.models)
    print("\n".join(lines))
    sys.exit(0 if ok else 1)
