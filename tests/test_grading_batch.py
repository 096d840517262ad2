"Chapter 9's checker, grade_make_batch: the book's batch and other correct forms pass; each likely mistake gets its hint."
from collections import namedtuple

import pytest
import torch

from transformer_nb.book.graders_training import grade_make_batch
from transformer_nb.book.grading import Verdict
from transformer_nb.data import Batch, make_batch, pad_batch
from transformer_nb.masking import padding_mask, target_mask


def fails_with(verdict, *words):
    "The verdict failed, and its message contains every one of `words`"
    assert not verdict, f"passed: {verdict}"
    for w in words: assert w in verdict.message, f"{w!r} not in: {verdict.message}"
    assert "Traceback" not in verdict.message


def batch(shift="book", bos=True, eos=True, keep_eos=False, causal=True, invert=False,
          pad=None, src_special=False, device=True, flat_src_mask=False):
    "make_batch written the chapter's way, with the given deviations"
    def make(pairs, vocab, device_=None, **kw):
        dev = kw.get("device", device_)
        p = vocab.pad if pad is None else pad
        src = pad_batch([vocab.encode(s, bos=src_special, eos=src_special) for s, _ in pairs], p)
        tgt = pad_batch([vocab.encode(t, bos=bos, eos=eos) for _, t in pairs], p)
        tgt_in, tgt_out = (tgt, tgt) if shift == "none" else (tgt[:, :-1], tgt[:, 1:])
        if shift == "swap": tgt_in, tgt_out = tgt_out, tgt_in
        if not keep_eos: tgt_in = tgt_in.masked_fill(tgt_in == vocab.eos, p)
        if device: src, tgt_in, tgt_out = (t.to(dev) for t in (src, tgt_in, tgt_out))
        src_mask = (src != vocab.pad) if flat_src_mask else padding_mask(src, vocab.pad)
        tgt_mask = target_mask(tgt_in, vocab.pad) if causal else padding_mask(tgt_in, vocab.pad)
        if invert: src_mask, tgt_mask = ~src_mask, ~tgt_mask
        return Batch(src, tgt_in, tgt_out, src_mask, tgt_mask)
    return lambda pairs, vocab, device=None: make(pairs, vocab, device=device)


def separate(pairs, vocab, device=None):
    "A correct answer written otherwise: inputs and outputs built apart, its own namedtuple, masks by hand"
    B = namedtuple("B", "src tgt_in tgt_out src_mask tgt_mask")
    src = pad_batch([vocab.encode(s) for s, _ in pairs], vocab.pad).to(device)
    tgt_in = pad_batch([[vocab.bos] + vocab.encode(t) for _, t in pairs], vocab.pad).to(device)
    tgt_out = pad_batch([vocab.encode(t) + [vocab.eos] for _, t in pairs], vocab.pad).to(device)
    T = tgt_in.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    return B(src, tgt_in, tgt_out, (src != vocab.pad)[:, None, None, :],
             (tgt_in != vocab.pad)[:, None, None, :] & causal)


def test_the_book_passes():
    v = grade_make_batch(make_batch)
    assert v and isinstance(v, Verdict) and v.answer is make_batch, v


@pytest.mark.parametrize("answer", [batch(), separate], ids=["chapter's way", "built apart"])
def test_correct_forms_pass(answer):
    v = grade_make_batch(answer); assert v, v


@pytest.mark.parametrize("kw,words", [
    (dict(shift="none"), ["not shifted"]),
    (dict(shift="swap"), ["swapped"]),
    (dict(bos=False), ["lacks <s>"]),
    (dict(eos=False), ["lacks </s>"]),
    (dict(src_special=True), ["src carries <s> and </s>"]),
    (dict(pad=2), ["padded with </s>"]),
    (dict(pad=3), ["padded with id 3", "vocab.pad (0)"]),
    (dict(causal=False), ["lacks the causal part"]),
    (dict(invert=True), ["src_mask is inverted", "tgt_mask is inverted"]),
    (dict(flat_src_mask=True), ["src_mask has shape (3, 5)", "(B, 1, 1, S)"]),
    (dict(device=False), ["device='meta'"]),
    # never scored, but chapter 9's lesson after the check reads tgt_in's ids (tests/test_grading_review.py)
    (dict(keep_eos=True), ["</s> stays in tgt_in", "where the chapter writes <pad>"]),
    (dict(bos=False, causal=False), ["(1) the target lacks <s>", "(2) tgt_mask lacks the causal part"]),
    (dict(eos=False, src_special=True), ["(1) the target lacks </s>", "(2) src carries"]),
], ids=lambda x: str(x) if isinstance(x, dict) else "")
def test_each_mistake_is_named(kw, words):
    fails_with(grade_make_batch(batch(**kw)), *words)


def test_a_wrong_return_type_is_named():
    fails_with(grade_make_batch(lambda pairs, vocab, device=None: (1, 2)),
               "without src, tgt_in, tgt_out, src_mask, tgt_mask")
