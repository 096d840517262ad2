"""Chapter 11c: sampling tested statistically (Pearson's χ² at α = 0.001 with 20,000 seeded draws), its limits and
errors; the decoder-only model equals torch's causal nn.TransformerEncoder; cached generation equals uncached, for it
and for the encoder-decoder; benchmarks/gpt_heads.py reproduces its committed small configuration."""
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import small_gpt
from transformer_nb.decoding import greedy_search
from transformer_nb.gpt import (
    GPT,
    bits_per_char,
    chi2_quantile,
    filter_logits,
    generate,
    induction_scores,
    load_lm,
    ngram_bits,
    previous_token_scores,
    pydoc_text,
    sample_next,
    sampler,
    sampling_test,
    save_lm,
)
from transformer_nb.layers import torch_state
from transformer_nb.masking import padding_mask
from transformer_nb.multihead import load_weights
from transformer_nb.transformer import Transformer

ROOT = Path(__file__).resolve().parents[1]
N, ALPHA = 20_000, 1e-3     # every statistical test: 20,000 draws, false-alarm rate 0.001


def _draws(logits, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    return lambda n: sample_next(logits.expand(n, -1), generator=g, **kw)


def _intended(probs, keep):
    "probs restricted to the kept tokens, renormalised: what a correct filter samples from"
    p = torch.where(torch.tensor(keep, dtype=torch.bool), probs, torch.zeros_like(probs))
    return p / p.sum()


P = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05])

# (settings, the kept tokens written out by hand, or None: the tempered distribution)
CASES = {
    "plain": ({}, [1, 1, 1, 1, 1]),
    "top-p crossing kept": (dict(top_p=0.8), [1, 1, 1, 0, 0]),       # 0.4 + 0.3 < 0.8 <= 0.85
    "top-p just over a sum": (dict(top_p=0.71), [1, 1, 1, 0, 0]),
    "top-p first token": (dict(top_p=0.4), [1, 0, 0, 0, 0]),
    "top-p just over first": (dict(top_p=0.41), [1, 1, 0, 0, 0]),
    "top-k 3": (dict(top_k=3), [1, 1, 1, 0, 0]),
    "top-k 3 and top-p 0.5": (dict(top_k=3, top_p=0.5), [1, 1, 0, 0, 0]),
}


@pytest.mark.parametrize("name", CASES)
def test_sampled_frequencies_match_the_intended_distribution(name):
    kw, keep = CASES[name]
    r = sampling_test(_draws(P.log(), **kw), _intended(P, keep), N, ALPHA)
    assert r.leaked == 0 and r.passed, r
    assert r.tv < 0.01


@pytest.mark.parametrize("T", [0.5, 2.0])
def test_temperature_samples_p_to_the_power_one_over_T(T):
    intended = P ** (1 / T) / (P ** (1 / T)).sum()
    r = sampling_test(_draws(P.log(), temperature=T), intended, N, ALPHA)
    assert r.passed, r


def test_temperature_applies_before_top_p():
    "At T = 2, P becomes (0.31, 0.27, 0.19, 0.15, 0.11): top-p 0.8 keeps four tokens, not three"
    hot = P.sqrt() / P.sqrt().sum()
    r = sampling_test(_draws(P.log(), temperature=2.0, top_p=0.8), _intended(hot, [1, 1, 1, 1, 0]), N, ALPHA)
    assert r.passed, r


def test_ties_are_kept_together_and_sampled_equally():
    logits = torch.tensor([2.0, 1.0, 1.0, 1.0, 0.0])
    p = logits.softmax(-1)
    for kw, keep in ((dict(top_k=2), [1, 1, 1, 1, 0]), (dict(top_p=p[0].item() + 1e-3), [1, 1, 1, 1, 0])):
        r = sampling_test(_draws(logits, **kw), _intended(p, keep), N, ALPHA)
        assert r.passed, (kw, r)


