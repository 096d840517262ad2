"""benchmarks/modern_seeds.py: the table of chapter 11f (what each change buys) was made with chapter 11c's recipe,
covers the configurations the chapter shows, and re-running one small configuration reproduces its stored row."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, benchmark_script

SCRIPT = ROOT / "benchmarks" / "modern_seeds.py"
RESULTS = json.loads((ROOT / "benchmarks" / "results" / "seeds_modern.json").read_text())


@pytest.fixture(scope="module")
def script():
    "The script as a module (its functions, without running it)"
    with benchmark_script("modern_seeds") as m: yield m


def test_the_stored_recipe_is_chapter_11cs(script):
    "A change to 11c's model or training, or to a configuration, without running the script again fails here"
    from transformer_nb.gpt import CHAR_LM, LM_TRAINING
    assert RESULTS["training"] == LM_TRAINING
    assert RESULTS["configs"] == {n: dict(label=lab, model=dict(CHAR_LM, **kw))
                                  for n, (lab, kw) in script.CONFIGS.items()}
    for r in RESULTS["runs"]:
        assert r["steps"] == LM_TRAINING["steps"] and r["config"] in script.CONFIGS


def test_every_configuration_has_its_baseline_seed():
    "Each configuration's seeds were also run with the 2017 block, so that they can be compared seed by seed"
    base = {r["seed"] for r in RESULTS["runs"] if r["config"] == "2017"}
    assert base and all(r["seed"] in base for r in RESULTS["runs"])


def test_differences_names_what_changed(script):
    row = dict(config="rms", seed=0, steps=5, bits_per_char=4.5, cpu_s=3.0)
    assert script.differences(row, dict(row, cpu_s=9.0)) == []          # the time may differ
    assert script.differences(row, dict(row, bits_per_char=4.25)) == ["bits_per_char: stored 4.5, now 4.25"]


@pytest.mark.parametrize("args, says", [
    (["--seeds", "-1"], "--seeds must be >= 0, got [-1]"),
    (["--steps", "0"], "--steps must be >= 1, got 0"),
])
def test_bad_arguments_get_one_line_and_status_2(args, says):
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert says in out.stderr


def test_training_one_model_again_reproduces_its_stored_row():
    "One thread, the AVX2 kernels of tools/kernels.sh: the `llama` configuration (every switch) after 5 steps, to the last digit"
    assert any(r["config"] == "llama" and r["seed"] == 0 and r["steps"] == 5 for r in RESULTS["quick"])
    cmd = f"source tools/kernels.sh && exec {sys.executable} {SCRIPT} --configs llama --seeds 0 --steps 5 --check"
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the same as the stored row" in out.stdout
