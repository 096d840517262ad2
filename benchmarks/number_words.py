"""The numbers chapter's recipe over several seeds: train English -> German and English -> French number words
(chapter 11b, `transformer_nb.numbers`) once per seed (each seed also draws its own held-out split), and write,
per run, held-out exact match, the alignment and crossing shares of every cross-attention head, the diagonal
baseline and the ablation table (`number_report`).

    python benchmarks/number_words.py                      # 5 seeds x 2 languages -> benchmarks/results/numbers.json
    python benchmarks/number_words.py --langs de --seeds 0 --steps 30 --print   # one small run, printed as JSON

The committed file also holds, under "check", the small run that tests/test_numbers.py re-runs and compares.
Runs on one thread with the AVX2 kernels of tools/kernels.sh (set them in the environment, as `make` does),
so that the numbers are reproduced exactly."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "numbers.json"
CHECK = dict(lang="de", seed=0, steps=30)  # the small run the test repeats


def run(lang: str, seed: int, steps: int | None) -> dict:
    "Train one run and report it (`number_report`)"
    from transformer_nb.numbers import number_report, train_numbers
    return number_report(train_numbers(lang, seed=seed, steps=steps))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--langs", nargs="+", default=["de", "fr"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, default=None, help="default: NUMBER_SETTINGS")
    p.add_argument("--print", action="store_true", help="print the runs as JSON, write nothing")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    from transformer_nb.numbers import NUMBER_MODEL, NUMBER_SETTINGS
    runs = []
    for lang in args.langs:
        for seed in args.seeds:
            t0 = time.perf_counter()
            runs.append(run(lang, seed, args.steps))
            print(f"{lang} seed {seed}: exact {runs[-1]['exact']['all']:.1%}, "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.print:
        print(json.dumps(runs, indent=1))
        return 0
    result = dict(
        recipe=dict(model=NUMBER_MODEL, settings=NUMBER_SETTINGS),
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
