"""Chapter 11d, looking inside: the cache adds up (residual stream, heads, logit attribution) on the encoder-decoder
and on GPT, leaves the default forward untouched, patches what it is told, fails once and clearly on bad input;
and the multi-seed benchmark reproduces its committed check row."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import ROOT
from transformer_nb.gpt import GPT
from transformer_nb.inside import (
    ActivationCache,
    UnknownPlace,
    ablation_costs_ld,
    check_places,
    lens_over,
    lm_lens,
    logit_attribution,
    logit_lens,
    number_pairs,
    patch_head,
    patch_position,
    patching_study,
    place_names,
    recomposition_error,
    run_with_cache,
    spearman,
)
from transformer_nb.masking import causal_mask
from transformer_nb.transformer import Transformer

RESULTS = ROOT / "benchmarks" / "results" / "inside.json"


def hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.fixture
def tr():
    torch.manual_seed(0)
    return Transformer(11, 13, d_model=24, num_heads=4, num_encoder_layers=2, num_decoder_layers=3,
                       d_ff=40, dropout=0.1).eval()


@pytest.fixture
def inputs():
    torch.manual_seed(1)
    return torch.randint(4, 11, (2, 7)), torch.randint(4, 13, (2, 5))


def gpts():
    torch.manual_seed(2)
    return [GPT(17, d_model=32, num_heads=4, d_ff=48, num_layers=3, max_len=16, dropout=0.1).eval(),
            GPT(17, d_model=32, num_heads=2, d_ff=48, num_layers=1, max_len=16, positions="learned",
                activation="relu").eval()]


def test_recomposition_encoder_decoder(tr, inputs):
    logits, cache = run_with_cache(tr, *inputs, tgt_mask=causal_mask(5))
    err = recomposition_error(tr, cache)
    assert set(err) == {"encoder", "decoder"} and max(err.values()) <= 1e-6
    for i in range(3):  # the residual stream after each sublayer, and the heads' sum
        c = lambda k, i=i: cache[f"decoder.{i}.{k}"]
        torch.testing.assert_close(c("resid_pre") + c("self_attn"), c("resid_mid"), atol=1e-6, rtol=0)
        torch.testing.assert_close(c("resid_mid") + c("cross_attn"), c("resid_cross"), atol=1e-6, rtol=0)
        torch.testing.assert_close(c("resid_cross") + c("ffn"), c("resid_post"), atol=1e-6, rtol=0)
        mha = tr.decoder.layers[i].cross_attn
        torch.testing.assert_close(c("cross_attn.heads").sum(2) + mha.W_o.bias, c("cross_attn"),
                                   atol=1e-6, rtol=0)
    torch.testing.assert_close(cache["encoder.norm"], tr.encoder.norm(cache["encoder.1.resid_post"]))


@pytest.mark.parametrize("gpt", gpts(), ids=["sinusoidal-gelu", "learned-relu"])
def test_recomposition_and_attribution_gpt(gpt):
    ids = torch.randint(0, 17, (3, 9), generator=torch.Generator().manual_seed(3))
    logits, cache = run_with_cache(gpt, ids)
    assert recomposition_error(gpt, cache)["decoder"] <= 1e-6
    att = logit_attribution(gpt, cache, torch.tensor([8, 3, 0]), torch.tensor([1, 2, 3]), 4)
    diff = logits[[0, 1, 2], [8, 3, 0], [1, 2, 3]] - logits[[0, 1, 2], [8, 3, 0], 4]
    assert (sum(att.values()) - diff).abs().max() <= 1e-5
    heads = [k for k in att if k.startswith("decoder.0.self_attn.") and k[-1].isdigit()]
    assert len(heads) == gpt.num_heads and "decoder.0.self_attn.bias" in att
    torch.testing.assert_close(logit_lens(gpt, cache)[-1], logits, atol=1e-6, rtol=0)


@pytest.mark.parametrize("norm", ["layer", "none"])
def test_attention_only_gpt(norm):
    """Chapter 11e's GPT has no FFN (d_ff=0): no `ffn` place, and the stream after its one
    attention is `resid_post`. place_names listed decoder.0.resid_mid and decoder.0.ffn, which
    do not exist, and run_with_cache failed with a bare KeyError 'decoder.0.self_attn.z'"""
    torch.manual_seed(5)
    gpt = GPT(17, d_model=32, num_heads=4, d_ff=0, num_layers=2, max_len=16, norm=norm).eval()
    names = place_names(gpt)
    assert names[:6] == ["decoder.embed", "decoder.0.resid_pre", "decoder.0.self_attn.z",
                         "decoder.0.self_attn.heads", "decoder.0.self_attn", "decoder.0.resid_post"]
    assert len(names) == 1 + 2 * 5 + 2  # embed, 5 places a layer, the final norm (or identity), logits
    ids = torch.randint(0, 17, (3, 9), generator=torch.Generator().manual_seed(6))
    logits, cache = run_with_cache(gpt, ids)
    assert list(cache) == names and torch.equal(logits, gpt(ids))
    assert recomposition_error(gpt, cache)["decoder"] <= 1e-6
    for i in range(2):
        c = lambda k, i=i: cache[f"decoder.{i}.{k}"]
        torch.testing.assert_close(c("resid_pre") + c("self_attn"), c("resid_post"), atol=1e-6, rtol=0)
    att = logit_attribution(gpt, cache, 8, torch.tensor([1, 2, 3]), 4)
    assert not any(k.endswith("ffn") for k in att)
    diff = logits[:, 8, [1, 2, 3]].diagonal() - logits[:, 8, 4]
    assert (sum(att.values()) - diff).abs().max() <= 1e-5
    torch.testing.assert_close(logit_lens(gpt, cache)[-1], logits, atol=1e-6, rtol=0)
    ids2 = ids.clone(); ids2[:, 2] = (ids[:, 2] + 1) % 17
    p = patching_study(gpt, (ids,), (ids2,), lambda l: (l[:, -1, 1] - l[:, -1, 2]).mean())
    assert set(p.sublayers) == {"decoder.0.self_attn", "decoder.1.self_attn"}
    assert p.heads["decoder"].shape == (2, 4) and p.resid["decoder"][0].tolist() == [0, 0, 1] + [0] * 6
    with pytest.raises(UnknownPlace, match="unknown place 'decoder.0.ffn'; the places of this GPT"):
        run_with_cache(gpt, ids, places=["decoder.0.ffn"])

def test_attribution_encoder_decoder_sums_to_the_difference(tr, inputs):
    logits, cache = run_with_cache(tr, *inputs, tgt_mask=causal_mask(5))
    att = logit_attribution(tr, cache, 4, torch.tensor([5, 6]), torch.tensor([7, 8]))
    diff = logits[[0, 1], 4, [5, 6]] - logits[[0, 1], 4, [7, 8]]
    assert (sum(att.values()) - diff).abs().max() <= 1e-5
    assert {"decoder.2.cross_attn.3", "decoder.2.cross_attn.bias", "decoder.norm.bias", "output.bias"} <= set(att)


def test_default_forward_is_untouched(tr, inputs):
    mask = causal_mask(5)
    before = tr(*inputs, tgt_mask=mask)
    run_with_cache(tr, *inputs, tgt_mask=mask)
    assert hooks(tr) == 0 and torch.equal(tr(*inputs, tgt_mask=mask), before)
    with pytest.raises(ValueError):  # a failing forward leaves no hook behind either
        run_with_cache(tr, inputs[0], inputs[1], tgt_mask=causal_mask(3))
    assert hooks(tr) == 0
    tr.train()
    run_with_cache(tr, *inputs, tgt_mask=mask)
    assert tr.training  # the mode is restored


def test_patching_a_run_with_its_own_activations_changes_nothing(tr, inputs):
    mask = causal_mask(5)
    logits, cache = run_with_cache(tr, *inputs, tgt_mask=mask)
    for patch in (patch_head(cache, "decoder.1.cross_attn", 2), patch_position(cache, "encoder.1.resid_pre", 3),
                  {"decoder.0.ffn": cache["decoder.0.ffn"]}, {"logits": lambda x: x}):
        assert torch.equal(run_with_cache(tr, *inputs, tgt_mask=mask, patches=patch)[0], logits)


def test_patching_every_head_equals_patching_the_attention(tr, inputs):
    mask, (src, tgt) = causal_mask(5), inputs
    src2 = src.flip(1)
    _, clean = run_with_cache(tr, src, tgt, tgt_mask=mask)
    heads = {"decoder.1.cross_attn.z": clean["decoder.1.cross_attn.z"]}
    whole = {"decoder.1.cross_attn": clean["decoder.1.cross_attn"]}
    a, ca = run_with_cache(tr, src2, tgt, tgt_mask=mask, patches=heads)
    b, _ = run_with_cache(tr, src2, tgt, tgt_mask=mask, patches=whole)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    torch.testing.assert_close(ca["decoder.1.cross_attn.heads"], clean["decoder.1.cross_attn.heads"])


def test_patch_head_takes_groups_of_heads_and_one_position_per_row(tr, inputs):
    mask, (src, tgt) = causal_mask(5), inputs
    _, clean = run_with_cache(tr, src, tgt, tgt_mask=mask)
    _, other = run_with_cache(tr, src.flip(1), tgt, tgt_mask=mask)
    z = lambda patch: run_with_cache(tr, src.flip(1), tgt, tgt_mask=mask, patches=patch)[1]["decoder.1.cross_attn.z"]
    torch.testing.assert_close(z(patch_head(clean, "decoder.1.cross_attn", [0, 1, 2, 3])),
                               clean["decoder.1.cross_attn.z"])
    two = z(patch_head(clean, "decoder.1.cross_attn", [1, 3]))
    torch.testing.assert_close(two[:, :, [1, 3]], clean["decoder.1.cross_attn.z"][:, :, [1, 3]])
    torch.testing.assert_close(two[:, :, [0, 2]], other["decoder.1.cross_attn.z"][:, :, [0, 2]])
    # one position per row: row 0 at position 4, row 1 at position 1, every other place as in the other run
    one = z(patch_head(clean, "decoder.1.cross_attn", 2, pos=torch.tensor([4, 1])))
    want = other["decoder.1.cross_attn.z"].clone()
    want[0, 4, 2], want[1, 1, 2] = clean["decoder.1.cross_attn.z"][0, 4, 2], clean["decoder.1.cross_attn.z"][1, 1, 2]
    torch.testing.assert_close(one, want)
    for head in ([], [0, 4], "1", True):
        with pytest.raises(ValueError, match="head must be in 0..3 for decoder.1.cross_attn"):
            patch_head(clean, "decoder.1.cross_attn", head)
    with pytest.raises(ValueError, match=r"pos must be in 0..4, got \[5, 1\]"):
        patch_head(clean, "decoder.1.cross_attn", 0, pos=torch.tensor([5, 1]))


@pytest.mark.parametrize("gpt", gpts(), ids=["sinusoidal-gelu", "learned-relu"])
def test_lm_lens_reads_the_models_own_last_layer(gpt):
    ids = torch.randint(0, 17, (100,), generator=torch.Generator().manual_seed(4))
    lens = lm_lens(gpt, ids, context=8)
    L = len(gpt.stack.layers)
    assert lens.accuracy.shape == (L + 1,) and lens.position.shape == (L + 1, 8)
    x, y = ids[:96].view(12, 8), ids[1:97].view(12, 8)
    with torch.no_grad():
        p = gpt(x).softmax(-1)
    assert float(lens.accuracy[-1]) == pytest.approx(float((p.argmax(-1) == y).float().mean()))
    torch.testing.assert_close(lens.position[-1], p.gather(-1, y[..., None])[..., 0].mean(0))
    assert float(lens.first.sum()) == pytest.approx(1.0, abs=1e-6) or float(lens.accuracy[-1]) == 0
    with pytest.raises(ValueError, match="ids must hold over context=8 ids, got 8"):
        lm_lens(gpt, ids[:8], context=8)


def test_patching_study_restores_all_at_the_changed_token(tr, inputs):
    (src, tgt), mask = inputs, causal_mask(5)
    src2 = src.clone(); src2[:, 2] = 4
    metric = lambda l: (l[:, -1, 5] - l[:, -1, 6]).mean()
    p = patching_study(tr, (src, tgt), (src2, tgt), metric, tgt_mask=mask)
    assert p.resid["encoder"][0].tolist() == [0, 0, 1, 0, 0, 0, 0]
    assert abs(p.resid["decoder"][-1, -1] - 1) < 1e-4 and p.resid["decoder"][-1, :-1].abs().max() < 1e-4
    assert {k: v.shape for k, v in p.heads.items()} == {"encoder": (2, 4), "decoder": (3, 4), "cross": (3, 4)}


def test_bad_input_is_one_clear_error(tr, inputs):
    (src, tgt), mask = inputs, causal_mask(5)
    logits, cache = run_with_cache(tr, src, tgt, tgt_mask=mask, places=["decoder.0.ffn"])
    with pytest.raises(ValueError, match="unknown place 'decoder.9.ffn'; the places of this Transformer are: "
                                         "encoder.embed, encoder.0.resid_pre"):
        run_with_cache(tr, src, tgt, places=["decoder.9.ffn"])
    with pytest.raises(KeyError, match="was not recorded"):
        cache["decoder.1.ffn"]
    assert "decoder.0.ffn" in cache and "nope" not in cache and cache.get("nope") is None
    with pytest.raises(ValueError, match=r"clean and corrupted inputs must have the same shapes, got \[\(2, 7\)"):
        patching_study(tr, (src, tgt), (src[:, :6], tgt), lambda l: l.mean())
    _, full = run_with_cache(tr, src, tgt, tgt_mask=mask)
    with pytest.raises(ValueError, match="head must be in 0..3 for encoder.1.self_attn, got 4"):
        patch_head(full, "encoder.1.self_attn", 4)
    with pytest.raises(ValueError, match="must have the activation's shape"):
        run_with_cache(tr, src[:, :6], tgt, tgt_mask=mask, patches={"encoder.embed": full["encoder.embed"]})
    with pytest.raises(TypeError, match="a Transformer or a GPT, got Sequential"):
        run_with_cache(nn.Sequential(nn.Linear(2, 2)), torch.zeros(1, 2))
    post = Transformer(11, 13, d_model=24, num_heads=4, num_encoder_layers=1, num_decoder_layers=1, d_ff=40,
                       norm_first=False)
    with pytest.raises(ValueError, match="pre-LN"):
        place_names(post)
    with pytest.raises(ValueError, match="computed from other places"):
        run_with_cache(tr, src, tgt, patches={"decoder.0.self_attn.heads": lambda x: x})
    with pytest.raises(UnknownPlace):
        check_places(tr, "logit")
    gpt = gpts()[0]  # tools of the encoder-decoder given a GPT, and the other way round
    for call in (lambda: lens_over(gpt, None, []), lambda: ablation_costs_ld(gpt, (src,), lambda l: l.mean()),
                 lambda: number_pairs(gpt, None)):
        with pytest.raises(TypeError, match="model must be a Transformer, got GPT"):
            call()
    with pytest.raises(TypeError, match="model must be a GPT, got Transformer"):
        lm_lens(tr, torch.arange(100))
    with pytest.raises(ValueError, match=r"word must be one of \['hundreds', 'tens', 'units'\], got 'tenths'"):
        number_pairs(tr, None, "tenths")
    assert isinstance(cache, ActivationCache)


def test_spearman():
    assert spearman(torch.tensor([1., 2, 3, 4]), torch.tensor([10., 20, 30, 40])) == pytest.approx(1)
    assert spearman(torch.tensor([1., 2, 3]), torch.tensor([3., 2, 1])) == pytest.approx(-1)
    assert spearman(torch.tensor([1., 1, 2]), torch.tensor([1., 2, 3])) == pytest.approx(0.8660254)
    assert spearman(torch.tensor([1., 2, 3]), torch.tensor([1., 1, 1])) != spearman(torch.ones(3), torch.ones(3))


def test_committed_runs_add_up():
    "Every committed seed: recomposition <= 1e-6, attribution <= 1e-5, and the lens's last reading is the model's"
    runs = json.loads(RESULTS.read_text())["runs"]
    assert len(runs) >= 5
    for r in runs:
        assert max(r["recomposition"].values()) <= 1e-6 and r["attribution_error"] <= 1e-5
        assert r["pairs"] > 50 and r["clean"] > 0 > r["corrupted"]


def test_benchmark_rerun_reproduces_its_committed_check_row():
    "benchmarks/inside.py, re-run for its small check configuration, prints the committed row"
    results = json.loads(RESULTS.read_text())
    check = results["check"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if results["kernels"] == "avx2" and "avx2" in Path("/proc/cpuinfo").read_text():  # tools/kernels.sh
        env.update(ATEN_CPU_CAPABILITY="avx2", MKL_ENABLE_INSTRUCTIONS="AVX2", ONEDNN_MAX_CPU_ISA="AVX2")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "inside.py"), "--lang", check["lang"],
                        "--seeds", str(check["seed"]), "--steps", str(check["steps"]), "--print"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    drop = lambda d: {k: v for k, v in d.items() if k not in ("seconds", "attribution_error")}
    assert drop(row) == drop(check)
