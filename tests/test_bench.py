"""The benchmark's measuring machinery (nbs/12a_bench.ipynb, `book.bench`): the ratios of a result and their
spread over runs, the operator groups of a profile, the bfloat16 step, the ladder's rungs (each switch, and the
same loss and gradients as the readable path) and the script's command line. The benchmark itself is never a
test: nothing here times anything against a target."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import bench_result
from transformer_nb.book import bench, measure
from transformer_nb.layers import DecoderLayer, EncoderLayer
from transformer_nb.multihead import MultiHeadAttention
from transformer_nb.norms import LayerNorm

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-5
TINY = measure.small_config(16, batch_size=4, vocab=50).with_model(d_model=32, d_ff=64)


def test_summary_gives_the_ratios():
    entry = lambda s, tok: dict(median=s, min=s, max=s, tokens_per_s=tok / s, peak_mb=100 * s, saved_mb=1.0)
    res = {"train": {"T=8, dropout 0.1": {"readable": entry(2.0, 10), "fast": entry(1.0, 10), "torch": entry(1.25, 10),
                                          "flops": 50.0}},
           "matmul_peak": 100.0,
           "forward_base": {"readable": entry(3.0, 6), "fast": entry(2.0, 6), "torch": entry(2.0, 6)},
           "decoding": {"cached": entry(1.0, 8), "uncached": entry(4.0, 8)}}
    s = bench.summary(res)
    assert s["train T=8, dropout 0.1: fast / torch tokens/s"] == pytest.approx(1.25)
    assert s["train T=8, dropout 0.1: fast / readable tokens/s"] == pytest.approx(2.0)
    assert s["train T=8, dropout 0.1: fast / torch peak memory"] == pytest.approx(0.8)
    assert s["train T=8, dropout 0.1: fast share of matmul peak"] == pytest.approx(0.5)
    assert s["decoding: cached / uncached tokens/s"] == pytest.approx(4.0)


def test_run_script_help():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--quick" in out.stdout


def test_spread_is_the_lowest_and_highest_ratio_over_runs():
    r = bench.spread([bench_result(1.0), bench_result(1.5), bench_result(1.2)])
    assert r["train T=32, dropout 0.1: fast / torch tokens/s"] == pytest.approx((1.0, 1.5))
    assert r["decoding: cached / uncached tokens/s"] == pytest.approx((4.0, 6.0))
    assert r["train T=32, dropout 0.1: bfloat16 autocast / float32 tokens/s"] == pytest.approx((0.1, 0.15))
    assert r["train T=32: fast dropout 0.1 / 0 tokens/s"] == pytest.approx((1.0, 1.0))


def test_save_and_load_results_round_trip(tmp_path):
    res = bench_result(1.3)
    path = bench.save_results(res, tmp_path / "sub" / "r.json")
    assert path.exists() and bench.load_results(path) == res


def test_op_group_sorts_torch_operators():
    assert bench.op_group("aten::addmm") == "matrix multiplies"
    assert bench.op_group("aten::_scaled_dot_product_flash_attention_for_cpu_backward") == "fused attention"
    assert bench.op_group("## Call CompiledFxGraph fx3k ##") == "compiled kernels"
    assert bench.op_group("aten::bernoulli_") == bench.op_group("aten::random_") == "random numbers"
    assert bench.op_group("aten::copy_") == "copies and fills"
    assert bench.op_group("aten::native_layer_norm") == "everything else"


def test_profile_groups_finds_the_matrix_multiplies():
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    calls = []
    p = bench.profile_groups(lambda: calls.append((a @ b).relu()), calls=2)
    assert len(calls) == 3                                                    # a warm-up, two profiled
    assert list(p["ms"]) == [g for g, _ in bench.PROFILE_GROUPS] + ["everything else"]
    assert p["ms"]["matrix multiplies"] > 0 and p["ms"]["everything else"] > 0      # mm, and relu
    assert p["ms"]["random numbers"] == p["ms"]["compiled kernels"] == 0
    assert p["operators"] >= 2
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="calls must be an int >= 1, got"):
            bench.profile_groups(lambda: None, calls=bad)


def test_bf16_autocast_step_is_measured():
    cfg = measure.small_config(8, batch_size=2, vocab=30, dropout=0.0).with_model(d_model=16, d_ff=32)
    b = bench.bench_bf16(cfg, reps=1)
    assert set(b) == {"float32", "bfloat16"} and all(v["tokens_per_s"] > 0 for v in b.values())


def test_rung_step_switches_and_equality():
    worst = bench.check_rungs(TINY)
    assert list(worst) == list(bench.RUNGS[1:]) and all(v < TOL for v in worst.values())
    for rung in range(len(bench.RUNGS)):
        step = bench.rung_step(rung, TINY)
        mods = list(step.module.modules())
        assert all(m.fused == (rung >= 1) for m in mods if isinstance(m, LayerNorm))
        assert all(m.fuse_projections == (rung >= 3) for m in mods if isinstance(m, MultiHeadAttention))
        assert all(m.recompute_norm == (rung >= 5) for m in mods if isinstance(m, (EncoderLayer, DecoderLayer)))
        seen = []
        def spy(*a, _f=nn.functional.dropout, **kw): seen.append(1); return _f(*a, **kw)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(nn.functional, "dropout", spy)
            loss = step()
        assert loss.ndim == 0 and bool(seen) == (rung < 4)   # torch's masks below the "cheaper mask" rung
    for bad in (-1, len(bench.RUNGS), 1.0, True):
        with pytest.raises(ValueError, match="rung must be an int from 0 to 5"): bench.rung_step(bad, TINY)


def test_bench_ladder_times_every_rung_and_refuses_a_wrong_one(monkeypatch):
    lad = bench.bench_ladder(TINY, reps=1)
    assert list(lad) == [*bench.RUNGS, "torch"]
    assert all(v["tokens_per_s"] > 0 and v["saved_mb"] > 0 for v in lad.values())
    # the difference from rung 0 where one was measured, and no figure where none was
    assert [k for k, v in lad.items() if "max_diff" in v] == list(bench.RUNGS[1:])
    monkeypatch.setattr(bench, "check_rungs", lambda config: {"+ LayerNorm kernel": 1e-3})
    with pytest.raises(RuntimeError, match="differs from rung 0 by more than 1e-05"):
        bench.bench_ladder(TINY, reps=1)
