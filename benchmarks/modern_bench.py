"""The book's GPT against transformers' GPT2LMHeadModel and LlamaForCausalLM of the same shape (chapter 11f): `make bench`, or

    .venv/bin/python benchmarks/modern_bench.py [--runs 3] [--reps 7] [--profile] [--save PATH] [--quick]
                                                [--device cuda]

For each of four models, GPT-2-like and Llama-style (RoPE, RMSNorm, SwiGLU, grouped-query attention with G = H/2, no
biases) at two shapes each, it builds the book's GPT with a seed, converts it with chapter 11f's `to_transformers`
(the same weights: it refuses to time a pair whose logits differ by more than 1e-4), and times, interleaved round
after round: a training step (forward, cross-entropy, backward, fused AdamW) on 16 windows of 128 tokens, as
tokens/s; and cached greedy generation of 64 tokens after a 16-token prompt at batch 1 (our `generate`, their
`generate(do_sample=False)`), as seconds. It prints ours / transformers' for both (above 1: ours is faster). With
--runs N it repeats the measurement N times in one process and prints each ratio's lowest and highest value. With
--profile it also profiles one training step and one generation of each (torch.profiler, self CPU time per group of
operators, the groups of chapter 13) and prints the ratio's ceilings: the median ratio over the share of ours spent
inside operators (what ours would reach if its Python cost nothing), and over its share in matrix multiplies and
attention alone. A target above the first ceiling cannot be reached by our Python: only by other operators. On a GPU
(--device cuda), --profile counts instead the kernels each call launches and the GPU's busy time in them: at these
sizes the host's launches, not the kernels, set the pace. With --save PATH it writes every figure to a JSON file
(`make bench`: benchmarks/results/modern_bench.json, which chapter 11f reads;
benchmarks/results/modern_bench_cuda.json holds the runs of two sessions on a GPU, and --append adds a session's).
This is a benchmark, not a test: it asserts nothing about speed. It measures the machine as it is (no
tools/kernels.sh), on the threads torch chooses unless --threads says otherwise.
"""
import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from transformer_nb.book.bench import op_group
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
TARGETS = dict(train=1.2, generate=1.5)  # issue 42's: ours / transformers'
BATCH = dict(batch_size=16, seq_len=128, prompt=16, new_tokens=64, gen_batch=1)
QUICK = dict(batch_size=2, seq_len=16, prompt=4, new_tokens=4, gen_batch=1)


DEVICE = torch.device("cpu")  # --device


def sync():
    "Wait for the device's queued work, so that a host clock times it"
    if DEVICE.type == "cuda": torch.cuda.synchronize(DEVICE)


def pair(kw, seed=0):
    "Ours and transformers' with the same weights, in eval mode; checked to compute the same logits"
    torch.manual_seed(seed)
    ours = GPT(VOCAB, max_len=MAX_LEN, dropout=0.0, **kw).eval().to(DEVICE)
    theirs = to_transformers(ours).eval().to(DEVICE)
    ids = torch.randint(0, VOCAB, (2, 24), device=DEVICE)
    with torch.no_grad():
        err = (ours(ids) - theirs(input_ids=ids).logits).abs().max().item()
    if err > 1e-4: raise RuntimeError(f"{kw}: ours and transformers' differ by {err:.1e}")
    return ours, theirs


def train_step(module, logits, b, seed=0):
    "One training step on a fixed batch: forward, loss, backward, fused AdamW"
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (b["batch_size"], b["seq_len"] + 1), generator=g)
    x, y = ids[:, :-1].to(DEVICE), ids[:, 1:].to(DEVICE)
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
    prompt = torch.randint(1, VOCAB, (b["gen_batch"], b["prompt"]), generator=g).to(DEVICE)
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
            sync(); t0 = time.perf_counter(); fn(); sync()
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
        # a round of generation takes a tenth of a second, of training one: three times the
        # rounds, so that a burst of another program's load cannot decide the median
        tg = interleaved({"ours": g_o, "theirs": g_t}, 3 * reps, warmup=2)
        out[name] = dict(train=tt["theirs"] / tt["ours"], generate=tg["theirs"] / tg["ours"],
                         train_tokens_s=dict(ours=s_o.tokens / tt["ours"], theirs=s_t.tokens / tt["theirs"]),
                         generate_s=tg)
        print(f"  {name}: training {out[name]['train_tokens_s']['ours']:8.0f} / "
              f"{out[name]['train_tokens_s']['theirs']:8.0f} tokens/s = {out[name]['train']:.2f}; "
              f"generation {tg['ours'] * 1e3:7.1f} / {tg['theirs'] * 1e3:7.1f} ms = {out[name]['generate']:.2f}",
              flush=True)
    return out


