"""Chapter 11d's questions over several seeds: train the numbers recipe (chapter 11b, English -> German) once per
seed and record, per model (`transformer_nb.inside.inside_report`): the share of the clean-corrupt logit difference
restored by patching each head, each sublayer and each residual position; each head's ablation cost on the same
metric and on teacher-forced accuracy (chapter 10's `ablation_costs`); their rank correlations; the direct logit
attribution and its error; the recomposition error of the residual stream; and the logit lens over the held-out set.

    source tools/kernels.sh
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/inside.py                # 5 seeds -> benchmarks/results/inside.json
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/inside.py --seeds 0 --steps 30 --print   # one small run, printed

The committed file also holds, under "check", the small run (seed 0, 30 steps) that tests/test_inside.py trains
again and compares. One thread, the AVX2 kernels of tools/kernels.sh: the numbers are reproduced exactly.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "inside.json"
CHECK = dict(lang="de", seed=0, steps=30)  # the small run the test repeats


def run(lang: str, seed: int, steps: int | None) -> dict:
    "Train one numbers model and look inside it (`inside_report`)"
    from transformer_nb.inside import inside_report
    from transformer_nb.numbers import train_numbers
    start = time.perf_counter()
    row = inside_report(train_numbers(lang, seed=seed, steps=steps))
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lang", default="de")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, default=None, help="default: NUMBER_SETTINGS")
    p.add_argument("--print", action="store_true", help="print the runs as JSON, write nothing")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    from transformer_nb.numbers import NUMBER_MODEL, NUMBER_SETTINGS
    runs = []
    for seed in args.seeds:
        runs.append(run(args.lang, seed, args.steps))
        r = runs[-1]
        print(f"{args.lang} seed {seed}: best head {r['best_head']} {r['best_share']:.1%}, "
              f"spearman {r['spearman']}, {r['seconds']:.0f} s", file=sys.stderr)
    if args.print:
        print(json.dumps(runs, indent=1))
        return 0
    result = dict(
        recipe=dict(model=NUMBER_MODEL, settings=NUMBER_SETTINGS, lang=args.lang),
        torch=torch.__version__, threads=1,
        kernels=os.environ.get("ATEN_CPU_CAPABILITY", "default"),
        note="seconds are wall-clock on a shared 2-core machine under other jobs' load",
        runs=runs,
        check=run(CHECK["lang"], CHECK["seed"], CHECK["steps"]),
    )
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
