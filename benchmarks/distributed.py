"""Training throughput on several processes (chapter 10a, nbs/10a_distributed.ipynb):

    .venv/bin/python benchmarks/distributed.py [--steps 60] [--rounds 3] [--out FILE]

The date task on task_config's model (d_model 32, 2 + 2 layers; chapter 10's date recipe is twice
as wide since these figures were measured) and batches of 64 pairs,
trained by `train`, as 1 process x 1 thread, 1 process x 2 threads and 2 processes x
1 thread (DDP over gloo). For each: target tokens per second after warm-up steps, and
for 2 processes also the communication: the step time without the gradient all-reduce
(the same shards, no DDP), and one all-reduce of all the gradients on its own. Scaling
efficiency is the 2-process throughput over twice the 1 process x 1 thread throughput.
The machine's load average is recorded before and after. The result goes to
benchmarks/results/distributed.json, which the chapter reads. This is a benchmark, not a
test: it asserts nothing.
"""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from transformer_nb.data import batch_stream, make_task
from transformer_nb.distributed import DataParallel, spawn
from transformer_nb.training import TASK_SETTINGS, SingleProcess, task_config, train
from transformer_nb.transformer import Transformer

BATCH = TASK_SETTINGS["dates"]["batch_size"]  # pairs per step, by default


class NoGradientSync(DataParallel):
    "DataParallel without DDP: the same shards and sums, no gradient all-reduce"

    def wrap(self, model):
        return model

    def no_sync(self, net):
        return SingleProcess.no_sync(self, net)


def step_times(procs, steps: int, warm: int, batch: int) -> list[float]:
    "Seconds of each step after the first `warm`, training the date model"
    task = make_task("dates", seed=0)
    torch.manual_seed(0)
    model = Transformer.from_config(task_config(len(task.vocab)))
    stamps = []
    train(
        model,
        procs.batches(task.train, task.vocab, batch, seed=0),
        steps=warm + steps,
        average=1,
        progress=False,
        processes=procs,
        on_step=lambda step, m: stamps.append(time.perf_counter()),
    )
    return [b - a for a, b in zip(stamps[warm - 1 :], stamps[warm:])]


def one_process(threads: int, steps: int, warm: int, batch: int) -> list[float]:
    torch.set_num_threads(threads)
    return step_times(SingleProcess(), steps, warm, batch)


def two_processes(steps: int, warm: int, batch: int) -> dict:
    "On each rank: step times with DDP, without the gradient all-reduce; the all-reduce"
    import torch.distributed as dist

    out = dict(
        ddp=step_times(DataParallel(), steps, warm, batch),
        no_sync=step_times(NoGradientSync(), steps, warm, batch),
    )
    n = sum(p.numel() for p in Transformer.from_config(task_config(40)).parameters())
    flat, times = torch.randn(n), []
    for _ in range(5 + steps):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(flat)
        times.append(time.perf_counter() - t0)
    out["allreduce"] = times[5:]
    out["gradient_floats"] = n
    return out


def processor() -> str:
    "The CPU's model name"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def tokens_per_step(steps: int, warm: int, batch: int) -> float:
    "Mean target tokens of the timed steps (the same batches in every setting)"
    task = make_task("dates", seed=0)
    stream = batch_stream(task.train, task.vocab, batch, seed=0)
    n = [next(stream).ntokens for _ in range(warm + steps)]
    return statistics.mean(n[warm:])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--steps", type=int, default=60, help="timed steps per run (default 60)"
    )
    p.add_argument(
        "--warm", type=int, default=10, help="untimed steps first (default 10)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of the three settings; the best is kept",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).parent / "results" / "distributed.json",
    )
    p.add_argument("--batch-size", type=int, default=BATCH,
                   help=f"pairs per step, all processes together (default {BATCH})")
    a = p.parse_args()
    load_before = os.getloadavg()
    tok = tokens_per_step(a.steps, a.warm, a.batch_size)
    best, args = {}, (a.steps, a.warm, a.batch_size)
    for r in range(a.rounds):
        for name, run in [
            ("1 process x 1 thread", lambda: one_process(1, *args)),
            ("1 process x 2 threads", lambda: one_process(2, *args)),
            (
                "2 processes x 1 thread",
                lambda: spawn(two_processes, 2, *args, timeout=600),
            ),
        ]:
            res = run()
            step = statistics.median(
                res[0]["ddp"]
                if isinstance(res, list) and isinstance(res[0], dict)
                else res
            )
            print(
                f"round {r + 1}: {name:24s} {step * 1e3:7.1f} ms/step  "
                f"{tok / step:8.0f} tokens/s",
                flush=True,
            )
            if name not in best or step < best[name]["step_ms"] / 1e3:
                best[name] = dict(step_ms=step * 1e3, tokens_per_s=tok / step)
                if isinstance(res, list) and isinstance(res[0], dict):
                    best[name] |= dict(
                        step_ms_without_gradient_allreduce=statistics.median(
                            res[0]["no_sync"]
                        )
                        * 1e3,
                        gradient_allreduce_alone_ms=statistics.median(
                            res[0]["allreduce"]
                        )
                        * 1e3,
                        gradient_floats=res[0]["gradient_floats"],
                    )
    two, one, one2 = (
        best["2 processes x 1 thread"],
        best["1 process x 1 thread"],
        best["1 process x 2 threads"],
    )
    two["communication_ms_per_step"] = (
        two["step_ms"] - two["step_ms_without_gradient_allreduce"]
    )
    result = dict(
        processor=processor(),
        cores=os.cpu_count(),
        torch=torch.__version__,
        load_average_before=[round(x, 2) for x in load_before],
        load_average_after=[round(x, 2) for x in os.getloadavg()],
        task="dates",
        batch_size=a.batch_size,
        timed_steps=a.steps,
        rounds=a.rounds,
        tokens_per_step=tok,
        settings=best,
        scaling_efficiency=two["tokens_per_s"] / (2 * one["tokens_per_s"]),
        speedup_over_1x2=two["tokens_per_s"] / one2["tokens_per_s"],
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "scaling_efficiency",
                    "speedup_over_1x2",
                    "load_average_before",
                    "load_average_after",
                )
            },
            indent=1,
        )
    )
    print(
        f"communication: {two['communication_ms_per_step']:.1f} ms/step exposed, "
        f"all-reduce of {two['gradient_floats']} floats alone "
        f"{two['gradient_allreduce_alone_ms']:.2f} ms"
    )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