def profiled(fn, calls=3):
    """Milliseconds of one call of fn under torch's profiler, and the self CPU milliseconds of its aten operators per
    group of chapter 13 (`op_group`): the Python around them is the difference"""
    import os

    from torch.profiler import ProfilerActivity, profile
    fn()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # the profiler's C++ log lines
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            for _ in range(calls): fn()
            wall = (time.perf_counter() - t0) / calls * 1e3
    finally:
        os.dup2(saved, 2); os.close(saved); os.close(devnull)
    ms = {}
    for e in prof.key_averages():
        if e.key.startswith("aten::"):
            g = op_group(e.key); ms[g] = ms.get(g, 0.0) + e.self_cpu_time_total / 1e3 / calls
    return wall, ms


def ceiling(fo, ft, ratio, calls=5):
    """Where one call's time goes, ours and theirs (milliseconds under the profiler, and inside operators by group),
    and the highest ratio ours could reach: the timed `ratio` over the share of ours spent inside operators (our
    Python costing nothing), and over its share in matrix multiplies and attention alone. Shares, not milliseconds:
    a machine that slows between two profiles moves both parts of a share alike"""
    (wo, go), (wt, gt) = profiled(fo, calls), profiled(ft, calls)
    share = sum(go.values()) / wo
    kernels = (go.get("matrix multiplies", 0.0) + go.get("fused attention", 0.0)) / wo
    return dict(ms=dict(ours=wo, theirs=wt), groups=dict(ours=go, theirs=gt), ratio=ratio, share=share,
                share_kernels=kernels, ceiling=ratio / share, ceiling_kernels=ratio / kernels)


def to_profile(b, runs):
    """(shape, "train" or "generate", the runs' median ratio, (ours, theirs)) for every shape: fresh pairs, a copy
    for training so that generation runs the initial weights"""
    for name, kw in SHAPES.items():
        ours, theirs = pair(kw)
        o2, t2 = pair(kw)
        fns = {"train": (train_step(o2, o2, b), train_step(t2, lambda ids: t2(input_ids=ids).logits, b)),
               "generate": generation(ours, theirs, b)}
        for what, fs in fns.items():
            yield name, what, statistics.median(r[name][what] for r in runs), fs


def profiled_cuda(fn, calls=3):
    """One call of fn on the GPU: wall milliseconds, kernels launched, and milliseconds the GPU spent in them (its
    busy time). Wall far above busy: the host's launches, not the kernels, set the pace"""
    from torch.profiler import ProfilerActivity, profile
    fn(); sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sync(); t0 = time.perf_counter()
        for _ in range(calls): fn()
        sync(); wall = (time.perf_counter() - t0) / calls * 1e3
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return dict(ms=wall, kernels=len(kernels) / calls, busy_ms=sum(e.device_time for e in kernels) / calls / 1e3)


def profile_cuda(b, runs):
    "Kernels and GPU busy time of ours and theirs, training and generation, per shape; print and return them"
    out = {}
    for name, what, ratio, (fo, ft) in to_profile(b, runs):
        c = out.setdefault(name, {})[what] = dict(ratio=ratio, ours=profiled_cuda(fo), theirs=profiled_cuda(ft))
        print(f"  {name}, {what}: {ratio:.2f} (median); " + "; ".join(
            f"{who} {c[who]['ms']:.1f} ms, {c[who]['kernels']:.0f} kernels, GPU busy {c[who]['busy_ms']:.1f} ms"
            for who in ("ours", "theirs")), flush=True)
    return out


