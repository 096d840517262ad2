"""The chapter Benchmark's reporting (nbs/13_benchmark.ipynb, `book.benchmark`): which targets a spread meets,
the figures of spreads, the ladder and the profiles, the profile table, and the committed results the chapter
draws. The measuring is tested in tests/test_bench.py."""
from pathlib import Path

import pytest

from conftest import bench_result
from transformer_nb.book import bench, benchmark, measure

ROOT = Path(__file__).resolve().parents[1]


def test_committed_results_are_complete():
    "The chapter draws benchmarks/results/cpu.json: a full run (not --quick), with every figure the ratios need."
    res = bench.load_results(ROOT / "benchmarks" / "results" / "cpu.json")
    assert not res["quick"]
    assert set(res["train"]) == {f"T={T}, dropout {p}" for T in (32, 128) for p in (0.1, 0.0)}
    for r in res["train"].values():
        for k in measure.IMPLEMENTATIONS: assert r[k]["peak_mb"] > 0 and r[k]["tokens_per_s"] > 0
    s = bench.summary(res)
    assert all(v > 0 for v in s.values())
    per_setting = ["fast / torch tokens/s", "fast / readable tokens/s", "fast / torch tokens/s, default Adam",
                   "fast / torch peak memory", "fast share of matmul peak", "compiled / fast tokens/s"]
    expected = {f"train {key}: {r}" for key in res["train"] for r in per_setting}
    expected |= {"forward base: fast / torch tokens/s", "forward base: fast / readable tokens/s",
                 "decoding: cached / uncached tokens/s"}
    expected |= {f"train T={T}: fast dropout 0.1 / 0 tokens/s" for T in (32, 128)}
    ladder = [f"T=128, dropout {p}" for p in (0.1, 0.0)]
    expected |= {f"train {key}: bfloat16 autocast / float32 tokens/s" for key in ladder}
    expected |= {f"ladder {key}: {name} / before tokens/s" for key in ladder for name in bench.RUNGS[1:]}
    expected |= {f"ladder {key}: top / torch tokens/s" for key in ladder}
    expected |= {f"kernel returning a {k}: compiled / eager speed" for k in ("float", "mask")}
    assert set(s) == expected
    panels = benchmark.profiled(res)                                  # the chapter draws where the time goes
    assert set(panels) == {f"{part}, length 128, dropout {p}" for part in ("training", "torch.compile")
                           for p in (0.1, 0.0)} | {"forward, base model", "greedy decoding"}
    assert all(b["profile"]["operators"] > 0 and b["profile"]["ms"]["matrix multiplies"] > 0
               for bars in panels.values() for b in bars.values())
    assert all(r["compile_s"] > 0 for r in res["compiled"].values())
    # a difference from rung 0 for every rung compared with it, and none made up for rung 0 or torch
    assert all({k for k, v in lad.items() if "max_diff" in v} == set(bench.RUNGS[1:])
               for lad in res["ladder"].values())
    assert all(v["max_diff"] <= 1e-5 for lad in res["ladder"].values() for v in lad.values()
               if "max_diff" in v)
    runs = sorted((ROOT / "benchmarks" / "results" / "runs").glob("cpu-*.json"))  # the chapter draws their spread
    assert len(runs) == 3 and all(bench.summary(bench.load_results(p)).keys() == s.keys() for p in runs)


def test_show_spread_marks_a_target_not_met_in_every_run():
    r = bench.spread([bench_result(1.0), bench_result(1.5), bench_result(1.2)])
    fig = benchmark.show_spread(r, {"decoding: cached / uncached tokens/s": (5.0, "at least")})
    assert len(fig.axes[0].get_yticklabels()) == len(r)
    colors = [line.get_color() for line in fig.axes[0].lines if line.get_linewidth() == 5]  # the bars
    assert colors[list(r).index("decoding: cached / uncached tokens/s")] == "#c0392b"  # 4-6, not all >= 5


def test_met_asks_every_run():
    assert benchmark.met((1.2, 1.5), (1.2, "at least")) and not benchmark.met((1.1, 1.5), (1.2, "at least"))
    assert benchmark.met((0.7, 0.9), (0.9, "at most")) and not benchmark.met((0.7, 0.95), (0.9, "at most"))
    with pytest.raises(ValueError, match='"at least" or "at most", got \'above\''):
        benchmark.met((1, 2), (1, "above"))


