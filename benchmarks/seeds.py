"""Claims about trained heads, measured over seeds: the recipes of chapters 10 (dates, reversal) and 11a (pronouns).

    source tools/kernels.sh
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/seeds.py pronouns [--seeds 0 1 2 3 4 5 6 7 8 9] [--splits 0 1]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/seeds.py training [--seeds 0 1 2 3 4 5 6 7 8 9]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/seeds.py reverse --seeds 0 --steps 40 --check

A chapter trains one model and draws its attention; whether what it sees is a property of the recipe or of that
one seed is a question for many models. This script trains each chapter's recipe, unchanged, once per seed (and,
for the pronouns, per held-out split), and records per model: held-out accuracy, a score per layer and head for
every claim the chapters make about their heads, and, for the pronouns, the accuracy with each head removed
(`ablate_heads`). It writes benchmarks/results/seeds_pronouns.json (`pronouns`) and
benchmarks/results/seeds_training.json (`training`: the date, reversal and copy models; `dates`, `reverse` or `copy` alone
replace only their rows); chapters 10 and 11a read them. One training run takes 10-40 s of one core, so the full
set (20 pronoun models; 10 date, 10 reversal and 10 copy models) takes about 20 minutes.

The results are deterministic on one thread with the AVX2 kernels of tools/kernels.sh: --check trains the given
seeds again and compares every number with the stored rows (the training times excepted), exiting with status 1
on any difference. --steps N (dates and reverse only) trains N steps instead of the recipe's and keeps those rows
apart ("quick"; chapter 10 reads only the date models of 1000 steps, 32 wide, the recipe of before run twice as
long, with its cooldown over the last 400). --d-model D (dates only) trains a model D wide with a feed-forward network
of 2D instead of the recipe's 64 and 128, rows kept apart as "other_widths" (chapter 10 reads those of 32, the width
of every other task, which the date recipe had until its shortfall was measured). tests/test_seeds.py
checks a quick row, a reversal model of 40 steps, in a few seconds, so that a change to the training or the measures
that the stored results do not reflect fails a test.

A date row also holds its held-out exact match every 100 steps (`curve`, the weights as they are then) and its
wrong dates counted by their first wrong character of YYYY-MM-DD (`first_wrong`). `dates.old_recipe` keeps the five
rows of the date recipe before issue 43 (factor 0.5, no cooldown, 5 checkpoints averaged), written by this script
then and left alone since: chapter 10 compares the recipe with them.
"""
import argparse
import json
import os
import random
import re
import sys
import time
from pathlib import Path

import torch

from transformer_nb.data import make_batch, make_task
from transformer_nb.pronouns import (
    PRONOUN_MODEL,
    PRONOUN_TRAINING,
    measure_pronoun_model,
    train_pronoun_model,
)
from transformer_nb.reading import (
    ablation_costs,
    attention_maps,
    head_sharpness,
    teacher_forced_accuracy,
)
from transformer_nb.training import TASK_SETTINGS, alignment_weight, train_task

RESULTS = Path(__file__).parent / "results"
FILES = {"pronouns": "seeds_pronouns.json", "dates": "seeds_training.json",
         "reverse": "seeds_training.json", "copy": "seeds_training.json"}
N_ALIGN = 200  # held-out examples of the alignment measures (as in chapter 10)
# the chapter's two examples: (source, target)
SUNDAY = ("Sunday, 22 November 2026", "2026-11-22")
NUMERIC = ("11/22/2026", "2026-11-22")


def r4(t):
    "Numbers rounded to 4 decimals, as nested lists (JSON)"
    return torch.as_tensor(t, dtype=torch.float64).mul(1e4).round().div(1e4).tolist()


def year_alignment(src, tgt):
    "Query q writes year digit q, which sits at the only four-digit number of the source"
    start = re.search(r"\d{4}", src).start()
    return [(q, start + q) for q in range(4)]


def mirror(src, tgt):
    "Query q of a reversal writes source digit S - 1 - q"
    return [(q, len(src) - 1 - q) for q in range(len(src))]


def span_weight(w, queries, keys):
    "(L, H): the weight the given queries put on the given keys (summed over keys), averaged over queries"
    return w[:, :, queries][..., keys].sum(-1).mean(-1)


