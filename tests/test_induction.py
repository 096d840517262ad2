"""Chapter 11e: the repeated-segment data, the head scores against attention computed by hand, ablation that
restores the weights, K-composition, the phase change, and benchmarks/induction_seeds.py: its stored rows were made
with the chapter's recipe, and re-running a small configuration reproduces its row exactly."""
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from transformer_nb.induction import (
    INDUCTION_MODEL,
    INDUCTION_TRAINING,
    Checkpoint,
    HeadScores,
    ablate,
    attention_only,
    composition,
    eval_batch,
    head_matrices,
    head_scores,
    induction_score,
    k_composition,
    phase_change,
    repeat_batch,
    run_summary,
    seed_table,
)

RESULTS = ROOT / "benchmarks" / "results" / "seeds_induction.json"
SCRIPT = ROOT / "benchmarks" / "induction_seeds.py"


def test_each_sequence_holds_a_segment_and_its_copy():
    r = repeat_batch(50, vocab_size=16, context=40, min_len=5, generator=torch.Generator().manual_seed(3))
    assert r.ids.shape == (50, 40) and r.first.shape == r.second.shape == (50, 39)
    for b in range(50):
        p, n = r.start[b].item(), r.length[b].item()
        assert 5 <= n <= 20 and 0 <= p and p + 2 * n <= 40
        assert torch.equal(r.ids[b, p + n:p + 2 * n], r.ids[b, p:p + n])
        # targets t + 1 with t, t + 1 in a copy: queries p ... p + n - 2 and p + n ... p + 2n - 2
        assert r.first[b].nonzero().flatten().tolist() == list(range(p, p + n - 1))
        assert r.second[b].nonzero().flatten().tolist() == list(range(p + n, p + 2 * n - 1))