def _wrong_top_p(x, top_p, g):
    "The classic mistake: drop every token whose cumulative probability exceeds p, the crossing one included"
    p = x.softmax(-1)
    sp, order = p.sort(-1, descending=True)
    drop = sp.cumsum(-1) > top_p
    return torch.multinomial(x.masked_fill(drop.scatter(-1, order, drop), -math.inf).softmax(-1), 1, generator=g)[:, 0]


def test_the_test_has_power_and_few_false_alarms():
    "Over 100 seeds: the correct top-p fails at most twice (expected 0.1), the wrong one every time"
    intended = _intended(P, [1, 1, 1, 0, 0])
    correct = wrong = 0
    for seed in range(100):
        g = torch.Generator().manual_seed(seed)
        correct += not sampling_test(lambda n: sample_next(P.log().expand(n, -1), top_p=0.8, generator=g),
                                     intended, N, ALPHA).passed
        wrong += not sampling_test(lambda n: _wrong_top_p(P.log().expand(n, -1), 0.8, g), intended, N, ALPHA).passed
    assert correct <= 2 and wrong == 100, (correct, wrong)


def test_a_small_bias_is_caught():
    "A sampler off by 2 percentage points on one token fails the test (power against small errors)"
    biased = torch.tensor([0.42, 0.28, 0.15, 0.1, 0.05])
    fails = sum(not sampling_test(_draws(biased.log(), seed=s), P, N, ALPHA).passed for s in range(20))
    assert fails >= 18, fails


def test_chi2_quantile_known_values():
    # tables: chi2(0.999, 1) = 10.828, chi2(0.999, 4) = 18.467, chi2(0.95, 10) = 18.307
    for q, df, x in ((0.999, 1, 10.828), (0.999, 4, 18.467), (0.95, 10, 18.307)):
        assert abs(chi2_quantile(q, df) - x) < 2e-3


def test_limits_equal_greedy_and_the_identity():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 30, generator=g)
    greedy = logits.argmax(-1)
    for kw in (dict(temperature=1e-5), dict(top_k=1), dict(top_p=1e-9), dict(temperature=1e-30)):
        assert torch.equal(sample_next(logits, generator=g, **kw), greedy), kw
    base = filter_logits(logits)
    for kw in (dict(top_k=30), dict(top_k=10_000), dict(top_p=1.0), dict(top_k=30, top_p=1.0)):
        assert torch.equal(filter_logits(logits, **kw), base), kw
    # batched shapes: (2, 3, V) -> (2, 3)
    assert sample_next(torch.randn(2, 3, 7)).shape == (2, 3)


@pytest.mark.parametrize("kw, words", [
    (dict(temperature=0), "temperature must be"), (dict(temperature=-1.0), "temperature must be"),
    (dict(temperature=math.inf), "temperature must be"), (dict(temperature="1"), "temperature must be"),
    (dict(top_p=0), "top_p must be in (0, 1]"), (dict(top_p=1.01), "top_p must be in (0, 1]"),
    (dict(top_p=math.nan), "top_p must be in (0, 1]"),
    (dict(top_k=0), "top_k must be >= 1"), (dict(top_k=2.0), "top_k must be an int"),
])
def test_bad_settings_name_the_argument(kw, words):
    with pytest.raises((ValueError, TypeError), match=None) as e: sample_next(P.log(), **kw)
    assert words in str(e.value)


def test_bad_logits():
    for logits, words in ((torch.tensor([0.0, math.nan]), "NaN"), (torch.tensor([0.0, math.inf]), "+inf"),
                          (torch.full((3,), -math.inf), "no token left"), (torch.tensor([1, 2]), "logits"),
                          ([0.1, 0.2], "logits must be a torch.Tensor")):
        with pytest.raises((ValueError, TypeError)) as e: sample_next(logits)
        assert words in str(e.value)


def _gpt(seed=0, V=11, **kw):
    torch.manual_seed(seed)
    return GPT(V, **dict(dict(d_model=24, num_heads=4, d_ff=40, num_layers=2, max_len=32), **kw)).eval()