@torch.no_grad()
def measure_dates(t):
    "The numbers behind every sentence of chapter 10 about the date model's heads"
    model, vocab, valid = t.model, t.task.vocab, t.task.valid
    acc = teacher_forced_accuracy(model, vocab, valid)
    out = dict(held_out=len(valid), sequences=r4(acc.sequences), tokens=r4(acc.tokens))
    # the wrong dates by their first wrong character of YYYY-MM-DD (the field that fails)
    b = make_batch(valid, vocab)
    pred = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask, b.src_mask).argmax(-1)  # (B, T)
    bad = (pred != b.tgt_out) & (b.tgt_out != vocab.pad)
    first = [int(r.nonzero()[0]) for r in bad if r.any()]
    out["first_wrong"] = {str(i): first.count(i) for i in sorted(set(first))}
    # over N_ALIGN held-out dates: the year's alignment, as chapter 10 measures it
    out["year_weight"] = r4(alignment_weight(model, vocab, valid[:N_ALIGN], year_alignment))
    # the first example: "Sunday, 22 November 2026"; keys 0-5 Sunday, 8-9 the day, 20-23 the year;
    # queries 0-3 write the year, 5-6 the month, 8-9 the day
    attn, *_ = attention_maps(model, vocab, *SUNDAY)
    c = attn.cross[:, 0]                                             # (L, H, T, S)
    diag = torch.stack([c[:, :, q, 20 + q] for q in range(4)], -1)   # (L, H, 4)
    top = torch.stack([c[:, :, q].argmax(-1) == 20 + q for q in range(4)], -1)
    out["sunday"] = dict(
        year_on_digit=r4(diag.mean(-1)),                 # the chapter picks its two heads by this
        year_argmax_on_digit=r4(top.float().mean(-1)),   # share of year queries whose top key is their digit
        year_on_year=r4(span_weight(c, [0, 1, 2, 3], [20, 21, 22, 23])),
        day_on_day=r4(span_weight(c, [8, 9], [8, 9])),
        month_on_month=r4(span_weight(c, [5, 6], list(range(11, 19)))),
        # Sunday's 6 characters of 24: uniform attention would put 0.25 on them
        weekday_mean=r4(span_weight(c, list(range(c.shape[2])), list(range(6)))),
        weekday_max=r4(c[..., :6].sum(-1).max(-1).values))
    # the second example: "11/22/2026"; keys 0-1 month, 3-4 day, 6-9 year
    attn2, *_ = attention_maps(model, vocab, *NUMERIC)
    c2 = attn2.cross[:, 0]
    out["numeric"] = dict(year_on_year=r4(span_weight(c2, [0, 1, 2, 3], [6, 7, 8, 9])),
                          month_on_month=r4(span_weight(c2, [5, 6], [0, 1])),
                          day_on_day=r4(span_weight(c2, [8, 9], [3, 4])))
    # encoder self-attention over the same N_ALIGN dates: how local, and the year's digits on each other
    enc_local, enc_year, uniform, local_uniform = 0, 0, 0, 0
    dec = torch.zeros(4, *attn.decoder.shape[:1], attn.decoder.shape[2])  # self, previous, <s>, dash
    for s, tgt in valid[:N_ALIGN]:
        a, *_ = attention_maps(model, vocab, s, tgt)
        e = a.encoder[:, 0]                                          # (L, H, S, S)
        S = e.shape[-1]
        near = (torch.arange(S)[:, None] - torch.arange(S)[None, :]).abs() <= 1
        enc_local = enc_local + (e * near).sum(-1).mean(-1)
        local_uniform += near.sum() / S ** 2                        # (what uniform weights put there)
        y = list(range(re.search(r"\d{4}", s).start(), re.search(r"\d{4}", s).start() + 4))
        enc_year = enc_year + span_weight(e, y, y)
        uniform += 4 / S
        d = a.decoder[:, 0]                                          # (L, H, T, T), T = 11
        q = torch.arange(1, d.shape[-1])
        dec[0] += d[:, :, q, q].mean(-1)
        dec[1] += d[:, :, q, q - 1].mean(-1)
        dec[2] += d[:, :, q, 0].mean(-1)
        # the month's queries (6, 7) and the day's (9, 10) on the dash that opened their field
        dec[3] += d[:, :, [6, 7, 9, 10], [5, 5, 8, 8]].mean(-1)
    n = len(valid[:N_ALIGN])
    out["encoder"] = dict(within_one=r4(enc_local / n), within_one_uniform=r4(local_uniform / n),
                          year_on_year=r4(enc_year / n), year_uniform=r4(uniform / n))
    # queries 1-10 of "<s>YYYY-MM-DD": uniform weights put 1 / (q + 1) on any one key
    out["decoder"] = dict(zip(("self", "previous", "start", "last_dash"), r4(dec / n)),
                          uniform=r4(sum(1 / (q + 1) for q in range(1, 11)) / 10))
    return out


