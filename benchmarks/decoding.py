"""Benchmark (not a test): decoding with and without the key/value cache, and training-step throughput.

    .venv/bin/python benchmarks/decoding.py [--threads N] [--reps 7]

Every measurement is warmed up, repeated, and reported as a median; cached and uncached decoding are measured
alternately in the same run, so the ratio between them holds even on a busy machine. The model is the small one the
tasks use (transformer_nb.training.MODEL_CONFIG) with random weights: speed does not depend on what was learned.
"""
import argparse, statistics, time
import torch
from transformer_nb.transformer import Transformer
from transformer_nb.data import make_task, batch_stream
from transformer_nb.training import MODEL_CONFIG, LabelSmoothingLoss, make_optimizer
from transformer_nb.decoding import greedy_search
from transformer_nb.training import greedy_decode


def median_time(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    p.add_argument("--reps", type=int, default=7, help="repetitions per measurement (default 7)")
    p.add_argument("--batch", type=int, default=8, help="sources decoded together (default 8)")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens written per source (default 64)")
    a = p.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    task = make_task("dates", n_train=2000, n_valid=10)
    V = len(task.vocab)
    model = Transformer(V, V, **{**MODEL_CONFIG, "max_len": 256}).eval()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; model {MODEL_CONFIG}")

    # decoding: a batch of sources, a fixed number of new tokens (eos=-1: never stop early)
    stream = batch_stream(task.train, task.vocab, a.batch, seed=0)
    b = next(stream)
    runs = {
        "cached (KVCache)": lambda: greedy_search(model, b.src, b.src_mask, a.new_tokens, use_cache=True, eos=-1),
        "uncached (whole prefix)": lambda: greedy_search(model, b.src, b.src_mask, a.new_tokens, use_cache=False, eos=-1),
        "uncached, chapter 9": lambda: greedy_decode(model, b.src, b.src_mask, a.new_tokens, eos=-1),
    }
    for fn in runs.values(): fn()                                        # warm-up
    times = {k: [] for k in runs}
    for _ in range(a.reps):                                              # interleaved: same conditions for all
        for k, fn in runs.items(): times[k].append(median_time(fn, 1))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\ngreedy decoding, batch {a.batch}, {a.new_tokens} new tokens, median of {a.reps}:")
    for k, t in med.items():
        print(f"  {k:26s} {t * 1000:8.1f} ms  {a.batch * a.new_tokens / t:9.0f} tokens/s")
    print(f"  cache speed-up: {med['uncached (whole prefix)'] / med['cached (KVCache)']:.1f}x")

    # training steps: batch of 64 date pairs, forward + backward + Adam
    model.train()
    opt, sched = make_optimizer(model, model.d_model, warmup=400)
    loss_fn = LabelSmoothingLoss(0.1)
    stream = batch_stream(task.train, task.vocab, 64, seed=1)
    def step():
        bb = next(stream)
        loss = loss_fn(model(bb.src, bb.tgt_in, bb.src_mask, bb.tgt_mask, bb.src_mask), bb.tgt_out)
        opt.zero_grad(); loss.backward(); opt.step(); sched.step()
        return bb.ntokens
    for _ in range(3): step()
    ts, toks = [], []
    for _ in range(a.reps * 3):
        t0 = time.perf_counter(); toks.append(step()); ts.append(time.perf_counter() - t0)
    t = statistics.median(ts)
    print(f"\ntraining, batch 64 date pairs, median of {len(ts)} steps: {t * 1000:.1f} ms/step, "
          f"{statistics.median(toks) / t:.0f} target tokens/s")
    print(f"  one training step costs as much as {t / (med['cached (KVCache)'] / a.new_tokens):.1f} cached decoding steps")


if __name__ == "__main__":
    main()