def test_gpt_equals_a_causal_torch_encoder_outputs_and_gradients():
    m = _gpt()
    ref = nn.TransformerEncoder(nn.TransformerEncoderLayer(24, 4, 40, dropout=0.0, activation="gelu",
                                                           batch_first=True, norm_first=True),
                                num_layers=2, norm=nn.LayerNorm(24), enable_nested_tensor=False)
    load_weights(ref, torch_state(m.stack))
    ids = torch.randint(0, 11, (3, 9))
    ours = m(ids)
    theirs = m.output(ref(m.embed(ids), mask=nn.Transformer.generate_square_subsequent_mask(9, dtype=torch.bool),
                          is_causal=True))
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    (ours.sin().sum()).backward(); (theirs.sin().sum()).backward()
    g_ours = torch_state(m.stack, {n: p.grad for n, p in m.stack.named_parameters()})
    for n, p in ref.named_parameters(): torch.testing.assert_close(g_ours[n], p.grad, rtol=1e-5, atol=1e-5)


def test_gpt_is_causal_and_tied():
    m = _gpt()
    ids = torch.randint(0, 11, (2, 10))
    other = ids.clone(); other[:, 6:] = (other[:, 6:] + 1) % 11
    torch.testing.assert_close(m(ids)[:, :6], m(other)[:, :6])
    assert m.output.weight is m.embed.tokens.embed.weight


@pytest.mark.parametrize("kw", [dict(greedy=True), dict(seed=3), dict(seed=5, top_k=3, temperature=0.7),
                                dict(seed=1, top_p=0.9)])
def test_cached_generation_equals_uncached_gpt(kw):
    m = _gpt()
    prompt = torch.randint(0, 11, (4, 5))
    a = generate(m, prompt, 20, use_cache=True, **kw)
    b = generate(m, prompt, 20, use_cache=False, **kw)
    assert a.shape == (4, 25) and torch.equal(a, b)
    assert torch.equal(a[:, :5], prompt)


def test_generate_one_prompt_and_errors():
    m = _gpt()
    out = generate(m, torch.tensor([1, 2, 3]), 4, seed=0)
    assert out.shape == (7,)
    assert torch.equal(out, generate(m, torch.tensor([1, 2, 3]), 4, seed=0))
    for call, words in ((lambda: generate(m, torch.tensor([1]), 40), "exceeds the model's max_len"),
                        (lambda: generate(m, torch.tensor([1]), 4, top_p=2.0), "top_p"),
                        (lambda: generate(m, torch.tensor([1.0]), 4), "prompt"),
                        (lambda: generate(m, torch.tensor([1]), 4, seed=-1), "seed")):
        with pytest.raises((ValueError, TypeError)) as e: call()
        assert words in str(e.value)


def _seq2seq(seed=0, V=13):
    torch.manual_seed(seed)
    return Transformer(V, V, d_model=24, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=40).eval()


@pytest.mark.parametrize("kw", [dict(seed=0), dict(seed=2, top_k=4), dict(seed=1, top_p=0.8, temperature=0.8)])
def test_cached_sampling_equals_uncached_encoder_decoder(kw):
    m = _seq2seq()
    src = torch.randint(4, 13, (3, 6)); src[1, 4:] = 0
    mask = padding_mask(src, 0)
    a = greedy_search(m, src, mask, 12, use_cache=True, pick=sampler(**kw))[0]
    b = greedy_search(m, src, mask, 12, use_cache=False, pick=sampler(**kw))[0]
    assert torch.equal(a, b)


def test_encoder_decoder_sampling_distribution():
    "The first sampled token of the encoder-decoder follows the decoder's softmax at temperature 0.7, top-k 5"
    m = _seq2seq()
    src = torch.randint(4, 13, (1, 6))
    memory = m.encode(src)
    logits = m.decode(torch.tensor([[1]]), memory)[0, -1]
    intended = filter_logits(logits, temperature=0.7, top_k=5).softmax(-1).detach()
    srcs = src.expand(N, -1)
    r = sampling_test(lambda n: greedy_search(m, srcs[:n], max_len=1, eos=None,
                                                   pick=sampler(temperature=0.7, top_k=5, seed=0))[0][:, 0],
                      intended, N, ALPHA)
    assert r.passed, r


