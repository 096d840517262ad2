"""The head analysis of the chapter "From the Transformer to GPT" (nbs/11c_gpt.ipynb) over several seeds:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gpt_heads.py [--seeds 3] [--jobs 3] [--out benchmarks/results/gpt_heads.json]

Trains the chapter's character-level model on Python's documentation topics once per seed (CHAR_LM, LM_TRAINING;
about a minute each on one thread) and measures each with `lm_report` below, through the chapter's functions: held-out
bits per character, the training time, each head's previous-token and induction score, the cost in bits per character
of both copies of a repeated random sequence. It also
measures one small configuration (SMALL: a few seconds), which tests/test_gpt.py re-runs to check that the script
reproduces what it wrote. With --jobs N, N seeds train at once, each in its own process on one thread (their
training times then include each other's load). The chapter reads the JSON; run this again after changing the model
or its training.
Run it with the AVX2 kernels of tools/kernels.sh (`source tools/kernels.sh` first) to reproduce the stored numbers.
"""
import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from transformer_nb.gpt import (
    CHAR_LM,
    LM_TRAINING,
    CharText,
    bits_per_char,
    char_lm,
    induction_scores,
    previous_token_scores,
    pydoc_text,
)

# the configuration the test re-runs: two layers of width 32, 30 steps
SMALL = dict(model_kw=dict(d_model=32, num_heads=2, d_ff=64, num_layers=2, max_len=32),
             train_kw=dict(steps=30, batch_size=8, context=32, lr=3e-3, warmup=5))


def lm_report(text:CharText, seed:int=0, model_kw:dict|None=None, train_kw:dict|None=None)->dict:
    "Train one model (char_lm's arguments) and measure it: one row of gpt_heads.json"
    model, losses, seconds = char_lm(text, seed, model_kw, train_kw)
    context = (train_kw or LM_TRAINING)["context"]
    n = len(text.valid) // context
    held = text.valid[:min(n, 64) * context].view(-1, context)
    # the 60 most frequent characters of the training text
    pool = torch.bincount(text.train, minlength=len(text.chars)).argsort(descending=True)[:60]
    ind = induction_scores(model, pool, min(24, model.max_len // 2), seed=seed)
    r = lambda t: [[round(v, 5) for v in row] for row in t.tolist()]
    return {
        "seed": seed,
        "bits_per_char": round(bits_per_char(model, text.valid, context), 5),
        "final_loss": round(losses[-1], 5),  # nats, as train_lm returns it
        "train_s": round(seconds, 1),
        "previous_token": r(previous_token_scores(model, held)),
        "induction": r(ind.scores),
        "loss_first": round(ind.loss_first, 5),  # bits per character
        "loss_second": round(ind.loss_second, 5),
    }


def one_seed(seed:int)->dict:
    torch.set_num_threads(1)
    return lm_report(pydoc_text(), seed)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3, help="seeds 0 ... N-1 (default 3)")
    p.add_argument("--jobs", type=int, default=1, help="seeds trained at once (default 1)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "gpt_heads.json")
    a = p.parse_args()
    torch.set_num_threads(1)
    res = {"model": CHAR_LM, "training": LM_TRAINING, "small_config": SMALL,
           "small": lm_report(pydoc_text(), 0, **SMALL), "jobs": a.jobs, "seeds": []}
    with ProcessPoolExecutor(a.jobs) as pool:
        for r in pool.map(one_seed, range(a.seeds)):
            res["seeds"].append(r)
            print(f"seed {r['seed']}: {r['bits_per_char']:.3f} bits/char, {r['train_s']:.0f} s, "
                  f"copy {r['loss_first']:.2f} -> {r['loss_second']:.2f} bits/char", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
