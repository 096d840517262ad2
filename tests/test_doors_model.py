"""Bad input at the doors of the model's parts (the audit of the public API with bad input, its items 3, 8 and 16): each case was accepted silently, answered wrongly, or failed inside torch or Python with a message
that named no argument of the caller; each is now a ValueError or TypeError naming the argument."""

import pytest
import torch
from torch import nn

from transformer_nb.ffn import PositionwiseFeedForward
from transformer_nb.gpt import GPT
from transformer_nb.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    LayerCache,
)
from transformer_nb.masking import causal_mask
from transformer_nb.multihead import (
    MultiHeadAttention,
)
from transformer_nb.norms import LayerNorm, SublayerConnection
from transformer_nb.transformer import Transformer

D, H = 8, 2


def small(layers=2, **kw):
    torch.manual_seed(0)
    return Transformer(12, 12, d_model=D, num_heads=H, num_encoder_layers=1, num_decoder_layers=layers, d_ff=16,
                       dropout=0.0, max_len=16, **kw).eval()


def gpt(layers=2):
    torch.manual_seed(0)
    return GPT(12, d_model=D, num_heads=H, d_ff=16, num_layers=layers, max_len=16).eval()


# ---- item 3: the decoders' cache --------------------------------------------------------------------------------

def test_two_caches_still_give_the_whole_target_at_once():
    "The check refuses the slips below and nothing else: one LayerCache per layer decodes as before"
    m = small()
    memory, tgt = m.encode(torch.tensor([[4, 5, 6]])), torch.tensor([[1, 7, 8]])
    with torch.no_grad():
        full = m.decode(tgt, memory, tgt_mask=causal_mask(3))
        cache = [LayerCache() for _ in range(2)]
        steps = torch.cat([m.decode(tgt[:, i:i + 1], memory, cache=cache) for i in range(3)], 1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=0)


def _decode(cache, B=1):
    m = small()
    memory = m.encode(torch.tensor([[4, 5, 6]] * B))
    with torch.no_grad(): return m.decode(torch.tensor([[1]] * B), memory, cache=cache)


def _gpt(cache, B=1):
    with torch.no_grad(): return gpt()(torch.tensor([[1]] * B), cache=cache)


def _stack(cache, B=1):
    torch.manual_seed(0)
    dec = Decoder(D, H, 16, num_layers=2, dropout=0.0).eval()
    with torch.no_grad(): return dec(torch.randn(B, 1, D), torch.randn(B, 3, D), cache=cache)


def _layer(cache, B=1):
    torch.manual_seed(0)
    layer = DecoderLayer(D, H, 16, dropout=0.0).eval()
    with torch.no_grad(): return layer(torch.randn(B, 1, D), torch.randn(B, 3, D), cache=cache)


def _mha(cache, B=1):
    torch.manual_seed(0)
    x = torch.randn(B, 1, D)
    with torch.no_grad(): return MultiHeadAttention(D, H)(x, x, x, cache=cache)


def _used(B):
    "A LayerCache that holds the keys of a batch of B"
    c = LayerCache()
    _mha(c, B)
    return c


def _used_stack(B):
    cache = [LayerCache(), LayerCache()]
    _stack(cache, B)
    return cache


one = LayerCache()
STACKS = [_decode, _gpt, _stack]
CACHE_SLIPS = [
    # [LayerCache()] * N: before, Transformer.decode gave silently wrong logits
    *[(door, [one, one], ValueError, "the same LayerCache more than once") for door in STACKS],
    *[(door, [], ValueError, "one LayerCache per layer, 2, got 0") for door in STACKS],
    *[(door, [LayerCache()], ValueError, "one LayerCache per layer, 2, got 1") for door in STACKS],
    # three caches for two layers were accepted
    *[(door, [LayerCache() for _ in range(3)], ValueError, "one LayerCache per layer, 2, got 3") for door in STACKS],
    *[(door, LayerCache(), TypeError, "cache must be a list of 2 LayerCache") for door in STACKS],
    *[(door, [None, None], TypeError, "cache[0] must be a key/value cache") for door in STACKS],
    (_layer, [], TypeError, "cache must be a key/value cache such as LayerCache()"),
    (_layer, None, None, None),
    (_mha, {}, TypeError, "cache must be a key/value cache such as LayerCache()"),
    (_mha, 3, TypeError, "cache must be a key/value cache"),
]