def test_every_profile_group_has_a_style():
    groups = [g for g, _ in bench.PROFILE_GROUPS] + ["everything else"]
    assert sorted(benchmark.GROUP_STYLE) == sorted(groups)
    shorts = [short for short, _ in benchmark.GROUP_STYLE.values()]
    assert len(set(shorts)) == len(shorts) and all(len(s) <= 7 for s in shorts)  # columns of 8


def test_profile_summary_and_figure():
    groups = [g for g, _ in bench.PROFILE_GROUPS] + ["everything else"]
    prof = lambda mm, rest: {"ms": dict.fromkeys(groups, 0.0) | {"matrix multiplies": mm, "everything else": rest},
                             "operators": 10}
    timing = lambda mm, rest, s=1.0: {"median": s, "tokens_per_s": 1 / s, "profile": prof(mm, rest)}
    res = {"train": {"T=128, dropout 0.0": {"fast": timing(80.0, 20.0), "torch": timing(80.0, 40.0, 1.2),
                                            "fast, default Adam": timing(1.0, 1.0), "flops": 1.0},
                     "T=32, dropout 0.0": {"fast": {"median": 1.0}}},          # not profiled: no panel
           "decoding": {"cached": timing(3.0, 7.0), "uncached": timing(30.0, 30.0)}}
    panels = benchmark.profiled(res)
    assert list(panels) == ["training, length 128, dropout 0.0", "greedy decoding"]
    assert list(panels["training, length 128, dropout 0.0"]) == ["fast", "torch"]  # default Adam: not drawn
    s = benchmark.profile_summary(res)
    # timed 1.2 times torch's speed, with 80 of 100 ms in matrix multiplies: at most 1.2 * 100 / 80
    assert s["training, length 128, dropout 0.0"]["ceiling"] == pytest.approx(1.5)
    assert s["greedy decoding"]["cached"] == pytest.approx(dict(ms=10.0, share=0.3, operators=10))
    with pytest.raises(ValueError, match="runs must be a non-empty list of results, got"):
        benchmark.profile_table(res)                                          # one result, not a list
    table = benchmark.profile_table([res, res]).splitlines()
    assert max(map(len, table)) <= 68 and "ceiling in each run: 1.50, 1.50" in table
    # only the groups that took time: mm and rest
    assert "            total      mm    rest   core" in table
    assert "fast          100      80      20    80%" in table
    assert "operators: fast 10, torch 10" in table                           # the same in both runs
    fig = benchmark.show_profiles(res)
    assert [ax.get_title(loc="left") for ax in fig.axes] == list(panels)
    assert [t.get_text() for t in fig.axes[1].get_yticklabels()] == ["cached", "uncached"]


def ladder_result(speed):
    "A result with a ladder of made-up speeds: rung name -> tokens/s, torch's included"
    lad = {name: {"tokens_per_s": speed[name], "saved_mb": 1.0} for name in (*bench.RUNGS, "torch")}
    return {"ladder": {"T=16, dropout 0.1": lad},
            "bf16": {"T=16, dropout 0.1": {"float32": {"tokens_per_s": 10.0}, "bfloat16": {"tokens_per_s": 1.0}}}}


def test_ladder_ratios_and_figure():
    speed = {name: 10.0 + i for i, name in enumerate(bench.RUNGS)} | {"torch": 12.0}
    res = ladder_result(speed)
    r = benchmark.ladder_ratios(res, "T=16, dropout 0.1")
    assert r["readable"] == 1.0 and r["torch"] == pytest.approx(1.2)
    assert r[bench.RUNGS[-1]] == pytest.approx(speed[bench.RUNGS[-1]] / 10)
    assert r["bfloat16"] == pytest.approx(r[bench.RUNGS[-1]] / 10)  # measured against float32's top rung
    fig = benchmark.show_ladder([res, ladder_result(speed | {"torch": 14.0})])
    # rung 0 has every switch off: not the comparisons' "readable", whose name RUNGS[0] is, and not labelled as it
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["every switch off", *bench.RUNGS[1:],
                                                                     "top, bfloat16 autocast"]
    assert fig.axes[-1].get_xlabel() == "training tokens/s, relative to rung 0\n(every switch off)"
