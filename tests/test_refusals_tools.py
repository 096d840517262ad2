"""The bad-input audit of the public API (notes/audit_doors.md), the tools beside the model: reading a trained model,
batches, the training helpers, the language model's helpers, checkpoints. Each case used to give a silent wrong
answer, NaN, or an error from inside torch or Python that named something the caller never passed; each now raises
a ValueError/TypeError naming the caller's argument, once, at the door."""
import math

import pytest
import torch

from transformer_nb.gpt import (
    GPT,
    bits_per_char,
    induction_scores,
    lm_batch,
    ngram_bits,
    sampling_test,
)
from transformer_nb.induction import (
    attention_only,
    composition,
    head_scores,
    k_composition,
    repeat_batch,
    run_summary,
    seed_table,
)


def gpt(max_len=32):
    torch.manual_seed(0)
    return GPT(12, d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=max_len)


def test_the_window_helpers_name_context_and_length():
    """Item 2: a GPT of max_len 32 with the default context 64 (or length 24: 48 positions) was told to 'build the
    model with a larger max_len' about a 'sequence length' the caller never typed."""
    model, ids = gpt(), torch.arange(200) % 12
    with pytest.raises(ValueError, match="context 64 exceeds the model's max_len 32: pass a smaller context"):
        bits_per_char(model, ids)
    with pytest.raises(ValueError, match="length 24: its two copies take 48 positions, more than the model's max_len"):
        induction_scores(model, torch.arange(12))
    small = attention_only(2, vocab_size=8, d_model=8, num_heads=2, max_len=16)
    with pytest.raises(ValueError, match="data holds sequences of 32 tokens, more than the model's max_len 16"):
        head_scores(small, repeat_batch(2, 8, 32))
    assert math.isfinite(bits_per_char(model, ids, context=32))       # a context that fits


FAIR = torch.tensor([0.5, 0.5])
draw = lambda n: torch.multinomial(FAIR, n, replacement=True, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("kw, error, words", [
    (dict(alpha=0), ValueError, "alpha must be in \\(0, 1\\), got 0"),       # was 'q must be in (0, 1), got 1'
    (dict(alpha=1.5), ValueError, "alpha must be in \\(0, 1\\), got 1.5"),
    (dict(n=0), ValueError, "n must be >= 1, got 0"),                          # chi2 = nan
    (dict(intended=torch.tensor([5.0, 5.0])), ValueError, "intended must be >= 0 and sum to 1"),   # scored
    (dict(intended=torch.tensor([math.nan, 0.5])), ValueError, "intended must be >= 0 and sum to 1"),
    (dict(intended=[0.5, 0.5]), TypeError, "intended must be a torch.Tensor"),
    (dict(draw=lambda n: draw(n)[:-1]), ValueError, "draw\\(n\\) must return n=200 ids, got 199"),   # scored
    (dict(draw=lambda n: draw(n) + 2), ValueError, "draw\\(n\\) must lie in \\[0, vocab_size=2\\), got 3"),
    (dict(draw=lambda n: draw(n).float()), TypeError, "draw\\(n\\) must hold integer token ids"),
])
def test_sampling_test_checks_its_arguments_and_the_draws(kw, error, words):
    "Item 11: silent NaN or a test of the wrong numbers, and alpha reported as chi2_quantile's q"
    with pytest.raises(error, match=words):
        sampling_test(**{"draw": draw, "intended": FAIR, "n": 200, **kw})
    assert sampling_test(draw, FAIR, n=200).passed


def test_the_analysis_helpers_refuse_bad_counts_windows_and_ids():
    "Item 14: ZeroDivisionError, (B, 0) windows, NaN, bincount's NotImplementedError, torch's random_ errors"
    model, ids, g = gpt(), torch.arange(200) % 12, torch.Generator().manual_seed(0)
    small = attention_only(2, vocab_size=8, d_model=8, num_heads=2, max_len=16)
    cases = [
        (lambda: composition(small, "K", draws=0), ValueError, "draws must be >= 1, got 0"),
        (lambda: k_composition(small, draws=-1), ValueError, "draws must be >= 1, got -1"),
        (lambda: lm_batch(ids, 200, 2, g), ValueError, "ids must hold more than context=200, got 200"),
        (lambda: lm_batch(ids, 0, 2, g), ValueError, "context must be >= 1, got 0"),
        (lambda: lm_batch(ids.view(2, 100), 5, 2, g), ValueError, "ids must have 1 dimensions"),
        (lambda: ngram_bits(ids, ids[:0], 12), ValueError, "valid must hold at least one position"),
        (lambda: ngram_bits(ids, ids, 5), ValueError, "train must lie in \\[0, vocab_size=5\\), got 11"),
        (lambda: ngram_bits(ids.float(), ids, 12), TypeError, "train must hold integer token ids"),
        (lambda: induction_scores(model, torch.arange(0), length=8), ValueError, "pool must hold at least one"),
        (lambda: induction_scores(model, torch.arange(5.0), length=8), TypeError, "pool must hold integer token ids"),
        (lambda: induction_scores(model, torch.arange(40), length=8), ValueError, "pool must lie in"),
        (lambda: induction_scores(model, torch.arange(5), length=8, batch=0), ValueError, "batch must be >= 1"),
        (lambda: run_summary({}), ValueError, "row must be a run of benchmarks/induction_seeds.py"),
        (lambda: seed_table([]), ValueError, "rows must hold at least one run"),
    ]
    for call, error, words in cases:
        with pytest.raises(error, match=words):
            call()
    assert lm_batch(ids, 5, 2, g)[0].shape == (2, 5)
