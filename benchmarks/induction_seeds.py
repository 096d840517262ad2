"""Induction heads over seeds: the recipe of chapter 11e, trained once per seed, with its 1-layer control.

    source tools/kernels.sh
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/induction_seeds.py [--seeds 0 1 ... 9] [--layers 2 1]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/induction_seeds.py --seeds 0 --steps 40 --check
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/induction_seeds.py --layers 2 --norm layer --seeds 0 1 2

For each seed it trains the 2-layer attention-only model of chapter 11e (INDUCTION_MODEL, INDUCTION_TRAINING) and
the same model with one layer, and records: the checkpoints' losses on each copy, in-context-learning score and
per-head induction and previous-token scores; the tokens seen at the phase change; the loss on each copy with each
head removed (`ablate`), with the last layer's induction heads (score >= 0.3) removed together, and with all of layer
0 removed; the K-composition of every layer-0 head with every layer-1 head and its shuffled baseline (not the
Q-composition, which the chapter computes for its live run only); the CPU time of the training. The stored rows:
seeds 0-9 with 2 layers, 0-4 with 1 layer, 0-2 with LayerNorm; each 2-layer run without LayerNorm took 111-122 s
of CPU on a 2-core machine shared with several other jobs, where it was written. It writes benchmarks/results/seeds_induction.json. --norm layer trains the same recipe
with chapter 11c's LayerNorms put back (pre-LN and a final norm): the control that shows why the chapter leaves them
out; its rows carry "norm": "layer". Chapter 11e trains seed 0's first steps live; this script trains every seed to
the end. --out writes elsewhere, so that seeds can run in separate processes (merge the rows by hand);
--save writes each model's final weights into a folder.

The results are deterministic on one thread with the AVX2 kernels of tools/kernels.sh: --check trains the given
seeds again and compares every number with the stored rows (CPU times excepted), exiting with status 1 on any
difference. --steps N trains N steps and keeps those rows apart ("quick"): tests/test_induction.py checks such a
row in a few seconds.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

from transformer_nb.induction import (
    INDUCTION_MODEL,
    INDUCTION_TRAINING,
    ablate,
    attention_only,
    eval_batch,
    head_scores,
    k_composition,
    phase_change,
    train_induction,
)

RESULTS = Path(__file__).parent / "results"
OUT = RESULTS / "seeds_induction.json"


def r4(x):
    "Numbers rounded to 4 decimals, as (nested) lists or a float (JSON)"
    t = torch.as_tensor(x, dtype=torch.float64).mul(1e4).round().div(1e4)
    return t.tolist()


def run_one(seed, num_layers, steps=None, norm=INDUCTION_MODEL["norm"]):
    "Train one model and measure it: one row of the JSON, and the model"
    kw = dict(INDUCTION_TRAINING)
    if steps is not None:
        kw.update(steps=steps, every=min(kw["every"], steps), cooldown=min(kw["cooldown"], steps))
    model = attention_only(num_layers, seed, norm=norm)
    t0 = time.process_time()
    def progress(c):
        s = c.scores
        print(f"  seed {seed} layers {num_layers} step {c.step}: loss first {s.loss_first:.3f} second "
              f"{s.loss_second:.3f}, best last-layer induction {s.induction[-1].max():.3f}, "
              f"{time.process_time() - t0:.0f} s CPU", flush=True)
    cps, _ = train_induction(model, seed=seed, progress=progress, **kw)
    cpu = time.process_time() - t0
    last = cps[-1].scores
    row = dict(seed=seed, layers=num_layers, norm=norm, steps=kw["steps"], cpu_s=round(cpu, 1),
               phase_change_tokens=phase_change(cps),
               checkpoints=[dict(step=c.step, tokens=c.tokens, loss_first=r4(c.scores.loss_first),
                                 loss_second=r4(c.scores.loss_second), icl=r4(c.scores.icl),
                                 induction=r4(c.scores.induction), previous=r4(c.scores.previous))
                            for c in cps])
    data = eval_batch(model)
    H = model.num_heads
    abl = [[None] * H for _ in range(num_layers)]
    for layer in range(num_layers):
        for head in range(H):
            with ablate(model, [(layer, head)]):
                s = head_scores(model, data)
            abl[layer][head] = dict(loss_first=r4(s.loss_first), loss_second=r4(s.loss_second))
    row["ablation"] = abl
    # heads that share the work: every last-layer head scoring >= 0.3, and all of layer 0
    groups = {"induction heads": [(num_layers - 1, h) for h in range(H)
                                  if last.induction[-1, h] >= 0.3]}
    if num_layers >= 2: groups["layer 0"] = [(0, h) for h in range(H)]
    row["group_ablation"] = {}
    for name, heads in groups.items():
        if not heads: continue
        with ablate(model, heads):
            s = head_scores(model, data)
        row["group_ablation"][name] = dict(heads=heads, loss_first=r4(s.loss_first),
                                           loss_second=r4(s.loss_second))
    row["final"] = dict(loss_first=r4(last.loss_first), loss_second=r4(last.loss_second))
    if num_layers >= 2:
        comp, base = k_composition(model)
        row["k_composition"], row["k_baseline"] = r4(comp), r4(base)
    return row, model


def same(a, b, path="row"):
    "Differences between two rows, the CPU times excepted"
    if isinstance(a, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k == "cpu_s": continue
            if k not in a or k not in b: out.append(f"{path}.{k} missing"); continue
            out += same(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list):
        if len(a) != len(b): return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a} != {b}"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--norm", default=INDUCTION_MODEL["norm"], choices=["none", "layer"])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT, help="where to write (merge by hand)")
    ap.add_argument("--save", type=Path, default=None, help="a folder for each model's final weights")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = args.out
    stored = json.loads(out.read_text()) if out.exists() else {}
    key = "runs" if args.steps is None else "quick"
    rows = {(r["seed"], r["layers"], r["steps"], r["norm"]): r for r in stored.get(key, [])}
    failed = False
    for seed in args.seeds:
        for layers in args.layers:
            row, model = run_one(seed, layers, args.steps, args.norm)
            best = max(max(h) for h in row["checkpoints"][-1]["induction"][-1:])
            print(f"seed {seed} layers {layers} norm {args.norm}: {row['cpu_s']} s CPU, phase change at "
                  f"{row['phase_change_tokens']} tokens, loss first {row['final']['loss_first']} second "
                  f"{row['final']['loss_second']}, best last-layer induction {best}", flush=True)
            k = (seed, layers, row["steps"], args.norm)
            if args.save is not None:
                args.save.mkdir(parents=True, exist_ok=True)
                torch.save(model.state_dict(), args.save / f"seed{seed}_layers{layers}_{args.norm}.pt")
            if args.check:
                diff = same(rows[k], row) if k in rows else [f"no stored row {k}"]
                for d in diff[:10]: print("  DIFFERENT", d)
                failed |= bool(diff)
                continue
            rows[k] = row
            stored[key] = sorted(rows.values(),
                                 key=lambda r: (r["norm"] != "none", r["layers"], r["seed"]))
            stored["settings"] = dict(model=INDUCTION_MODEL, training=INDUCTION_TRAINING,
                                      torch=torch.__version__)
            out.write_text(json.dumps(stored, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