def repeats(s):
    "How many neighbours of a digit string are the same digit: 2 in 44556"
    return sum(a == b for a, b in zip(s, s[1:]))


@torch.no_grad()
def by_group(t, key):
    "Held-out exact match (teacher-forced) of each group of strings: {group: [right, of]}"
    groups = {}
    for pair in t.task.valid: groups.setdefault(key(pair[0]), []).append(pair)
    return {str(g): [round(teacher_forced_accuracy(t.model, t.task.vocab, ps).sequences * len(ps)), len(ps)]
            for g, ps in sorted(groups.items())}


def run_probe(n=50, length=12):
    "{k: n strings of `length` digits, each with one digit written over k places in a row}, the same for every model"
    rng, probe = random.Random("run probe"), {}
    for k in range(1, length + 1):
        probe[k] = []
        for _ in range(n):
            s, i = rng.choices("0123456789", k=length), rng.randint(0, length - k)
            s[i:i + k] = rng.choice("0123456789") * k
            probe[k].append("".join(s))
    return probe


@torch.no_grad()
def measure_digits(t):
    """Held-out accuracy of a copy or reversal model, its exact match by length and by repeated neighbours, on
    12-digit strings by the length of a run of one digit in them (`run_probe`), and on every string of one repeated
    digit (1 to 12 of each digit)"""
    m, vocab, valid = t.model, t.task.vocab, t.task.valid
    f = (lambda s: s[::-1]) if t.task.name == "reverse" else (lambda s: s)
    right = lambda ss: round(teacher_forced_accuracy(m, vocab, [(s, f(s)) for s in ss]).sequences * len(ss))
    one = [d * n for d in "0123456789" for n in range(1, 13)]
    wrong = [s for s in one if right([s]) == 0]
    acc = teacher_forced_accuracy(m, vocab, valid)
    return dict(held_out=len(valid), sequences=r4(acc.sequences), tokens=r4(acc.tokens),
                by_length=by_group(t, len), by_repeats=by_group(t, lambda s: min(repeats(s), 3)),
                by_run={str(k): [right(ss), len(ss)] for k, ss in run_probe().items()},
                one_digit=[len(one) - len(wrong), len(one)], one_digit_wrong=wrong)


@torch.no_grad()
def measure_reverse(t):
    """Held-out accuracy, each head's weight on the mirrored source position, and, for every head of every kind,
    the held-out accuracy lost without it and how peaked its maps are (chapter 10)"""
    m, vocab, valid = t.model, t.task.vocab, t.task.valid
    return dict(measure_digits(t),
                mirror_weight=r4(alignment_weight(m, vocab, valid[:N_ALIGN], mirror)),
                ablation={k: r4(v) for k, v in ablation_costs(m, vocab, valid).items()},
                sharpness={k: r4(v) for k, v in head_sharpness(m, vocab, valid).items()})


def run_one(kind, seed, split=0, steps=None, runs=None, d_model=None):
    """Train one model of the recipe (or of `steps` steps, or with another share of strings given a run, or
    `d_model` wide with a feed-forward network twice that) and measure it: a row of the results"""
    t0 = time.perf_counter()
    if kind == "pronouns":
        model, task, history = train_pronoun_model(seed=seed, split=split)
        seconds = time.perf_counter() - t0
        row = dict(seed=seed, split=split, final_loss=r4(history.loss[-1]),
                   **measure_pronoun_model(model, task))
    else:
        curve, valid = [], None
        if kind == "dates":
            # the held-out exact match of the weights every 100 steps, as they are then
            valid = make_task("dates", seed=seed)
            def every_100(step, model):
                if step % 100: return
                model.eval()
                curve.append([step, r4(teacher_forced_accuracy(model, valid.vocab, valid.valid)
                                       .sequences)])
                model.train()
        wide = dict(d_model=d_model, d_ff=2 * d_model) if d_model else {}
        t = train_task(kind, seed=seed, steps=steps, progress=False, runs=runs,
                       on_step=every_100 if kind == "dates" else None, **wide)
        seconds = time.perf_counter() - t0
        measure = {"dates": measure_dates, "reverse": measure_reverse, "copy": measure_digits}[kind]
        if runs is not None: measure = measure_digits
        row = dict(seed=seed, **({"steps": steps} if steps else {}), **wide,
                   **({"runs": runs} if runs is not None else {}), final_loss=r4(t.history.loss[-1]),
                   **measure(t), **({"curve": curve} if curve else {}))
    return dict(row, seconds=round(seconds, 1))