def test_save_and_load_lm(tmp_path):
    m = _gpt()
    save_lm(tmp_path / "lm.pt", m, "abcdefghijk", steps=1)
    m2, chars, meta = load_lm(tmp_path / "lm.pt")
    assert chars == "abcdefghijk" and meta == {"steps": 1}
    ids = torch.randint(0, 11, (2, 5))
    torch.testing.assert_close(m(ids), m2(ids))
    torch.save({"x": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a transformer_nb language model"): load_lm(tmp_path / "other.pt")


def test_baselines_and_split():
    text = pydoc_text()
    assert len(text.train) + len(text.valid) > 460_000
    assert 0.08 < len(text.valid) / (len(text.train) + len(text.valid)) < 0.12
    b = ngram_bits(text.train, text.valid, len(text.chars))
    assert b["bigram"] < b["unigram"] < math.log2(len(text.chars))


def test_head_script_reproduces_its_small_configuration():
    "benchmarks/gpt_heads.py's small configuration, run again, gives the numbers committed in its JSON"
    stored = json.loads((ROOT / "benchmarks" / "results" / "gpt_heads.json").read_text())
    cfg = stored["small_config"]
    torch.set_num_threads(1)
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpt_heads import lm_report
    again = lm_report(pydoc_text(), 0, **cfg)
    for k in ("bits_per_char", "final_loss", "loss_first", "loss_second"):
        assert abs(again[k] - stored["small"][k]) < 1e-3, k
    for k in ("previous_token", "induction"):
        torch.testing.assert_close(torch.tensor(again[k]), torch.tensor(stored["small"][k]), atol=1e-3, rtol=0)


def test_command_line_train_lm_and_generate(tmp_path, capsys, monkeypatch):
    "train-lm saves a model; generate reads the prompt from an argument or stdin; mistakes get one line, no traceback"
    import io

    from transformer_nb.cli import main
    assert main(["train-lm", "--steps", "3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "held-out bits per character" in out.out and "unigram" in out.out
    lm = str(tmp_path / "pydoc_lm.pt")
    assert main(["generate", "--checkpoint", lm, "def ", "--seed", "3", "--max-new-tokens", "10"]) == 0
    a = capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("def "))
    assert main(["generate", "--checkpoint", lm, "--seed", "3", "--max-new-tokens", "10"]) == 0
    assert capsys.readouterr().out == a and a.startswith("def ") and len(a) == 4 + 10 + 1
    for argv, status, words in (
            (["--top-p", "0"], 2, "--top-p: must be in (0, 1]"), (["--temperature", "-1"], 2, "must be a finite number > 0"),
            (["--top-k", "0"], 2, "must be at least 1"), (["--max-new-tokens", "64"], 1, "leaves no room"),
            (["--temperature", "x"], 2, "expected a number")):
        try: got = main(["generate", "--checkpoint", lm, "x", *argv])
        except SystemExit as e: got = e.code
        err = capsys.readouterr().err
        assert got == status and words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert main(["generate", "--checkpoint", lm, "\u2603"]) == 1
    assert "does not know" in capsys.readouterr().err
    assert main(["generate", "--checkpoint", str(tmp_path / "nope.pt"), "x"]) == 1
    assert "no such checkpoint" in capsys.readouterr().err


def test_rows_that_ended_are_filled_with_the_end_token():
    "After eos a row is filled with eos itself (id 0 is a real character, '\\n', in the character model), or with pad"
    m = _gpt()
    prompt = torch.randint(0, 11, (6, 3))
    free = generate(m, prompt, 12, seed=0)
    eos = int(free[0, 3])                       # the first row writes it at once
    out = generate(m, prompt, 12, seed=0, eos=eos)
    for row in out[:, 3:]:
        hits = (row == eos).nonzero()
        if len(hits): assert (row[int(hits[0]):] == eos).all(), row
    padded = generate(m, prompt, 12, seed=0, eos=eos, pad=10)
    assert (padded[0, 4:] == 10).all() and padded[0, 3] == eos


def test_top_level_names_the_decoder_only_model():
    import transformer_nb
    from transformer_nb import GPT as top
    assert top is GPT and "GPT" in transformer_nb.__all__ and "GPT" in dir(transformer_nb)


def test_load_lm_reads_through_the_checkpoints_guard(tmp_path):
    "load_lm refuses, with a ValueError naming the file, what load_checkpoint refuses (chapter 9a's one reader)"
    (tmp_path / "notes.txt").write_text("not a model")
    (tmp_path / "empty.pt").write_bytes(b"")
    torch.save(nn.Linear(2, 2), tmp_path / "module.pt")
    why = {"notes.txt": "not a file torch.save wrote", "empty.pt": "the file is empty",
           "module.pt": "such as a whole module: save its state_dict"}
    for name, words in why.items():
        with pytest.raises(ValueError, match=f"{name} is not a transformer_nb language model: .*{words}"):
            load_lm(tmp_path / name)
    with pytest.raises(IsADirectoryError): load_lm(tmp_path)
    m = _gpt()
    torch.save({"format": "transformer_nb.gpt/1", "config": dict(m.config, d_model=32), "chars": "abcdefghijk",
                "state_dict": m.state_dict(), "meta": {}}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="other.pt"): load_lm(tmp_path / "other.pt")


def test_attention_only_gpt_and_its_cache():
    "d_ff=0 (chapter 11e): no FFN and no norm3 in any layer; causal; the cache still agrees"
    torch.manual_seed(0)
    m = GPT(11, d_model=24, num_heads=4, d_ff=0, num_layers=2, max_len=16,
            positions="learned").eval()
    assert all(l.ffn is None and l.norm3 is None for l in m.stack.layers)
    assert not any(".ffn." in k or ".norm3." in k for k in m.state_dict())
    assert m.config["d_ff"] == 0
    ids = torch.randint(0, 11, (2, 10))
    other = ids.clone(); other[:, 6:] = (other[:, 6:] + 1) % 11
    torch.testing.assert_close(m(ids)[:, :6], m(other)[:, :6])
    prompt = torch.randint(0, 11, (3, 4))
    torch.testing.assert_close(generate(m, prompt, 8, greedy=True, use_cache=True),
                               generate(m, prompt, 8, greedy=True, use_cache=False))
    with pytest.raises(ValueError, match="d_ff must be >= 0, got -3"):
        GPT(11, d_model=24, num_heads=4, d_ff=-3)


def test_no_norm_gpt_is_the_plain_residual_sum():
    "norm='none' (chapter 11e): no LayerNorm anywhere; logits = W_out(embeddings + sublayers)"
    torch.manual_seed(0)
    m = GPT(11, d_model=24, num_heads=4, d_ff=0, num_layers=2, max_len=16,
            norm="none").eval()
    assert not any(isinstance(x, nn.LayerNorm) or type(x).__name__ == "LayerNorm"
                   for x in m.modules())
    assert not any("norm" in k for k in m.state_dict())
    assert m.config["norm"] == "none"
    ids = torch.randint(0, 11, (2, 10))
    x = m.embed(ids)
    mask = torch.ones(10, 10, dtype=torch.bool).tril()
    for layer in m.stack.layers:
        x = x + layer.self_attn(x, x, x, mask=mask, need_weights=False)[0]
    torch.testing.assert_close(m(ids), m.output(x))
    prompt = torch.randint(0, 11, (3, 4))
    torch.testing.assert_close(generate(m, prompt, 8, greedy=True, use_cache=True),
                               generate(m, prompt, 8, greedy=True, use_cache=False))
    with pytest.raises(ValueError, match="norm must be one of .* got 'batch'"):
        GPT(11, d_model=24, num_heads=4, norm="batch")


def test_default_norm_builds_the_same_model():
    "norm='layer' is the default: same parameters, same initial values, same logits"
    torch.manual_seed(3); a = GPT(11, d_model=24, num_heads=4, d_ff=32, max_len=16)
    torch.manual_seed(3); b = GPT(11, d_model=24, num_heads=4, d_ff=32, max_len=16,
                                  norm="layer")
    assert list(a.state_dict()) == list(b.state_dict())
    for k, v in a.state_dict().items(): torch.testing.assert_close(v, b.state_dict()[k],
                                                                   rtol=0, atol=0)
    assert sum(type(x).__name__ == "LayerNorm" for x in a.modules()) == 2 * 2 + 1


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_generate_runs_in_inference_mode_and_hands_back_tensors_autograd_takes(positions):
    """generate runs the model under torch.inference_mode (cheaper per operation than no_grad), yet what it returns,
    and the rotary tables it keeps for later calls, are normal tensors: written in place, and trained on after"""
    m, modes = _gpt(positions=positions), []
    m.register_forward_hook(lambda mod, args, out: modes.append(torch.is_inference_mode_enabled()))
    prompt = torch.tensor([[1, 2, 3]])
    for use_cache in (True, False):
        modes.clear()
        out = generate(m, prompt, 5, greedy=True, use_cache=use_cache)
        assert modes and all(modes), (use_cache, modes)
        assert not torch.is_inference(out)
        out[0, 0] = 4                                   # an inference tensor refuses this outside the mode
    m.train()
    # the prompt's length and offset 0: the rotary tables generate kept are read again, and saved for backward
    m(out[:, :3]).logsumexp(-1).mean().backward()
    assert m.embed.tokens.embed.weight.grad is not None


def test_per_sample_gradients_with_vmap():
    """torch.func's per-sample gradient recipe, vmap(grad(functional_call)), on the GPT and on the Transformer: the
    door's id check steps aside under the transforms (before: vmap refused its read of the ids' values), and each
    row's gradient is that of a backward pass of the row alone; eager calls still refuse a bad id"""
    import torch.nn.functional as F
    from torch.func import functional_call, grad, vmap
    g = small_gpt().eval()
    ids, y = torch.randint(0, 17, (4, 9)), torch.randint(0, 17, (4, 9))
    params = {k: v.detach() for k, v in g.named_parameters()}
    loss = lambda p, i, t: F.cross_entropy(functional_call(g, p, (i[None],))[0], t)
    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, ids, y)
    for r in range(len(ids)):
        g.zero_grad(); F.cross_entropy(g(ids[r:r + 1])[0], y[r]).backward()
        for k, p in g.named_parameters(): torch.testing.assert_close(per_sample[k][r], p.grad, atol=1e-6, rtol=1e-5)
    t = Transformer(11, 13, d_model=32, num_heads=4, num_encoder_layers=1, num_decoder_layers=1, d_ff=64,
                    dropout=0.0).eval()
    src, tgt = torch.randint(0, 11, (3, 5)), torch.randint(0, 13, (3, 6))
    tp = {k: v.detach() for k, v in t.named_parameters()}
    out = lambda p, s, u: functional_call(t, p, (s[None], u[None])).square().mean()
    per_row = vmap(grad(out), in_dims=(None, 0, 0))(tp, src, tgt)
    t.zero_grad(); t(src[1:2], tgt[1:2]).square().mean().backward()
    for k, p in t.named_parameters():
        if p.grad is not None: torch.testing.assert_close(per_row[k][1], p.grad, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="must lie in"): g(ids + 17)


def test_measurements_hand_the_model_back_in_its_mode():
    """bits_per_char, previous_token_scores and induction_scores measure in eval mode and restore the caller's
    mode, as generate does (before: a model in train mode came back in eval mode, its dropout off)"""
    g = small_gpt(dropout=0.1)
    ids = torch.randint(0, 17, (40,))
    measures = [lambda: bits_per_char(g, ids, context=16), lambda: previous_token_scores(g, ids[:16].view(2, 8)),
                lambda: induction_scores(g, torch.arange(17), length=6, batch=4)]
    same = lambda a, b: (all(same(x, y) for x, y in zip(a, b)) if isinstance(a, tuple)
                         else torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b)
    for measure in measures:
        for mode in (True, False):
            g.train(mode)
            first = measure()
            assert all(m.training == mode for m in g.modules())
            assert same(first, measure())            # measured in eval mode: no dropout, the same twice