def profile_all(b, runs):
    "Profile ours and theirs, training and generation, per shape; print and return each `ceiling`"
    out, calls = {}, 1 if b is QUICK else 5   # --quick checks that it runs: one call (the profiler's parse is slow)
    for name, what, ratio, (fo, ft) in to_profile(b, runs):
        c = out.setdefault(name, {})[what] = ceiling(fo, ft, ratio, calls)
        g = c["groups"]["ours"]
        print(f"  {name}, {what}: {ratio:.2f} (median); ours {c['ms']['ours']:.1f} ms, {100 * c['share']:.0f} % "
              f"in operators ({g.get('matrix multiplies', 0):.1f} ms matrix multiplies, "
              f"{g.get('fused attention', 0):.1f} attention); theirs {c['ms']['theirs']:.1f} ms, "
              f"{100 * sum(c['groups']['theirs'].values()) / c['ms']['theirs']:.0f} % in operators; ceiling "
              f"{c['ceiling']:.2f} (matrix multiplies and attention alone: {c['ceiling_kernels']:.2f}), "
              f"target {TARGETS[what]}", flush=True)
    return out


def appended(path, meta, runs):
    "The runs of the file at `path` and then these, and which session each came from; a ValueError unless same meta"
    had = json.loads(Path(path).read_text())
    before = {k: v for k, v in had["meta"].items() if k != "sessions"}
    if before != meta: raise ValueError(f"{path} was measured with {before}, not {meta}")
    n = len(had["runs"])
    sessions = had["meta"].get("sessions", [dict(runs=list(range(n)))])
    return had["runs"] + runs, sessions + [dict(runs=list(range(n, n + len(runs))))]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1, help="measure this many times (default 1)")
    p.add_argument("--reps", type=int, default=7, help="timed rounds per training measurement (default 7); generation takes 3x as many")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--profile", action="store_true", help="also profile ours and theirs")
    p.add_argument("--quick", action="store_true", help="toy sizes, one round: checks that it runs")
    p.add_argument("--save", default=None, help="also write every figure to this JSON file")
    p.add_argument("--append", action="store_true",
                   help="with --save: add this session's runs to the file's (same machine, versions and sizes); "
                        "the profile becomes this session's, and meta.sessions says which runs came from which")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda: where both models run")
    a = p.parse_args(argv)
    global DEVICE
    try:
        DEVICE = torch.device(a.device)
        torch.empty(0, device=DEVICE)
    except (RuntimeError, AssertionError) as e:
        p.exit(2, f"modern_bench.py: error: --device {a.device!r} is not usable here: {e}\n")
    if a.runs < 1 or a.reps < 1:
        p.exit(2, f"modern_bench.py: error: --runs and --reps must be >= 1, got {a.runs} and {a.reps}\n")
    if a.threads: torch.set_num_threads(a.threads)
    import transformers
    b, reps = (QUICK, 1) if a.quick else (BATCH, a.reps)
    where = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {where}; "
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
    profile = None
    if a.profile and DEVICE.type == "cuda":
        print("\nwhere the time goes on the GPU: wall time, kernels launched and the GPU's busy time per call")
        profile = profile_cuda(b, runs)
    elif a.profile:
        print("\nwhere the time goes (self CPU time by group of operators) and the ratio's ceiling")
        profile = profile_all(b, runs)
    if a.save:
        meta = dict(torch=torch.__version__, transformers=transformers.__version__,
                    threads=torch.get_num_threads(), processor=platform.processor() or platform.machine(),
                    device=torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "cpu",
                    batch=b, reps=reps, targets=TARGETS)
        sessions = [dict(runs=list(range(len(runs))))]
        if a.append and Path(a.save).exists():
            try: runs, sessions = appended(Path(a.save), meta, runs)
            except ValueError as e: p.exit(2, f"modern_bench.py: error: --append: {e}\n")
        with open(a.save, "w") as f:
            json.dump(dict(meta=dict(meta, sessions=sessions), runs=runs, profile=profile), f, indent=1)
        print(f"wrote {a.save}" + (f" ({len(runs)} runs in {len(sessions)} sessions)" if len(sessions) > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
