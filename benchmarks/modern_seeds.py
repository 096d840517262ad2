"""What each change of chapter 11f buys: chapter 11c's character model with each switch alone and all together, per seed.

    source tools/kernels.sh
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/modern_seeds.py [--seeds 0 1 2 3 4] [--configs rms rope]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/modern_seeds.py --configs llama --seeds 0 --steps 5 --check

Each configuration is chapter 11c's GPT (CHAR_LM: 2 layers, d_model 128, 4 heads, d_ff 512, sinusoidal positions,
GELU, pre-LN LayerNorm, biases) with one switch of chapter 11f turned, or all of them (`llama`: the Llama-style model
and QK-norm, which Llama lacks), trained with 11c's recipe unchanged (LM_TRAINING: 450 steps of 24 windows of 64
characters, AdamW at 4e-3 for every configuration) on 11c's text (pydoc_text()). Per model it records the held-out
bits per character (bits_per_char over the whole held-out text, as chapter 11c measures it), the last training loss,
the parameter count and the CPU time of the training. SwiGLU takes d_ff = 344 instead of 512 (about 8/3 d_model, as
Llama does), so that its feed-forward network has about as many weights as the GELU one. It writes
benchmarks/results/seeds_modern.json, one row at a time, so that an interrupted run keeps the rows it finished (and
another run's rows written meanwhile stay); chapter 11f reads it.
The stored rows: every configuration but no_bias, seeds 0-4, each 45-72 s of CPU on a 2-core machine (seeds 0-3 of
the 2017 block and of `llama` shared with several other jobs).

The results are deterministic on one thread with the AVX2 kernels of tools/kernels.sh: --check trains the given
configurations and seeds again and compares every number with the stored rows (the CPU times excepted), exiting with
status 1 on any difference. --steps N trains N steps and keeps those rows apart ("quick"; the chapter does not read
them): tests/test_modern_seeds.py checks such a row, `llama` after 5 steps, in a few seconds.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

from transformer_nb.gpt import (
    CHAR_LM,
    GPT,
    LM_TRAINING,
    bits_per_char,
    pydoc_text,
    train_lm,
)

RESULTS = Path(__file__).parent / "results"
OUT = RESULTS / "seeds_modern.json"
SWIGLU = dict(activation="swiglu", d_ff=344)   # about 8/3 d_model: the GELU network's weight count
# name: (label, GPT's keywords on top of CHAR_LM)
CONFIGS = {
    "2017": ("2017 (chapter 11c)", {}),
    "llama": ("all (Llama + QK-norm)", dict(norm="rms", positions="rope", n_kv_heads=2, qk_norm=True,
                                           bias=False, **SWIGLU)),
    "rms": ("RMSNorm", dict(norm="rms")),
    "rope": ("RoPE", dict(positions="rope")),
    "swiglu": ("SwiGLU", SWIGLU),
    "gqa": ("GQA, G = 2", dict(n_kv_heads=2)),
    "qk_norm": ("QK-norm", dict(qk_norm=True)),
    "no_bias": ("no biases", dict(bias=False)),
}


def run_one(config, seed, text, steps=None):
    "Train one model with 11c's recipe and measure it: one row of the JSON"
    train_kw = dict(LM_TRAINING) if steps is None else dict(LM_TRAINING, steps=steps,
                                                            warmup=min(LM_TRAINING["warmup"], steps))
    torch.manual_seed(seed)
    model = GPT(len(text.chars), **{**CHAR_LM, **CONFIGS[config][1]})
    t0 = time.process_time()
    losses = train_lm(model, text.train, seed=seed, **train_kw)
    cpu = time.process_time() - t0
    bits = bits_per_char(model, text.valid, train_kw["context"])
    return dict(config=config, seed=seed, steps=train_kw["steps"], bits_per_char=round(bits, 5),
                final_loss=round(losses[-1], 5), params=sum(p.numel() for p in model.parameters()),
                cpu_s=round(cpu, 1))


def differences(old, new):
    "Where two rows differ (the CPU time excepted)"
    return [f"{k}: stored {old.get(k)!r}, now {new.get(k)!r}" for k in sorted(set(old) | set(new))
            if k != "cpu_s" and old.get(k) != new.get(k)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(5)))
    p.add_argument("--configs", nargs="+", default=[c for c in CONFIGS if c != "no_bias"], choices=list(CONFIGS),
                   help="default: all but no_bias (bias=False is part of the llama configuration)")
    p.add_argument("--steps", type=int, default=None,
                   help="train this many steps, rows kept apart as 'quick' (default: 11c's 450)")
    p.add_argument("--check", action="store_true",
                   help="train again and compare with the stored rows instead of writing")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    if any(s < 0 for s in a.seeds):
        p.exit(2, f"modern_seeds.py: error: --seeds must be >= 0, got {a.seeds}\n")
    if a.steps is not None and a.steps < 1:
        p.exit(2, f"modern_seeds.py: error: --steps must be >= 1, got {a.steps}\n")
    torch.set_num_threads(1)
    text = pydoc_text()
    stored = json.loads(a.out.read_text()) if a.out.exists() else {}
    key = "runs" if a.steps is None else "quick"
    rows = {(r["config"], r["seed"], r["steps"]): r for r in stored.get(key, [])}
    failed = False
    for seed in a.seeds:      # every configuration for a seed, then the next: a partial run covers them all
        for config in a.configs:
            row = run_one(config, seed, text, a.steps)
            print(f"{config} seed {seed}: {row['bits_per_char']} bits/char, final loss {row['final_loss']}, "
                  f"{row['params']} parameters, {row['cpu_s']} s CPU", flush=True)
            k = (config, seed, row["steps"])
            if a.check:
                diff = differences(rows[k], row) if k in rows else [f"no stored row {k}"]
                for d in diff: print("  DIFFERENT", d)
                if not diff: print("  the same as the stored row")
                failed |= bool(diff)
                continue
            # read the file again before writing: rows another run wrote meanwhile stay
            stored = json.loads(a.out.read_text()) if a.out.exists() else {}
            rows = {(r["config"], r["seed"], r["steps"]): r for r in stored.get(key, [])}
            rows[k] = row
            order = list(CONFIGS)
            stored[key] = sorted(rows.values(), key=lambda r: (order.index(r["config"]), r["steps"], r["seed"]))
            stored["configs"] = {n: dict(label=lab, model=dict(CHAR_LM, **kw)) for n, (lab, kw) in CONFIGS.items()}
            stored["training"] = LM_TRAINING
            stored["torch"] = torch.__version__
            a.out.write_text(json.dumps(stored, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
