"""benchmarks/modern_bench.py, the speed comparison of chapter 11f (`make bench`): it runs, times only pairs that
compute the same logits, and refuses bad arguments. It measures nothing here: speed is printed, never asserted."""
import subprocess
import sys

import pytest

from conftest import ROOT, benchmark_script

SCRIPT = ROOT / "benchmarks" / "modern_bench.py"


@pytest.fixture(scope="module")
def bench():
    "The script as a module (its functions, without running it)"
    with benchmark_script("modern_bench") as m: yield m


def test_each_pair_is_the_same_model(bench):
    "Ours and transformers' compute the same logits at every shape the benchmark times, GQA included"
    import torch
    for name, kw in bench.SHAPES.items():
        ours, theirs = bench.pair(kw)
        ids = torch.randint(0, bench.VOCAB, (1, 9))
        with torch.no_grad():
            assert (ours(ids) - theirs(input_ids=ids).logits).abs().max() <= 1e-4, name
        assert type(theirs).__name__ == ("LlamaForCausalLM" if "Llama" in name else "GPT2LMHeadModel")


def test_bad_arguments_get_one_line_and_status_2():
    out = subprocess.run([sys.executable, str(SCRIPT), "--runs", "0"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--runs and --reps must be >= 1, got 0 and 7" in out.stderr


def test_quick_run_prints_every_ratio_and_saves_each_ceiling(tmp_path):
    """A quick run prints every ratio; --profile --save writes every ratio and, per shape and task, where the time
    goes and the ratio's ceilings: the timed ratio over the share of ours inside operators, and inside matrix
    multiplies and attention alone."""
    import json
    out_file = tmp_path / "bench.json"
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--profile", "--threads", "1", "--save",
                          str(out_file)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "USDT" not in out.stderr and "ceiling" in out.stdout
    for name in ("GPT-2 d128 N2", "GPT-2 d256 N4", "Llama d128 N2", "Llama d256 N4"):   # one run of the script
        assert f"{name}, training tokens/s" in out.stdout and f"{name}, cached generation speed" in out.stdout
    res = json.loads(out_file.read_text())
    assert len(res["runs"]) == 1 and res["meta"]["threads"] == 1
    assert res["meta"]["targets"] == {"train": 1.2, "generate": 1.5}
    for name, per_task in res["profile"].items():
        for what, c in per_task.items():
            ours = c["groups"]["ours"]
            assert c["ratio"] == res["runs"][0][name][what]       # the median of one run
            assert c["share"] == pytest.approx(sum(ours.values()) / c["ms"]["ours"])
            assert c["ceiling"] == pytest.approx(c["ratio"] / c["share"])
            kernels = ours["matrix multiplies"] + ours.get("fused attention", 0.0)
            assert c["ceiling_kernels"] == pytest.approx(c["ratio"] * c["ms"]["ours"] / kernels)
            # operators run inside the call: their time is part of it
            assert 0 < c["share_kernels"] < c["share"] < 1, (name, what)


def test_append_adds_a_sessions_runs_and_refuses_another_setting(bench, tmp_path):
    """--save --append keeps the runs of earlier sessions (the GPU runs of chapter 11f come from two sessions);
    a file measured on another machine, version or size is refused, not mixed in"""
    import json
    path, meta = tmp_path / "gpu.json", dict(device="NVIDIA H200", torch="2.11", batch=dict(batch_size=16))
    path.write_text(json.dumps(dict(meta=meta, runs=[{"a": 1}, {"a": 2}], profile=None)))
    runs, sessions = bench.appended(path, meta, [{"a": 3}])
    assert runs == [{"a": 1}, {"a": 2}, {"a": 3}] and sessions == [dict(runs=[0, 1]), dict(runs=[2])]
    path.write_text(json.dumps(dict(meta=dict(meta, sessions=sessions), runs=runs, profile=None)))
    runs, sessions = bench.appended(path, meta, [{"a": 4}, {"a": 5}])
    assert len(runs) == 5 and sessions[-1] == dict(runs=[3, 4])
    with pytest.raises(ValueError, match="was measured with"):
        bench.appended(path, dict(meta, device="NVIDIA H100 80GB HBM3"), [{"a": 6}])