@pytest.mark.parametrize("door,cache,error,words", CACHE_SLIPS)
def test_a_cache_that_is_not_one_per_layer_is_refused(door, cache, error, words):
    if error is None: door(cache); return
    with pytest.raises(error, match=words.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        door(cache)


@pytest.mark.parametrize("door", [_decode, _gpt, _stack])
def test_a_stack_cache_of_another_batch_is_refused(door):
    "A cache filled with a batch of 2 and reused for a batch of 1 failed inside torch.cat"
    cache = _used_stack(2) if door is _stack else [LayerCache(), LayerCache()]
    if door is not _stack: door(cache, B=2)
    with pytest.raises(ValueError, match="cache\\[0\\] holds the keys of a batch of 2, but this call's batch is 1"):
        door(cache, B=1)


def test_a_layer_cache_of_another_batch_is_refused():
    for door in (_layer, _mha):
        cache = LayerCache()
        door(cache, B=2)
        with pytest.raises(ValueError, match="cache holds the keys of a batch of 2, but this call's batch is 1"):
            door(cache, B=1)


# ---- item 8: dtype checks in the FFN and the norms --------------------------------------------------------------

@pytest.mark.parametrize("module", [PositionwiseFeedForward(D, 16), LayerNorm(D), LayerNorm(D, fused=False),
                                    SublayerConnection(D)], ids=["ffn", "layer_norm", "layer_norm_unfused", "sublayer"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_a_dtype_other_than_the_weights_is_named(module, dtype):
    "torch said 'mat1 and mat2 must have the same dtype' or 'mixed dtype (CPU)', as attention did not"
    x = torch.randn(2, 3, D, dtype=dtype)
    args = (x, nn.Identity()) if isinstance(module, SublayerConnection) else (x,)
    with pytest.raises(TypeError, match=f"x has dtype {dtype}, but the weights have torch.float32: convert one"):
        module(*args)
    module.to(dtype)
    assert module(*args).dtype == dtype
    module.float()


# ---- item 16: need_weights --------------------------------------------------------------------------------------

def _doors():
    m = small(layers=1)
    src, tgt = torch.tensor([[4, 5]]), torch.tensor([[1, 7]])
    memory = m.encode(src)
    x = torch.randn(1, 2, D)
    return {
        "encode": lambda nw: m.encode(src, need_weights=nw),
        "decode": lambda nw: m.decode(tgt, memory, need_weights=nw),
        "Encoder": lambda nw: Encoder(D, H, 16, 1)(x, need_weights=nw),
        "Decoder": lambda nw: Decoder(D, H, 16, 1)(x, x, need_weights=nw),
        "EncoderLayer": lambda nw: EncoderLayer(D, H, 16)(x, need_weights=nw),
        "DecoderLayer": lambda nw: DecoderLayer(D, H, 16)(x, x, need_weights=nw),
        "MultiHeadAttention": lambda nw: MultiHeadAttention(D, H)(x, x, x, need_weights=nw),
        "GPT": lambda nw: gpt()(tgt, need_weights=nw),
    }


@pytest.mark.parametrize("door", list(_doors()))
@pytest.mark.parametrize("flag", ["no", 0, None])
def test_need_weights_must_be_a_bool_at_every_door(door, flag):
    "'no' (truthy) returned a tuple where the tensor was expected; 0 and None took the fast path"
    call = _doors()[door]
    with pytest.raises(TypeError, match="need_weights must be a bool"): call(flag)
    call(True); call(False)
