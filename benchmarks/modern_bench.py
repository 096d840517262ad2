"""The book's GPT against transformers' GPT2LMHeadModel and LlamaForCausalLM of the same shape (chapter 11f): `make bench`, or

    .venv/bin/python benchmarks/modern_bench.py [--runs 3] [--reps 7] [--profile] [--quick]

For each of four models, GPT-2-like and Llama-style (RoPE, RMSNorm, SwiGLU, grouped-query attention with G = H/2, no
biases) at two shapes each, it builds the book's GPT with a seed, converts it with chapter 11f's `to_transformers`
(the same weights: it refuses to time a pair whose logits differ by more than 1e-4), and times, interleaved round
after round: a training step (forward, cross-entropy, backward, fused AdamW) on 16 windows of 128 tokens, as
tokens/s; and cached greedy generation of 64 tokens after a 16-token prompt at batch 1 (our `generate`, their
`generate(do_sample=False)`), as seconds. It prints ours / transformers' for both (above 1: ours is faster).
With --runs N it repeats the measurement N times in one process and prints each ratio's lowest and highest value.
With --profile it also profiles one training step and one generation of each (torch.profiler, self CPU time per
operator) and prints the largest operators of ours and theirs side by side. This is a benchmark, not a test: it
asserts nothing about speed. It measures the machine as it is (no tools/kernels.sh), on the threads torch chooses
unless --threads says otherwise.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from transformer_nb.gpt import GPT, generate
from transformer_nb.modern import to_transformers

VOCAB, MAX_LEN = 103, 160
LLAMA = dict(positions="rope", norm="rms", activation="swiglu", bias=False)
# name: GPT's keywords; GPT-2-like d_ff 4 d_model, Llama-style about 8/3 d_model
SHAPES = {
    "GPT-2 d128 N2": dict(d_model=128, num_heads=4, d_ff=512, num_layers=2, positions="learned"),
    "GPT-2 d256 N4": dict(d_model=256, num_heads=8, d_ff=1024, num_layers=4, positions="learned"),
    "Llama d128 N2": dict(d_model=128, num_heads=4, n_kv_heads=2, d_ff=344, num_layers=2, **LLAMA),
    "Llama d256 N4": dict(d_model=256, num_heads=8, n_kv_heads=4, d_ff=688, num_layers=4, **LLAMA),
}
BATCH = dict(batch_size=16, seq_len=128, prompt=16, new_tokens=64, gen_batch=1)
QUICK = dict(batch_size=2, seq_len=16, prompt=4, new_tokens=4, gen_batch=1)


def pair(kw, seed=0):
    "Ours and transformers' with the same weights, in eval mode; checked to compute the same logits"
    torch.manual_seed(seed)
    ours = GPT(VOCAB, max_len=MAX_LEN, dropout=0.0, **kw).eval()
    theirs = to_transformers(ours).eval()
    ids = torch.randint(0, VOCAB, (2, 24))
    with torch.no_grad():
        err = (ours(ids) - theirs(input_ids=ids).logits).abs().max().item()
    if err > 1e-4: raise RuntimeError(f"{kw}: ours and transformers' differ by {err:.1e}")
    return ours, theirs


def train_step(module, logits, b, seed=0):
    "One training step on a fixed batch: forward, loss, backward, fused AdamW"
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (b["batch_size"], b["seq_len"] + 1), generator=g)
    x, y = ids[:, :-1], ids[:, 1:]
    opt = torch.optim.AdamW(module.parameters(), lr=1e-4, fused=True)
    def step():
        module.train()
        loss = F.cross_entropy(logits(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    step.tokens = y.numel()
    return step


def generation(ours, theirs, b, seed=0):
    "Cached greedy generation, ours and theirs, after the same prompt; checked to give the same tokens"
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, VOCAB, (b["gen_batch"], b["prompt"]), generator=g)
    n, ones = b["new_tokens"], torch.ones_like(prompt)
    def a():
        ours.eval()
        with torch.no_grad(): return generate(ours, prompt, n, greedy=True)
    def t():
        theirs.eval()
        with torch.no_grad():
            return theirs.generate(prompt, attention_mask=ones, max_new_tokens=n, min_new_tokens=n,
                                   do_sample=False, use_cache=True, pad_token_id=0)
    if not torch.equal(a(), t()): print("  note: the greedy tokens differ (ties under float rounding)")
    return a, t


def interleaved(fns, reps, warmup=2):
    "Median seconds of each function, timed in turn round after round"
    times = {k: [] for k in fns}
    for r in range(warmup + reps):
        for k, fn in fns.items():
            t0 = time.perf_counter(); fn()
            if r >= warmup: times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def measure(reps, b):
    "One run: name -> {'train': ours/theirs tokens/s, 'generate': theirs/ours seconds}"
    out = {}
    for name, kw in SHAPES.items():
        ours, theirs = pair(kw)
        # separate copies for training, so that generation times the initial weights
        o2, t2 = pair(kw)
        s_o, s_t = train_step(o2, o2, b), train_step(t2, lambda ids: t2(input_ids=ids).logits, b)
        tt = interleaved({"ours": s_o, "theirs": s_t}, reps)
        g_o, g_t = generation(ours, theirs, b)
        tg = interleaved({"ours": g_o, "theirs": g_t}, max(3, reps - 2), warmup=1)
        out[name] = dict(train=tt["theirs"] / tt["ours"], generate=tg["theirs"] / tg["ours"],
                         train_tokens_s=dict(ours=s_o.tokens / tt["ours"], theirs=s_t.tokens / tt["theirs"]),
                         generate_s=tg)
        print(f"  {name}: training {out[name]['train_tokens_s']['ours']:8.0f} / "
              f"{out[name]['train_tokens_s']['theirs']:8.0f} tokens/s = {out[name]['train']:.2f}; "
              f"generation {tg['ours'] * 1e3:7.1f} / {tg['theirs'] * 1e3:7.1f} ms = {out[name]['generate']:.2f}",
              flush=True)
    return out


def top_ops(fn, calls=3, k=12):
    "Self CPU milliseconds per call of the k largest operators of fn"
    from torch.profiler import ProfilerActivity, profile
    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls): fn()
    ev = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in ev) / 1000 / calls
    return total, [(e.key, e.self_cpu_time_total / 1000 / calls, e.count // calls) for e in ev[:k]]


def profile_all(b):
    "Print the largest operators of ours and theirs, training and generation, per shape"
    for name, kw in SHAPES.items():
        ours, theirs = pair(kw)
        o2, t2 = pair(kw)
        fns = {"train": (train_step(o2, o2, b), train_step(t2, lambda ids: t2(input_ids=ids).logits, b)),
               "generate": generation(ours, theirs, b)}
        for what, (fo, ft) in fns.items():
            (to, ops_o), (tt, ops_t) = top_ops(fo), top_ops(ft)
            print(f"\n{name}, {what}: ours {to:.1f} ms of operator self time per call, theirs {tt:.1f} ms")
            print(f"  {'ours':44s} {'ms':>7s} {'calls':>6s}   {'transformers':44s} {'ms':>7s} {'calls':>6s}")
            for (ka, ma, ca), (kb, mb, cb) in zip(ops_o, ops_t):
                print(f"  {ka[:44]:44s} {ma:7.2f} {ca:6d}   {kb[:44]:44s} {mb:7.2f} {cb:6d}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1, help="measure this many times (default 1)")
    p.add_argument("--reps", type=int, default=7, help="timed rounds per measurement (default 7)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--profile", action="store_true", help="also profile ours and theirs")
    p.add_argument("--quick", action="store_true", help="toy sizes, one round: checks that it runs")
    a = p.parse_args(argv)
    if a.runs < 1 or a.reps < 1:
        p.exit(2, f"modern_bench.py: error: --runs and --reps must be >= 1, got {a.runs} and {a.reps}\n")
    if a.threads: torch.set_num_threads(a.threads)
    import transformers
    b, reps = (QUICK, 1) if a.quick else (BATCH, a.reps)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads; "
          f"training on {b['batch_size']}x{b['seq_len']} tokens, generation of {b['new_tokens']} tokens after "
          f"{b['prompt']} at batch {b['gen_batch']}; ours / transformers' (above 1: ours is faster)")
    runs = []
    for i in range(a.runs):
        print(f"run {i + 1} of {a.runs}", flush=True)
        runs.append(measure(reps, b))
    print(f"\nlowest and highest of {a.runs} run(s): ours / transformers'")
    for name in SHAPES:
        for what in ("train", "generate"):
            v = [r[name][what] for r in runs]
            label = "training tokens/s" if what == "train" else "cached generation speed"
            print(f"  {name + ', ' + label:48s} {min(v):5.2f} - {max(v):5.2f}")
    if a.profile: profile_all(b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
