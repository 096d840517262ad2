"""The benchmark of the chapter "Benchmark" (nbs/13_benchmark.ipynb), measured by nbs/12a_bench.ipynb's machinery
(`transformer_nb.book.bench`): `make bench`, or

    .venv/bin/python benchmarks/run.py [--reps 9] [--threads N] [--quick] [--compile] [--runs 3]
                                       [--out benchmarks/results/cpu.json]
    .venv/bin/python benchmarks/run.py --gpt [--runs 3] [--reps 9] [--threads N] [--quick]

The readable path, the fast path and torch.nn.Transformer, interleaved in one process: training tokens/s of the small
configuration at lengths 32 and 128 (dropout 0.1 and 0; with fused and with torch's default Adam), the ladder (each
optimisation of the fast path switched on in turn, every rung checked against the readable path first), bfloat16
autocast, forward tokens/s of the paper's base model, greedy decoding with and without the key/value cache, peak
memory, and the fast path's share of the machine's matrix-multiply peak; then it profiles training at length 128,
the forward pass and decoding (where each spends its operator time, by group of operators), and with --compile
times one elementwise kernel returning floats and one returning a boolean mask, eager and compiled.
It prints the ratios and the profiles as a table (`profile_table`), and writes the full result as JSON, which the
chapter draws. One run with --compile took about 5 minutes on 2 cores (three took under 16; about 4.5 minutes each
on a busy day); close other programs first. With --runs N it runs N times in a row, writes each result into
results/runs/ (the chapter draws the spread of every ratio over them) and the last one to --out, and prints each
ratio's lowest and highest value and the profiles of all runs. This is a benchmark, not a test: it asserts nothing
about speed (it does refuse to time a rung of the ladder that computes something other than the readable path).

With --gpt it runs only the decoder-only comparison of chapter 11c's model against a causal nn.TransformerEncoder and
Hugging Face's GPT2LMHeadModel (`bench_gpt`: a training step, and greedy generation at batch 1 and 8; tokens/s and
peak memory) and writes benchmarks/results/gpt.json (with --runs N, results/runs/gpt-1.json ...). It needs
`transformers` (`make bench` installs it, pinned in tools/bench-constraints.txt).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

from transformer_nb.book.bench import (
    bench_gpt,
    gpt_summary,
    load_results,
    run_benchmark,
    save_results,
    spread,
    summary,
)
from transformer_nb.book.benchmark import profile_table


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=9, help="timed rounds per measurement (default 9)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="toy sizes: checks that it runs; writes nothing")
    p.add_argument("--compile", action="store_true", help="also train the fast path through torch.compile")
    p.add_argument("--runs", type=int, default=1, help="run the benchmark this many times (default 1)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "cpu.json",
                   help="where to write the result (default benchmarks/results/cpu.json)")
    p.add_argument("--gpt", action="store_true",
                   help="only the decoder-only model against nn.TransformerEncoder and GPT-2")
    a = p.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    if a.gpt: return gpt_main(a)
    if a.runs > 1:  # each run in its own process: compiled code's threads linger after it
        runs, folder = [], a.out.parent / "runs"
        for i in range(1, a.runs + 1):
            print(f"\n=== run {i} of {a.runs}", flush=True)
            out = folder / f"{a.out.stem}-{i}.json"
            args = [sys.executable, __file__, "--reps", str(a.reps), "--out", str(out)]
            args += ["--compile"] * a.compile + ["--quick"] * a.quick
            if a.threads: args += ["--threads", str(a.threads)]
            subprocess.run(args, check=True)
            if not a.quick: runs.append(load_results(out))
        if runs:
            print(f"\nlowest and highest of {a.runs} runs")
            for k, (lo, hi) in spread(runs).items(): print(f"  {k:68s} {lo:6.2f} {hi:6.2f}")
            print("\nwhere the time goes\n" + profile_table(runs))
            print(f"\nwrote {save_results(runs[-1], a.out)}")
        return
    res = run_benchmark(reps=a.reps, quick=a.quick, compiled=a.compile, log=lambda m: print(m, flush=True))
    print(f"\n{res['processor']}, {res['threads']} threads, torch {res['torch']}; "
          f"matrix-multiply peak {res['matmul_peak'] / 1e9:.0f} GFLOP/s")
    for k, v in summary(res).items(): print(f"  {k:68s} {v:6.2f}")
    for k, r in res.get("compiled", {}).items():
        print(f"  {'compile time, ' + k + ' (s)':68s} {r['compile_s']:6.1f}")
    print("\nwhere the time goes\n" + profile_table([res]))
    if not a.quick: print(f"\nwrote {save_results(res, a.out)}")

def gpt_main(a):
    "--gpt: the decoder-only comparison, once or --runs N times (each in its own process)"
    out = a.out if a.out.name != "cpu.json" else a.out.with_name("gpt.json")
    if a.runs > 1:
        runs, folder = [], out.parent / "runs"
        for i in range(1, a.runs + 1):
            print(f"\n=== run {i} of {a.runs}", flush=True)
            path = folder / f"{out.stem}-{i}.json"
            args = [sys.executable, __file__, "--gpt", "--reps", str(a.reps), "--out", str(path)]
            args += ["--quick"] * a.quick + (["--threads", str(a.threads)] if a.threads else [])
            subprocess.run(args, check=True)
            if not a.quick: runs.append(json.loads(path.read_text()))
        if runs:
            ratios = [gpt_summary(r) for r in runs]
            print(f"\nlowest and highest of {a.runs} runs")
            for k in ratios[0]:
                print(f"  {k:60s} {min(r[k] for r in ratios):6.2f} {max(r[k] for r in ratios):6.2f}")
            out.write_text(json.dumps(runs[-1], indent=1) + "\n"); print(f"\nwrote {out}")
        return
    res = bench_gpt(reps=a.reps, quick=a.quick, log=lambda m: print(m, flush=True))
    res["torch"], res["threads"] = torch.__version__, torch.get_num_threads()
    import transformers
    res["transformers"] = transformers.__version__
    print(f"\ntorch {res['torch']}, transformers {res['transformers']}, {res['threads']} threads")
    for k, v in gpt_summary(res).items(): print(f"  {k:60s} {v:6.2f}")
    if not a.quick:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1) + "\n"); print(f"wrote {out}")


if __name__ == "__main__":
    main()