def recipe(kind):
    "What a row was trained with: stored beside the rows, so that a changed recipe shows"
    if kind == "pronouns": return dict(model=PRONOUN_MODEL, training=PRONOUN_TRAINING)
    sizes = "".join(f", {k}={v}" for k, v in TASK_SETTINGS[kind].get("model", {}).items())
    return dict(TASK_SETTINGS[kind], n_train=20_000, n_valid=1000, model="task_config" + sizes)


def key(row): return (row["seed"], row.get("split", 0), row.get("runs"), row.get("d_model"))


def differences(old, new, path=""):
    "Where two rows differ (the training time excepted)"
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new)) if k != "seconds"
                for d in differences(old.get(k), new.get(k), f"{path}.{k}")]
    return [] if old == new else [f"{path.lstrip('.')}: stored {old!r:.80}, now {new!r:.80}"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["pronouns", "training", "dates", "reverse", "copy"])
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    p.add_argument("--splits", type=int, nargs="+", default=[0, 1],
                   help="held-out splits of the pronoun task (default 0 1)")
    p.add_argument("--steps", type=int, default=None,
                   help="dates, reverse and copy: train this many steps, rows kept apart as 'quick' (default: the recipe's)")
    p.add_argument("--runs", type=float, default=None,
                   help="reverse and copy: this share of training strings given a run of one digit, rows kept "
                        "apart as 'other_runs' (default: the recipe's)")
    p.add_argument("--d-model", type=int, default=None,
                   help="dates: a model this wide (d_ff twice that) instead of the recipe's 64, rows kept apart as "
                        "'other_widths' (default: the recipe's)")
    p.add_argument("--check", action="store_true",
                   help="train again and compare with the stored rows instead of writing")
    p.add_argument("--out", type=Path, default=None, help="directory of the results (default benchmarks/results)")
    a = p.parse_args()
    if any(s < 0 for s in a.seeds + a.splits):
        p.exit(2, f"seeds.py: error: --seeds and --splits must be >= 0, got {a.seeds} and {a.splits}\n")
    if a.steps is not None and (a.steps < 1 or a.what == "pronouns"):
        p.exit(2, f"seeds.py: error: --steps must be >= 1 and is for dates, reverse or training; got {a.steps} "
                  f"for {a.what}\n")
    if a.d_model is not None and (a.d_model < 4 or a.d_model % 4 or a.what != "dates"):
        p.exit(2, f"seeds.py: error: --d-model is for dates, a multiple of the 4 heads; got {a.d_model} for {a.what}\n")
    torch.set_num_threads(1)
    folder = a.out or RESULTS
    kinds = ["dates", "reverse", "copy"] if a.what == "training" else [a.what]
    failed = False
    for kind in kinds:
        path = folder / FILES[kind]
        stored = json.loads(path.read_text()) if path.exists() else {}
        part = ("quick" if a.steps else "other_runs" if a.runs is not None else "other_widths" if a.d_model
                else "runs")
        rows = stored.get(kind, {}).get(part, [])
        splits = a.splits if kind == "pronouns" else [0]
        for seed in a.seeds:
            for split in splits:
                row = run_one(kind, seed, split, a.steps, a.runs, a.d_model)
                print(f"{kind} seed {seed}" + (f" split {split}" if kind == "pronouns" else "")
                      + f": {row['seconds']:.1f} s", flush=True)
                if a.check:
                    old = [r for r in rows if key(r) == key(row)]
                    # as stored: JSON has lists where the row has tuples
                    diff = (differences(old[0], json.loads(json.dumps(row))) if old else ["no stored row"])
                    diff += differences(stored[kind]["recipe"], recipe(kind), "recipe") if old else []
                    for d in diff: print(f"  differs: {d}")
                    failed |= bool(diff)
                    if not diff: print("  the same as the stored row")
                else:
                    # written after every row: a long run stopped keeps the rows it made
                    rows = sorted([r for r in rows if key(r) != key(row)] + [row], key=key)
                    stored[kind] = dict(stored.get(kind, {}), recipe=recipe(kind), **{part: rows})
                    stored["environment"] = dict(torch=torch.__version__, threads=1,
                                                 kernels=os.environ.get("ATEN_CPU_CAPABILITY", "default"))
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(stored, indent=1) + "\n")
                    print(f"wrote {path}")
    if failed: sys.exit(1)


if __name__ == "__main__":
    main()
