"""The defects a review of chapters 11 and 11c found in their checkers (notes/review_ch11_11c.md 3, 4, 7 and 14), and
a later verification (notes/verify2_b.md 1 and 2): a wrong answer that passed and broke the next lesson, and hints
that gave wrong advice or named a mistake the learner had not made. Each test runs the wrong answer, written as a
learner writes it, and checks the hint that names it."""
import inspect
import math

import pytest
from test_grading import fails_with

from transformer_nb import decoding
from transformer_nb.book.graders_decoding import (
    grade_beam_search,
    grade_filter_logits,
    grade_gpt,
    grade_greedy_search,
)
from transformer_nb.gpt import GPT
from transformer_nb.layers import Decoder


def book_with(fn, old:str, new:str):
    "The book's decoding function `fn` with one line changed, as a learner's slip"
    src = inspect.getsource(fn).replace("@torch.no_grad()\n", "")
    assert old in src, old
    ns = dict(vars(decoding)); exec(src.replace(old, new), ns)
    return ns[fn.__name__]


REORDER = "cache.reorder(torch.tensor(rows, device=src.device))"


def test_beam_search_with_a_wrong_cache_reorder_fails_and_is_named():
    """Sorted rows give hypotheses another's keys and values: it passed (✓), and the next lesson's check against
    sequence_logprob failed with a bare assertion. Every row from row 0: 'sort them by score', which they were"""
    for wrong in ("cache.reorder(torch.tensor(sorted(rows), device=src.device))",
                  "cache.reorder(torch.zeros(len(rows), dtype=torch.long))"):
        v = grade_beam_search(book_with(decoding.beam_search, REORDER, wrong))
        fails_with(v, "sequence_logprob", "reorder the cache by the parent row", "not sorted")
        assert "sort them by score" not in v.message


# (the book's line, the learner's slip, words the hint must hold, words it must not): each was passed (✓) or told of
# a mistake it had not made
BEAM_SLIPS = {
    # cut-off hypotheses kept without their penalty: told 'you return the first beam_size hypotheses that ended',
    # a coincidence in one case
    "cut off without penalty": (
        "finished += [Hypothesis(b, lp, lp / length_penalty(step, alpha), False)",
        "finished += [Hypothesis(b, lp, lp, False)",
        ["cut off at max_len keep their log-probability as their score", "length_penalty(max_len, alpha)"],
        "first beam_size hypotheses that ended"),
    # too few candidates (k, not 2k): sorted hypotheses, right scores, another search; told to sort them
    "k candidates, not 2k": (
        "cand.topk(min(2 * beam_size, cand.numel()))", "cand.topk(min(beam_size, cand.numel()))",
        ["your hypotheses differ from the chapter's", "2 * beam_size best candidates"], "sort them"),
    # never stopping at k: up to 2k live, other hypotheses in 20 of 120 tiny cases (notes/verify2_b.md 1); passed
    "2k kept alive": (
        "if len(new_beams) == beam_size: break", "pass",
        ["up to 2 * beam_size hypotheses stay live", "once the new beam holds beam_size"], None),
    # the best finished score against the bound, not the k-th: told it compared with the live scores now and
    # should divide by length_penalty(max_len), which it did (notes/verify2_b.md 2)
    "best finished, not k-th": (
        "if sorted(h.score for h in finished)[-beam_size] >= reach: break",
        "if max(h.score for h in finished) >= reach: break",
        ["you stop when the best finished score reaches", "the k-th best finished score"],
        "live hypotheses' scores now"),
}


@pytest.mark.parametrize("slip", BEAM_SLIPS)
def test_beam_search_slip_fails_and_is_named(slip):
    old, new, words, absent = BEAM_SLIPS[slip]
    v = grade_beam_search(book_with(decoding.beam_search, old, new))
    fails_with(v, *words)
    if absent: assert absent not in v.message, v.message


def test_filter_without_a_guard_for_top_k_above_the_vocabulary_fails_and_says_why():
    "It passed, and the chapter's next lesson, filter_logits(many, top_k=500), raised torch's 'selected index k'"
    def no_guard(logits, temperature=1.0, top_k=None, top_p=None):
        x = logits.float()
        x = (x - x.amax(-1, keepdim=True)) / temperature
        if top_k is not None:
            x = x.masked_fill(x < x.topk(top_k, dim=-1).values[..., -1:], -math.inf)
        if top_p is not None and top_p < 1:
            p = x.softmax(-1)
            sp = p.sort(-1, descending=True).values
            least = sp.masked_fill(~(sp.cumsum(-1) - sp < top_p), math.inf).amin(-1, keepdim=True)
            x = x.masked_fill(p < least, -math.inf)
        return x
    fails_with(grade_filter_logits(no_guard), "top_k=6 is more than the 4 tokens", "leaves out nothing")


def test_gpt_without_its_final_norm_is_not_told_to_untie_its_embeddings():
    "A GPT is always tied; the hint named share_embeddings=True, an argument GPT does not have"
    def without_final_norm(**how):
        class G(GPT):
            def __init__(self, vocab_size, d_model=128, num_heads=4, d_ff=512, num_layers=2, max_len=128,
                         dropout=0.0, activation="gelu", positions="sinusoidal"):
                super().__init__(vocab_size, d_model, num_heads, d_ff, num_layers, max_len, dropout, activation,
                                 positions)
                self.stack = Decoder(d_model, num_heads, d_ff, num_layers, dropout, activation=activation,
                                     cross_attention=False, **how)
        return G
    for how in (dict(norm_first=False), dict(norm_first=True, final_norm=False)):
        v = grade_gpt(without_final_norm(**how))
        fails_with(v, "no final LayerNorm", "stack.norm.weight")
        assert "share_embeddings" not in v.message


def test_greedy_with_a_cache_built_without_the_source_mask_is_named():
    "KVCache(model, memory): the encoder got the mask, the cached decoder's cross-attention not; a generic hint"
    v = grade_greedy_search(book_with(decoding.greedy_search, "KVCache(model, memory, src_mask, capacity=max_len)",
                                      "KVCache(model, memory, capacity=max_len)"))
    fails_with(v, "the encoder gets the source padding mask, the decoder does not",
               "KVCache(model, memory, src_mask)")
