"""benchmarks/seeds.py: the multi-seed results that chapters 10 and 11a read are complete, were made with the
chapters' recipes, and re-running one model reproduces its stored row."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, benchmark_script

RESULTS = ROOT / "benchmarks" / "results"
SCRIPT = ROOT / "benchmarks" / "seeds.py"


def load(name): return json.loads((RESULTS / name).read_text())


@pytest.fixture(scope="module")
def seeds():
    "The script as a module (its functions, without running it)"
    with benchmark_script("seeds") as m: yield m


def test_the_results_cover_the_seeds_the_chapters_read():
    "Five seeds and two held-out splits of the pronouns; ten date, ten reversal and ten copy models"
    runs = load("seeds_pronouns.json")["pronouns"]["runs"]
    assert {(r["seed"], r["split"]) for r in runs} >= {(s, t) for s in range(5) for t in (0, 1)}
    training = load("seeds_training.json")
    for kind, n in (("dates", 10), ("reverse", 10), ("copy", 10)):
        assert {r["seed"] for r in training[kind]["runs"]} >= set(range(n)), kind


def test_the_stored_recipes_are_the_chapters(seeds):
    "A recipe changed in a chapter without running the script again fails here"
    assert load("seeds_pronouns.json")["pronouns"]["recipe"] == json.loads(json.dumps(seeds.recipe("pronouns")))
    training = load("seeds_training.json")
    for kind in ("dates", "reverse", "copy"):
        assert training[kind]["recipe"] == json.loads(json.dumps(seeds.recipe(kind))), kind


def test_every_pronoun_row_has_every_head_and_ablation():
    for r in load("seeds_pronouns.json")["pronouns"]["runs"]:
        assert {k: (len(v), len(v[0])) for k, v in r["shares"].items()} == {
            "encoder": (2, 4), "decoder": (2, 4), "cross": (2, 4)}
        assert len(r["ablation"]) == 1 + 24 + 6 + 1          # none, each head, each layer, pointing
        assert all(0 <= a <= 1 for a in r["ablation"].values())


def test_differences_names_what_changed(seeds):
    row = {"seed": 0, "seconds": 3.0, "shares": {"cross": [[0.5, 0.25]]}}
    assert seeds.differences(row, dict(row, seconds=9.0)) == []          # the time may differ
    changed = dict(row, shares={"cross": [[0.5, 0.75]]})
    assert seeds.differences(row, changed) == ["shares.cross: stored [[0.5, 0.25]], now [[0.5, 0.75]]"]


@pytest.mark.parametrize("args, says", [
    (["reverse", "--seeds", "-1"], "--seeds and --splits must be >= 0, got [-1]"),
    (["pronouns", "--steps", "40"], "--steps must be >= 1 and is for dates, reverse or training; got 40 for pronouns"),
    (["reverse", "--d-model", "64"], "--d-model is for dates, a multiple of the 4 heads; got 64 for reverse"),
    (["dates", "--d-model", "30"], "--d-model is for dates, a multiple of the 4 heads; got 30 for dates"),
])
def test_bad_arguments_get_one_line_and_status_2(args, says):
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert says in out.stderr


def test_training_one_model_again_reproduces_its_stored_row():
    "One thread, the AVX2 kernels of tools/kernels.sh: a reversal model of 40 steps, the same to the last digit"
    assert any(r["seed"] == 0 and r["steps"] == 40 for r in load("seeds_training.json")["reverse"]["quick"])
    cmd = f"source tools/kernels.sh && exec {sys.executable} {SCRIPT} reverse --seeds 0 --steps 40 --check"
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the same as the stored row" in out.stdout


def test_the_run_probe_is_fixed_and_has_its_runs(seeds):
    "The same 600 strings for every model; the k-th group has one digit k times in a row"
    probe = seeds.run_probe()
    assert probe == seeds.run_probe() and sorted(probe) == list(range(1, 13))
    for k, strings in probe.items():
        assert len(strings) == 50 and all(len(s) == 12 for s in strings)
        assert all(any(d * k in s for d in "0123456789") for s in strings)
