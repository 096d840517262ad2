"""The benchmark of the chapter "Benchmark" (nbs/13_benchmark.ipynb): `make bench`, or

    .venv/bin/python benchmarks/run.py [--reps 9] [--threads N] [--quick] [--out benchmarks/results/cpu.json]

The readable path, the fast path and torch.nn.Transformer, interleaved in one process: training tokens/s of the small
configuration at lengths 32 and 128 (dropout 0.1 and 0), forward tokens/s of the paper's base model, greedy decoding
with and without the key/value cache, peak memory, and the fast path's share of the machine's matrix-multiply peak.
It prints the ratios and writes the full result as JSON, which the chapter draws. It takes under 2 minutes on 2 cores;
close other programs first. This is a benchmark, not a test: it asserts nothing.
"""
import argparse
from pathlib import Path
import torch
from transformer_nb.book.benchmark import run_benchmark, summary, save_results


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=9, help="timed rounds per measurement (default 9)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="toy sizes: checks that it runs; writes nothing")
    p.add_argument("--compile", action="store_true", help="also train the fast path through torch.compile")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "cpu.json",
                   help="where to write the result (default benchmarks/results/cpu.json)")
    a = p.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    res = run_benchmark(reps=a.reps, quick=a.quick, compiled=a.compile, log=lambda m: print(m, flush=True))
    print(f"\n{res['processor']}, {res['threads']} threads, torch {res['torch']}; "
          f"matrix-multiply peak {res['matmul_peak'] / 1e9:.0f} GFLOP/s")
    for k, v in summary(res).items(): print(f"  {k:58s} {v:6.2f}")
    if not a.quick: print(f"\nwrote {save_results(res, a.out)}")


if __name__ == "__main__":
    main()