def test_the_same_seed_gives_the_same_batch():
    a = repeat_batch(4, generator=torch.Generator().manual_seed(0))
    b = repeat_batch(4, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("kw, error, says", [
    (dict(min_len=20, context=32), ValueError, "min_len 20 needs context >= 40, got context 32"),
    (dict(vocab_size=True), TypeError, "vocab_size must be an int"),
    (dict(batch_size=0), ValueError, "batch_size must be >= 2, got 0"),
])
def test_bad_arguments_name_themselves(kw, error, says):
    with pytest.raises(error, match=says): repeat_batch(**{"batch_size": 4, **kw})


def test_scores_of_evenly_spread_attention_are_one_over_the_keys_seen():
    "With W_q = 0 every head spreads its weight evenly over keys 0 ... t: score 1 / (t + 1)"
    m = attention_only(2, d_model=16, num_heads=2, max_len=24)
    for layer in m.stack.layers: torch.nn.init.zeros_(layer.self_attn.W_q.weight); torch.nn.init.zeros_(layer.self_attn.W_q.bias)
    data = repeat_batch(6, vocab_size=64, context=24, min_len=4, generator=torch.Generator().manual_seed(1))
    s = head_scores(m, data)
    b, t = data.second.nonzero(as_tuple=True)
    torch.testing.assert_close(s.induction, torch.full((2, 2), (1 / (t + 1).double()).mean().item()))
    torch.testing.assert_close(s.previous, torch.full((2, 2), (1 / torch.arange(2, 25).double()).mean().item()))


def test_ablation_silences_a_head_and_restores_it():
    m = attention_only(2, d_model=16, num_heads=2, max_len=32)
    data = eval_batch(m, batch_size=8)
    before = head_scores(m, data)
    w = m.stack.layers[1].self_attn.W_o.weight.clone()
    with ablate(m, [(1, 0)]):
        assert m.stack.layers[1].self_attn.W_o.weight[:, :8].abs().sum() == 0
        during = head_scores(m, data)
    assert during.loss_second != before.loss_second
    assert torch.equal(m.stack.layers[1].self_attn.W_o.weight, w)
    with pytest.raises(ValueError, match="layers 0..1, got layer 2"):
        with ablate(m, [(2, 0)]): pass


def test_k_composition_matches_its_definition():
    m = attention_only(2, d_model=16, num_heads=2, max_len=32)
    comp, base = k_composition(m, draws=3)
    qk, _ = head_matrices(m, 1, 1)
    _, ov = head_matrices(m, 0, 0)
    want = (qk @ ov.T).norm() / (qk.norm() * ov.norm())
    torch.testing.assert_close(comp[0, 1], want)
    assert comp.shape == base.shape == (2, 2) and (base > 0).all()
    with pytest.raises(ValueError, match="2 layers or more, got 1"): k_composition(attention_only(1))


def test_the_phase_change_is_the_first_checkpoint_below_the_ratio():
    z = torch.zeros(1, 1)
    cps = [Checkpoint(i, 100 * i, HeadScores(4.0, s, 0.0, z, z)) for i, s in enumerate([4.0, 3.0, 1.9, 0.5])]
    assert phase_change(cps) == 200 and phase_change(cps, ratio=0.1) is None


def test_the_stored_results_were_made_with_the_chapters_recipe():
    "A recipe changed in the chapter without running the script again fails here"
    stored = json.loads(RESULTS.read_text())
    assert stored["settings"]["training"] == json.loads(json.dumps(INDUCTION_TRAINING))
    assert stored["settings"]["model"] == json.loads(json.dumps(INDUCTION_MODEL))


def test_training_one_model_again_reproduces_its_stored_row():
    "One thread, the AVX2 kernels of tools/kernels.sh: 40 steps of seed 0, the same to the last digit"
    stored = json.loads(RESULTS.read_text())
    assert any(r["seed"] == 0 and r["steps"] == 40 and r["layers"] == 2 for r in stored["quick"])
    cmd = f"source tools/kernels.sh && exec {sys.executable} {SCRIPT} --seeds 0 --layers 2 --steps 40 --check"
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "DIFFERENT" not in out.stdout and "seed 0 layers 2" in out.stdout


def test_induction_score_is_head_scores_for_one_layer():
    m = attention_only(2, d_model=16, num_heads=2, max_len=32)
    data = eval_batch(m, batch_size=8)
    _, attn = m(data.ids, need_weights=True)
    s = head_scores(m, data)
    for layer in range(2): torch.testing.assert_close(induction_score(attn[layer], data), s.induction[layer])


def test_the_no_norm_model_has_no_norm_and_its_matrices_need_no_gain():
    m = attention_only(2, d_model=16, num_heads=2, max_len=32)
    assert m.config["norm"] == "none" and not any("norm" in k for k in m.state_dict())
    qk, ov = head_matrices(m, 0, 1)
    a = m.stack.layers[0].self_attn
    Wq, Wk = a.W_q.weight[8:].detach(), a.W_k.weight[8:].detach()
    torch.testing.assert_close(qk, Wq.T @ Wk)
    assert ov.shape == (16, 16)


def test_run_summary_reads_a_stored_run():
    "The measures the chapter reports, recomputed by hand from one stored row"
    stored = json.loads(RESULTS.read_text())
    row = next(r for r in stored["runs"] if r["layers"] == 2 and r["norm"] == "none")
    s = run_summary(row)
    ind = torch.tensor(row["checkpoints"][-1]["induction"][-1])
    assert s["ind_head"] == int(ind.argmax()) and s["induction"] == pytest.approx(ind.max().item())
    abl = row["ablation"][1][s["ind_head"]]
    assert s["ablated_ratio"] == pytest.approx(abl["loss_second"] / abl["loss_first"])
    costs = [d["loss_second"] for d in row["ablation"][0]]
    assert costs[s["key_head"]] == max(costs)
    h = s["ind_head"]
    assert s["comp_ratio"] == pytest.approx(max(c[h] / b[h] for c, b in zip(row["k_composition"], row["k_baseline"])))
    group = row["group_ablation"]["induction heads"]
    assert s["group_ratio"] == pytest.approx(group["loss_second"] / group["loss_first"])
    assert s["n_induction"] == len(group["heads"]) >= 1
    t = seed_table([row, row])
    assert t["ratio"] == pytest.approx((s["ratio"],) * 3, abs=1e-3)


def test_q_and_v_composition_match_their_definitions():
    m = attention_only(2, d_model=16, num_heads=2, max_len=32)
    qk, ov1 = head_matrices(m, 1, 0)
    _, ov = head_matrices(m, 0, 1)
    q, _ = composition(m, "Q", draws=2)
    v, _ = composition(m, "V", draws=2)
    torch.testing.assert_close(q[1, 0], (ov @ qk).norm() / (ov.norm() * qk.norm()))
    torch.testing.assert_close(v[1, 0], (ov @ ov1).norm() / (ov.norm() * ov1.norm()))
    with pytest.raises(ValueError, match='kind must be "K", "Q" or "V", got \'O\''): composition(m, "O")


def test_ablate_names_heads_and_the_pairs_it_needs():
    """Chapter 7's (kind, layer, head) triples failed with 'too many values to unpack', one bare pair with 'cannot
    unpack non-iterable int object', and a layer out of range spoke of a decoder the caller never named"""
    m = attention_only(2, d_model=16, num_heads=2, max_len=32)
    w = m.stack.layers[1].self_attn.W_o.weight.clone()
    for heads, error, says in [
        ([("decoder", 1, 0)], TypeError, r"heads must hold \(layer, head\) pairs .*got \('decoder', 1, 0\)"),
        ((1, 0), TypeError, r"heads must be a list of \(layer, head\) pairs, got \(1, 0\): for one head write "
                            r"\[\(1, 0\)\]"),
        (3, TypeError, r"heads must be a list of \(layer, head\) pairs, got int 3"),
        ([(2, 0)], ValueError, r"heads: the model has layers 0..1, got layer 2 in \(2, 0\)"),
        ([(1, 0), (1, 2)], ValueError, r"heads: the model has heads 0..1, got head 2 in \(1, 2\)"),
        ([(True, 0)], ValueError, r"heads: the model has layers 0..1, got layer True"),
    ]:
        with pytest.raises(error, match=says):
            with ablate(m, heads): pass
    assert torch.equal(m.stack.layers[1].self_attn.W_o.weight, w)        # nothing was left zeroed


def test_eval_batch_names_the_models_context():
    "A model of context 12 failed inside repeat_batch with 'min_len 8 needs context >= 16, got context 12'"
    with pytest.raises(ValueError, match="model.max_len must be >= 16 to hold a repeat, got 12"):
        eval_batch(attention_only(2, d_model=16, num_heads=2, max_len=12))


def _legend_covers_a_curve(fig):
    "Does a legend of the figure lie over a curve of any of its axes (twins too), between two points included?"
    import numpy as np
    fig.canvas.draw()
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends, "no legend"
    for legend in legends:
        box = legend.get_window_extent()
        for ax in fig.axes:
            for line in ax.get_lines():
                xy = line.get_transform().transform(line.get_xydata())
                t = np.linspace(0, 1, 21)[:, None, None]
                pts = (xy[:-1] + t * (xy[1:] - xy[:-1])).reshape(-1, 2)
                if any(box.contains(x, y) for x, y in pts): return True
    return False


def test_the_chapters_legends_cover_no_curve():
    """The phase-change figure's legend hid the induction score's jump at step 550 (drawn through it, on the twin
    axes), and the seed runs' legend covered the formed runs' ends: both drawn here from the stored seed-0 run and
    every stored run, as the chapter draws them"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transformer_nb.induction import show_phase_change, show_seed_runs
    runs = json.loads(RESULTS.read_text())["runs"]
    seed0 = next(r for r in runs if r["seed"] == 0 and r["layers"] == 2 and r["norm"] == "none")
    cps = [Checkpoint(c["step"], c["tokens"], HeadScores(c["loss_first"], c["loss_second"], c["icl"],
                                                         torch.tensor(c["induction"]), torch.tensor(c["previous"])))
           for c in seed0["checkpoints"] if c["step"] <= 800]
    fig = show_phase_change(cps, title="seed 0, the recipe's first 800 steps")
    assert not _legend_covers_a_curve(fig)
    groups = {"2 layers": [r for r in runs if r["layers"] == 2 and r["norm"] == "none"],
              "1 layer": [r for r in runs if r["layers"] == 1],
              "2 layers, LayerNorm": [r for r in runs if r["norm"] == "layer"]}
    fig2 = show_seed_runs(groups, title="second copy's loss over the first's, every run")
    assert not _legend_covers_a_curve(fig2)
    legend = (fig2.legends or [fig2.axes[0].get_legend()])[0]
    assert [t.get_text() for t in legend.get_texts()] == \
        ["2 layers (10 runs)", "1 layer (5 runs)", "2 layers, LayerNorm (3 runs)"]
    plt.close(fig); plt.close(fig2)
