"""The reading toolbox (chapter 9b): its measures build their batches on the model's device, leave the model in the
mode it was in even when they fail, and the diagonal baseline of `alignment_shares` can be right on a crossing piece
but never on both pieces of a crossing pair."""
import itertools
import random

import pytest
import torch

from transformer_nb.data import make_task
from transformer_nb.reading import (
    alignment_shares,
    attention_maps,
    cross_attention,
    crossing,
    diagonal,
    head_sharpness,
    teacher_forced_accuracy,
)
from transformer_nb.transformer import Transformer

TASK = make_task("copy", n_train=10, n_valid=16)


def small(**kw) -> Transformer:
    torch.manual_seed(0)
    args = dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, d_ff=32, dropout=0.1)
    return Transformer(len(TASK.vocab), len(TASK.vocab), **{**args, **kw})


def test_maps_are_read_on_the_models_device():
    """A model on another device (meta stands in for a GPU here) gets its batch there: the maps come back on that
    device. The batch used to be built on the CPU, and the caller, who passed strings, was told to move `src`."""
    model = small().to("meta")
    assert cross_attention(model, TASK.vocab, TASK.valid[:4]).device.type == "meta"
    assert {v.device.type for v in head_sharpness(model, TASK.vocab, TASK.valid).values()} == {"meta"}
    # these two read numbers back, which a meta tensor has none of: they get past the forward pass
    for read in (lambda: teacher_forced_accuracy(model, TASK.vocab, TASK.valid),
                 lambda: attention_maps(model, TASK.vocab, "12", "12")):
        with pytest.raises((RuntimeError, NotImplementedError), match="meta"): read()


@pytest.mark.parametrize("measure", ["accuracy", "sharpness", "maps", "cross"])
def test_the_model_keeps_its_mode_after_an_error(measure):
    "A failed measure (a bad pair, or a source longer than max_len) leaves a training model in training mode"
    model = small(max_len=8).train()
    bad = [("12", "12"), ("", "1")]                      # an empty source: make_batch's TypeError
    long = [("12", "12"), ("1234567890", "12")]          # the forward pass's ValueError
    call = {"accuracy": lambda p: teacher_forced_accuracy(model, TASK.vocab, p, batch_size=1),
            "sharpness": lambda p: head_sharpness(model, TASK.vocab, p),
            "maps": lambda p: attention_maps(model, TASK.vocab, *p[-1]),
            "cross": lambda p: cross_attention(model, TASK.vocab, p)}[measure]
    for pairs, error in ((bad, TypeError), (long, ValueError)):
        with pytest.raises(error): call(pairs)
        assert model.training, (measure, pairs)
    call([("12", "12")])
    assert model.training


def test_the_diagonal_is_right_on_a_crossing_piece_but_never_on_both_of_a_crossing_pair():
    "A reversal of three: every piece crosses, and the diagonal lands on the middle one"
    rev = [{2}, {1}, {0}]
    assert crossing(rev) == [True, True, True] and diagonal(1, 3, 3) == 1
    shares = alignment_shares(torch.eye(3)[[2, 1, 0]][None, None, None], [rev], [3])
    assert shares.diagonal_crossing == pytest.approx(1 / 3)
    # random alignments: the diagonal only moves forward, so of two pieces that cross it misses one
    rng = random.Random(0)
    for _ in range(300):
        S, T = rng.randint(2, 7), rng.randint(2, 7)
        gold = [set(rng.sample(range(S), rng.randint(0, 2))) for _ in range(T)]
        on = [diagonal(i, T, S) in g for i, g in enumerate(gold)]
        for i, k in itertools.combinations(range(T), 2):
            if gold[i] and gold[k] and max(gold[k]) < min(gold[i]):      # i before k, k's words before i's
                assert not (on[i] and on[k]), (gold, i, k)
