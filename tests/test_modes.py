"""The functions that measure or decode in eval mode hand the model back with every part in the mode it had, also
when the call fails (before: `evaluating` set every part to the root's old mode, so a part frozen in eval mode came
back in train mode; generate, greedy_search, beam_search, sequence_logprob and head_scores restored by hand, without
`finally`, so an error or a Ctrl-C left the model in eval mode)"""
import pytest
import torch

from transformer_nb.core import evaluating
from transformer_nb.decoding import beam_search, greedy_search, sequence_logprob
from transformer_nb.gpt import GPT, bits_per_char, generate
from transformer_nb.induction import head_scores, repeat_batch
from transformer_nb.inside import run_with_cache
from transformer_nb.transformer import Transformer


def gpt():
    torch.manual_seed(0)
    return GPT(17, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=16, dropout=0.1)


def transformer():
    torch.manual_seed(0)
    return Transformer(11, 13, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                       dropout=0.1, max_len=32)


def modes(model): return {name: m.training for name, m in model.named_modules()}


def mixed(model):
    "train mode, with one part frozen in eval mode"
    model.train()
    next(m for name, m in model.named_modules() if name.endswith("dropout")).eval()
    return modes(model)


def test_evaluating_hands_each_part_back_in_its_own_mode():
    g = gpt()
    before = mixed(g)
    assert not all(before.values()) and any(before.values())
    with evaluating(g): assert not any(modes(g).values())
    assert modes(g) == before
    with pytest.raises(KeyError), evaluating(g): raise KeyError("inside the block")
    assert modes(g) == before
    bits_per_char(g, torch.randint(0, 17, (40,)), context=16)
    assert modes(g) == before


CALLS = {
    "generate": (gpt, lambda g: generate(g, torch.randint(0, 17, (2, 4)), 3, greedy=True)),
    "head_scores": (gpt, lambda g: head_scores(g, repeat_batch(4, vocab_size=17, context=16))),
    "run_with_cache": (gpt, lambda g: run_with_cache(g, torch.randint(0, 17, (2, 8)))),
    "greedy_search": (transformer, lambda m: greedy_search(m, torch.tensor([[4, 5, 6]]), max_len=4)),
    "beam_search": (transformer, lambda m: beam_search(m, torch.tensor([4, 5, 6]), beam_size=2, max_len=4)),
    "sequence_logprob": (transformer, lambda m: sequence_logprob(m, torch.tensor([4, 5, 6]), [3, 4])),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_a_call_hands_the_model_back_in_its_modes(name):
    make, call = CALLS[name]
    model = make()
    before = mixed(model)
    call(model)
    assert modes(model) == before                          # after a call that succeeded
    def fail(*_): raise RuntimeError("stopped in the forward pass")
    hook = model.output.register_forward_hook(fail)
    with pytest.raises(RuntimeError, match="stopped"): call(model)
    hook.remove()
    assert modes(model) == before                          # and after one that failed
