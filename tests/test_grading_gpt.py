"Chapter 11c's checker, grade_gpt: the book's GPT and another correct form pass; each likely mistake gets its hint."
import pytest
import torch
from torch import nn

from transformer_nb.book.graders_decoding import grade_gpt
from transformer_nb.gpt import GPT
from transformer_nb.masking import causal_mask


def fails_with(verdict, *words):
    "The verdict failed, and its message contains every one of `words`"
    assert not verdict, f"passed: {verdict}"
    for w in words: assert w in verdict.message, f"{w!r} not in: {verdict.message}"
    assert "Traceback" not in verdict.message


def gpt(untied=False, no_mask=False, softmax=False, no_offset=False, no_cache=False,
        new_keys_only=False, drop_activation=False, drop_positions=False, weights_off=False):
    "The book's GPT with the given mistakes"
    class G(GPT):
        def __init__(self, vocab_size, *args, **kw):
            if drop_activation: kw.pop("activation", None)
            if drop_positions: kw.pop("positions", None)
            super().__init__(vocab_size, *args, **kw)
            if untied:
                self.output = nn.Linear(self.d_model, vocab_size, bias=False)

        def forward(self, ids, need_weights=False, cache=None):
            T, past = ids.shape[1], 0 if cache is None else len(cache[0])
            x = self.embed(ids, offset=0 if no_offset else past)
            if no_mask: mask = None
            elif new_keys_only: mask = causal_mask(T)
            else: mask = None if T == 1 else causal_mask(past + T)[..., past:, :]
            out = self.stack(x, tgt_mask=mask, need_weights=need_weights and not weights_off,
                             cache=None if no_cache else cache)
            if not need_weights or weights_off:
                logits = self.output(out)
                return logits.softmax(-1) if softmax else logits
            x, attn, _ = out
            return self.output(x), attn
    return G


class Written(nn.Module):
    "A correct GPT written without subclassing the book's: the same parts, its own forward"
    def __init__(self, vocab_size, d_model=128, num_heads=4, d_ff=512, num_layers=2, max_len=128,
                 dropout=0.0, activation="gelu", positions="sinusoidal"):
        super().__init__()
        ref = GPT(vocab_size, d_model, num_heads, d_ff, num_layers, max_len, dropout, activation, positions)
        self.embed, self.stack, self.output = ref.embed, ref.stack, ref.output
        # what later cells of the chapter read (train_lm: max_len, save_lm: config)
        self.vocab_size, self.d_model, self.num_heads = vocab_size, d_model, num_heads
        self.max_len, self.config = max_len, ref.config

    def forward(self, ids, need_weights=False, cache=None):
        past = len(cache[0]) if cache else 0
        T = ids.shape[1]
        mask = torch.ones(past + T, past + T, dtype=torch.bool).tril()[past:][None, None]
        out = self.stack(self.embed(ids, offset=past), tgt_mask=mask, need_weights=need_weights,
                         cache=cache)
        if need_weights: return self.output(out[0]), out[1]
        return self.output(out)


def test_the_book_passes():
    v = grade_gpt(GPT); assert v and v.answer is GPT, v


def test_a_gpt_written_otherwise_passes():
    "Its own forward, a mask built by hand even for one new token"
    v = grade_gpt(Written); assert v, v


@pytest.mark.parametrize("kw,words", [
    (dict(untied=True), ["not tied to the token embedding"]),
    (dict(no_mask=True), ["no causal mask"]),
    (dict(softmax=True), ["softmax belongs to the loss"]),
    (dict(no_offset=True), ["positions restart at 0"]),
    (dict(no_cache=True), ["cache is not passed on"]),
    (dict(new_keys_only=True), ["causal_mask(past + T)[..., past:, :]"]),
    (dict(drop_activation=True), ["activation='relu' is not passed on"]),
    (dict(drop_positions=True), ["positions='learned' is not passed on"]),
    (dict(weights_off=True), ["need_weights=True", "2 things"]),
], ids=lambda x: ",".join(x) if isinstance(x, dict) else "")
def test_each_mistake_is_named(kw, words):
    fails_with(grade_gpt(gpt(**kw)), *words)
