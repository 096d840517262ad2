"""Mistakes a reviewer made on purpose, working through the exercises as a learner: each was passed by its checker,
or failed with a hint that showed equal numbers or pointed elsewhere. Each now gets a hint that names it."""
import math

import torch
from test_grading import fails_with, greedy, mha, tmask

from transformer_nb.book.graders_decoding import (
    grade_filter_logits,
    grade_greedy_search,
)
from transformer_nb.book.graders_parts import grade_attention, grade_multihead
from transformer_nb.book.graders_stack import grade_target_mask
from transformer_nb.book.graders_training import grade_noam_lr
from transformer_nb.decoding import greedy_search
from transformer_nb.gpt import filter_logits


def attention(rescale=True, rate=1.0):
    "Attention with dropout written by hand: `rescale` False keeps the weights as they are, `rate` scales p"
    def f(q, k, v, mask=None, dropout_p=0.0):
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
        if mask is not None: w = w.masked_fill(~mask, float("-inf"))
        w = w.softmax(-1).nan_to_num(0.0)
        if dropout_p == 0: return w @ v, w
        p = dropout_p * rate
        keep = (torch.rand(w.shape) >= p).to(w.dtype)
        return (w * keep / ((1 - p) if rescale else 1)) @ v, w
    return f


def test_hand_written_dropout_passes_and_its_two_mistakes_are_named():
    assert grade_attention(attention())
    fails_with(grade_attention(attention(rescale=False)), "multiplied by 1", "1/(1 - p) = 2")
    fails_with(grade_attention(attention(rate=0.5)), "removes 2", "not about 50%")


def test_noam_lr_off_by_one_and_the_wrong_exponent():
    def shifted(step, d_model, warmup=4000, factor=1.0):
        s = max(step, 1) + 1
        return factor * d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5)
    def exponent(step, d_model, warmup=4000, factor=1.0):
        s = max(step, 1)
        return factor * d_model ** -0.5 * min(s ** -0.5, s * warmup ** -0.5)
    fails_with(grade_noam_lr(shifted), "added 1 to the step")
    fails_with(grade_noam_lr(exponent), "warmup^-0.5")


def test_greedy_without_the_source_mask_on_the_uncached_paths_cross_attention():
    "The encoder reads the mask, the uncached loop's cross-attention does not; the cached path is right"
    def f(model, src, src_mask=None, max_len=32, use_cache=True, bos=1, pad=0, eos=2):
        if use_cache: return greedy_search(model, src, src_mask, max_len, use_cache=True, bos=bos, pad=pad, eos=eos)
        return greedy()(_NoCross(model), src, src_mask, max_len, use_cache=False, bos=bos, pad=pad, eos=eos)
    fails_with(grade_greedy_search(f), "The cached cases pass", "the source's padding mask for the cross-attention")


class _NoCross:
    "A model whose decode drops the memory mask, as a learner's uncached loop did"
    def __init__(self, model): self.model = model
    def encode(self, src, src_mask=None): return self.model.encode(src, src_mask)
    def decode(self, ys, memory, tgt_mask=None, memory_mask=None): return self.model.decode(ys, memory, tgt_mask, None)


def test_filter_returning_probabilities_or_a_large_negative_number():
    fails_with(grade_filter_logits(lambda x, **kw: filter_logits(x, **kw).softmax(-1)), "returned probabilities")
    fails_with(grade_filter_logits(lambda x, **kw: filter_logits(x, **kw).masked_fill(
        torch.isneginf(filter_logits(x, **kw)), -1e9)), "not -inf", "-1e+09")


def test_multihead_dropout_in_eval_names_the_float_it_keeps():
    fails_with(grade_multihead(mha(drop_in_eval=True)), "dropout_p=self.dropout if self.training else 0.0")


def test_target_mask_hiding_queries_as_well_as_keys():
    """It hides the padded keys as asked, and the padded queries' rows too, whose outputs are never read: it passes
    (it was told "a padded query's output is never read" and failed, notes/review_grading.md 10). Hiding the rows
    alone, which equals it with the padding at the end, is told apart with the padding at the start"""
    assert grade_target_mask(tmask(lambda p, c, q: p & c & q))
    fails_with(grade_target_mask(tmask(lambda p, c, q: q & c)), "padding at the start", "queries (rows)",
               "goes on the keys")
