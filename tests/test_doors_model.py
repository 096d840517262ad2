"""Bad input at the doors of the model's parts (the audit of the public API with bad input, its items 3, 4, 7, 8, 13,
16, 17, 18 and 19): each case was accepted silently, answered wrongly, or failed inside torch or Python with a message
that named no argument of the caller; each is now a ValueError or TypeError naming the argument."""
import datetime
import math
import time

import pytest
import torch
from torch import nn

from transformer_nb.attention import (
    fused_attention,
    is_causal,
    scaled_dot_product_attention,
    softmax_saturation,
)
from transformer_nb.checkpoints import CheckpointAverage
from transformer_nb.core import (
    ProgressBar,
    compare_modules,
    drop_mask,
    saved_for_backward,
)
from transformer_nb.data import Vocab, batch_orders, date_pairs, make_task
from transformer_nb.decoding import (
    KVCache,
    decode_step,
    length_penalty,
    sequence_logprob,
)
from transformer_nb.distributed import init_processes, spawn
from transformer_nb.embeddings import NoPositions, SinusoidalPositions, rotary
from transformer_nb.ffn import PositionwiseFeedForward, SwiGLU
from transformer_nb.gpt import GPT
from transformer_nb.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    LayerCache,
    layer_from_torch,
    layer_to_torch,
    torch_state,
)
from transformer_nb.masking import causal_mask
from transformer_nb.multihead import (
    MultiHeadAttention,
    from_torch_state,
    load_weights,
    to_torch_state,
)
from transformer_nb.norms import LayerNorm, SublayerConnection
from transformer_nb.plotting import smooth
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


# ---- item 4: fused_attention ------------------------------------------------------------------------------------

torch.manual_seed(0)
Q, K, V = torch.randn(2, 4, 3, 6), torch.randn(2, 4, 5, 6), torch.randn(2, 4, 5, 6)
KEEP = torch.tensor([True, True, True, True, False]).expand(2, 1, 1, 5)
FUSED_SLIPS = [
    # a 0/1 float mask was added to the scores: the padded key got attended
    (lambda: fused_attention(Q, K, V, KEEP.float()), TypeError, "mask must have dtype torch.bool"),
    (lambda: fused_attention(Q, K, V, KEEP.long()), TypeError, "mask must have dtype torch.bool"),
    (lambda: fused_attention(Q, K, V, torch.ones(3, 5, 5, dtype=torch.bool)), ValueError, "does not broadcast"),
    (lambda: fused_attention(Q, K, V, torch.ones(5, dtype=torch.bool)), ValueError, r"mask must have shape \(\.\.\., T"),
    (lambda: fused_attention(Q, K, V, dropout_p=-0.5), ValueError, r"dropout_p must be in \[0, 1\)"),
    (lambda: fused_attention(Q.double(), K, V), TypeError, "share one dtype"),
    (lambda: fused_attention(Q, K[..., :4], V), ValueError, "same last dimension d_k"),
    (lambda: fused_attention(Q[..., :0, :], K, V), ValueError, "q must hold at least one position"),
    (lambda: fused_attention(Q, K[..., :0, :], V[..., :0, :]), ValueError, "k must hold at least one position"),
    (lambda: fused_attention(Q, K[:1, :3], V[:1, :3], enable_gqa=True), ValueError, "G heads dividing the H = 4"),
    (lambda: fused_attention(Q, K, V, enable_gqa="yes"), TypeError, "enable_gqa must be a bool"),
    (lambda: fused_attention(Q.long(), K, V), TypeError, "q must have a floating dtype"),
    (lambda: fused_attention(Q, K[:1].expand(3, 4, 5, 6), V), ValueError, "leading dimensions"),
]


@pytest.mark.parametrize("call,error,words", FUSED_SLIPS)
def test_fused_attention_checks_what_a_caller_passes(call, error, words):
    with pytest.raises(error, match=words): call()


def test_fused_attention_still_agrees_where_it_did():
    "Grouped-query heads and a broadcast mask pass the door and give chapter 2's numbers"
    want = scaled_dot_product_attention(Q, K, V, KEEP)[0]
    torch.testing.assert_close(fused_attention(Q, K, V, KEEP), want, atol=1e-5, rtol=0)
    k2, v2 = K[:, :2], V[:, :2]
    want = scaled_dot_product_attention(Q, k2.repeat_interleave(2, 1), v2.repeat_interleave(2, 1), KEEP)[0]
    torch.testing.assert_close(fused_attention(Q, k2, v2, KEEP, enable_gqa=True), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.long, torch.float32, torch.uint8])
def test_is_causal_only_for_a_boolean_mask(dtype):
    "torch.equal ignores the dtype: a float or long lower triangle was called causal"
    assert is_causal(torch.ones(3, 3, dtype=torch.bool).tril(), 3, 3)
    assert not is_causal(torch.ones(3, 3, dtype=dtype).tril(), 3, 3)


# ---- item 7: decode_step and sequence_logprob -------------------------------------------------------------------

def _step(token, cache=None, steps=0):
    m = small(layers=1)
    memory = m.encode(torch.tensor([[4, 5, 6], [4, 5, 7]]))
    cache = KVCache(m, memory) if cache is None else cache
    for _ in range(steps): decode_step(m, cache, torch.tensor([1, 1]))
    return decode_step(m, cache, token)


STEP_SLIPS = [
    (lambda: _step(torch.tensor([[1], [1]])), ValueError, r"token must have 1 dimensions, got shape \(2, 1\)"),
    (lambda: _step(torch.tensor(1)), ValueError, "token must have 1 dimensions"),
    (lambda: _step(torch.tensor([1, 1, 1])), ValueError, "token must hold one id per row of the cache, 2, got 3"),
    (lambda: _step(torch.tensor([1, 12])), ValueError, r"token must lie in \[0, vocab_size=12\), got 12"),
    (lambda: _step(torch.tensor([1.0, 1.0])), TypeError, "token must hold integer token ids"),
    (lambda: _step([1, 1]), TypeError, "token must be a torch.Tensor"),
    (lambda: _step(torch.tensor([1, 1]), cache=[LayerCache()]), TypeError, "cache must be a KVCache"),
    (lambda: _step(torch.tensor([1, 1]), cache=False), TypeError, "cache must be a KVCache"),
    (lambda: _step(torch.tensor([1, 1]), steps=16), ValueError, r"position 16, past the model's position table"),
    (lambda: KVCache(small(), small().encode(torch.tensor([[4, 5]])).tolist()), TypeError, "memory must be a torch"),
    (lambda: KVCache(nn.Linear(2, 2), torch.zeros(1, 2, D)), TypeError, "model must be a Transformer"),
    (lambda: KVCache(small(), torch.zeros(1, 2, 4)), ValueError, "memory must have last dimension d_model=8"),
    (lambda: KVCache(small(), torch.zeros(1, 2, D).double()), TypeError, "memory has dtype torch.float64"),
]


@pytest.mark.parametrize("call,error,words", STEP_SLIPS)
def test_decode_step_names_its_token_and_cache(call, error, words):
    with pytest.raises(error, match=words): call()


def test_decode_step_called_by_a_user_gives_the_same_logits():
    m = small(layers=1)
    src, tgt = torch.tensor([[4, 5, 6]]), torch.tensor([[1, 7, 8]])
    memory = m.encode(src)
    cache = KVCache(m, memory)
    steps = torch.stack([decode_step(m, cache, tgt[:, t]) for t in range(3)], 1)
    with torch.no_grad(): full = m.decode(tgt, memory, causal_mask(3))
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=0)


LOGPROB_SLIPS = [
    # -1 was read as the last token of the vocabulary: a silently wrong log-probability
    (dict(tokens=[-1], finished=False), ValueError, r"tokens\[0\] must be >= 0, got -1"),
    (dict(tokens=[12], finished=False), ValueError, r"tokens\[0\] must be a token id below .* 12, got 12"),
    (dict(tokens=[4, 12, 5]), ValueError, r"tokens\[1\] must be a token id below"),
    (dict(tokens=[4, 1.5]), TypeError, r"tokens\[1\] must be an int"),
    (dict(tokens="45"), TypeError, "tokens must be a list of token ids"),
    (dict(tokens=None), TypeError, "tokens must be a list of token ids"),
    (dict(tokens=torch.ones(2, 2, dtype=torch.long)), ValueError, "tokens must have 1 dimensions"),
    (dict(tokens=[4] * 16), ValueError, "tokens: 16 tokens and </s> need 17 positions, but the model's position"),
    (dict(tokens=[4], finished="no"), TypeError, "finished must be a bool"),
]


@pytest.mark.parametrize("kw,error,words", LOGPROB_SLIPS)
def test_sequence_logprob_names_its_tokens(kw, error, words):
    with pytest.raises(error, match=words): sequence_logprob(small(), torch.tensor([4, 5, 6]), **kw)


def test_sequence_logprob_takes_a_list_or_a_tensor():
    m, src = small(), torch.tensor([4, 5, 6])
    a = sequence_logprob(m, src, [4, 5])
    assert a == sequence_logprob(m, src, torch.tensor([4, 5])) and math.isfinite(a)
    assert sequence_logprob(m, src, [4] * 15) < 0              # 15 tokens and </s>: the table's 16


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


@pytest.mark.parametrize("module", [PositionwiseFeedForward(D, 16), LayerNorm(D), LayerNorm(D, fused=False),
                                    MultiHeadAttention(D, 2)], ids=["ffn", "layer_norm", "layer_norm_unfused", "mha"])
def test_autocast_passes_the_dtype_check(module):
    "Mixed precision: under torch.autocast a bfloat16 activation meets float32 weights, as torch.nn's modules allow"
    x = torch.randn(2, 3, D, dtype=torch.bfloat16)
    args = (x, x, x) if isinstance(module, MultiHeadAttention) else (x,)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(*args)
    assert (out[0] if isinstance(out, tuple) else out).isfinite().all()
    with pytest.raises(TypeError, match="has dtype torch.bfloat16, but the weights have torch.float32"):
        module(*args)                                                      # outside autocast: refused
    # autocast leaves float64 as it is: a float64 input is refused there too, named
    x64 = x.double()
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(
            TypeError, match="has dtype torch.float64, but the weights have torch.float32"):
        module(*((x64, x64, x64) if isinstance(module, MultiHeadAttention) else (x64,)))


# ---- item 13: small public functions ----------------------------------------------------------------------------

SMALL_SLIPS = [
    (lambda: softmax_saturation(0, n_queries=8), ValueError, "d_k must be >= 1, got 0"),       # was (nan, nan)
    (lambda: softmax_saturation(4, n_queries=0), ValueError, "n_queries must be >= 1"),        # was nan
    (lambda: softmax_saturation(4, n_keys=0), ValueError, "n_keys must be >= 1"),
    (lambda: softmax_saturation(16.0), TypeError, "d_k must be an int"),
    (lambda: softmax_saturation(4, scale="no"), TypeError, "scale must be a bool"),
    (lambda: rotary(torch.randn(1, 3, 5)), ValueError, r"d_k even .* got \(1, 3, 5\)"),
    (lambda: rotary(torch.arange(8).view(1, 2, 4)), TypeError, "x must have a floating dtype"),  # was int64 garbage
    (lambda: rotary(torch.randn(4)), ValueError, r"x must have shape \(\.\.\., T, d_k\)"),
    (lambda: rotary(torch.randn(2, 4), base=0.0), ValueError, "base must be > 0"),                # was NaN
    (lambda: rotary(torch.randn(2, 4), base=-1.0), ValueError, "base must be > 0"),
    (lambda: rotary(torch.randn(2, 4), offset=-2), ValueError, "offset must be >= 0"),
    (lambda: SwiGLU()(torch.randn(2, 3)), ValueError, r"even last dimension.*\(2, 3\)"),       # was shape (2, 2)
    (lambda: SwiGLU()(torch.randn(2, 5)), ValueError, "even last dimension"),
    (lambda: length_penalty(-10), ValueError, "length must be >= 0"),                             # was complex
    (lambda: length_penalty(3, -1.0), ValueError, "alpha must be >= 0"),
    (lambda: length_penalty(3, float("nan")), ValueError, "alpha must be >= 0"),
    (lambda: drop_mask((4,), 1.5), ValueError, r"p must be in \[0, 1\]"),                         # garbage masks
    (lambda: drop_mask((4,), -0.5), ValueError, r"p must be in \[0, 1\]"),
    (lambda: drop_mask((4,), float("nan")), ValueError, r"p must be in \[0, 1\]"),
    (lambda: NoPositions(0, 8), ValueError, "d_model must be >= 1"),
]


@pytest.mark.parametrize("call,error,words", SMALL_SLIPS)
def test_small_public_functions_check_their_arguments(call, error, words):
    with pytest.raises(error, match=words): call()


def test_drop_mask_refuses_a_string_before_building_anything():
    "p='0.5' built '0.5' * 2**32, a 12 GiB string, before its TypeError"
    t0 = time.perf_counter()
    with pytest.raises(TypeError, match="p must be a number"): drop_mask((4,), "0.5")
    assert time.perf_counter() - t0 < 1.0


def test_rotary_inside_attention_is_unchanged():
    "The checks stand at rotary's door only: attention with rope still matches itself step by step"
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, rope=True).eval()
    x = torch.randn(1, 4, D)
    with torch.no_grad():
        full = mha(x, x, x, mask=causal_mask(4))[0]
        cache = LayerCache()
        steps = [mha(xt, xt, xt, cache=cache)[0] for xt in x.split(1, dim=1)]   # self-attention: one tensor
    steps = torch.cat(steps, 1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=0)


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


# ---- item 17: leading dimensions and devices --------------------------------------------------------------------

DEVICE_SLIPS = [
    (lambda: scaled_dot_product_attention(torch.randn(2, 3, 4), torch.randn(3, 5, 4), torch.randn(3, 5, 4)),
     ValueError, r"leading dimensions \(batch, heads\) that broadcast, got shapes \(2, 3, 4\), \(3, 5, 4\)"),
    (lambda: scaled_dot_product_attention(torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(3, 5, 4)),
     ValueError, "leading dimensions"),
    (lambda: scaled_dot_product_attention(torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4),
                                          torch.ones(3, 5, dtype=torch.bool, device="meta")),
     ValueError, "mask is on meta, but the attention scores are on cpu"),
    (lambda: SinusoidalPositions(D, 16)(torch.randn(1, 3, D, device="meta")), ValueError, "x is on meta, but the"),
]


@pytest.mark.parametrize("call,error,words", DEVICE_SLIPS)
def test_shapes_and_devices_that_failed_inside_torch_are_named(call, error, words):
    with pytest.raises(error, match=words): call()


def test_broadcast_leading_dimensions_still_pass():
    "One set of keys for every batch row, (1, S, d), broadcasts as before"
    q, k, v = torch.randn(2, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 4)
    assert scaled_dot_product_attention(q, k, v)[0].shape == (2, 3, 4)


# ---- item 18: messages that named another argument --------------------------------------------------------------

def test_messages_name_the_callers_argument():
    with pytest.raises(ValueError, match=r"name must be one of \('copy', 'reverse', 'dates'\), got 'Copy'"):
        make_task("Copy")
    with pytest.raises(ValueError, match=r"formats\[1\] is an unknown date format 'ISO'"):
        date_pairs(2, 0, formats=["D Mon YYYY", "ISO"])


# ---- item 19: Python errors from wrong kinds of object ----------------------------------------------------------

def _other_average():
    avg = CheckpointAverage()
    avg.add(nn.Linear(2, 2))
    return avg.apply(nn.Linear(3, 2))


KIND_SLIPS = [
    (lambda: ProgressBar(0), ValueError, "total must be >= 1"),
    (lambda: compare_modules(3, nn.Identity(), torch.ones(2)), TypeError, "ours must be callable, got int"),
    (lambda: saved_for_backward(3), TypeError, "step must be callable, got int"),
    (lambda: load_weights(3, {}), TypeError, "module must be an nn.Module, got int"),
    (lambda: load_weights(nn.Linear(2, 2), [1]), TypeError, "state must be a state dict"),
    (lambda: to_torch_state([1]), TypeError, "state must be a state dict"),
    (lambda: from_torch_state([1]), TypeError, "state must be a state dict"),
    (lambda: layer_to_torch(EncoderLayer(D, H, 16), None), TypeError, "theirs must be an nn.Module, got NoneType"),
    (lambda: layer_from_torch(3, EncoderLayer(D, H, 16)), TypeError, "theirs must be an nn.Module, got int"),
    (lambda: torch_state(3), TypeError, "stack must be a Decoder, got int"),
    (lambda: CheckpointAverage().add(3), TypeError, "model must be an nn.Module, got int"),
    (lambda: CheckpointAverage().load_state_dict({}), ValueError, "state must be what state_dict"),
    (_other_average, ValueError, r"model is not the one whose checkpoints were added: they hold weight \(2, 2\)"),
    (lambda: Vocab("ab").encode(None), TypeError, "text must be a string or a list of tokens, got NoneType"),
    (lambda: batch_orders("4", 2), TypeError, "n must be an int"),
    (lambda: date_pairs(2, 0, first=datetime.datetime(2000, 1, 1)), TypeError, "first must be a datetime.date"),
    (lambda: smooth("abc"), TypeError, "xs must be a sequence of numbers, got 'abc'"),
    (lambda: smooth([[1.0, 2.0], [3.0, 4.0]]), ValueError, r"xs must be one curve, 1-D, got shape \(2, 2\)"),
    (lambda: init_processes(rank=-1, world_size=1), ValueError, "rank must be >= 0, got -1"),
    (lambda: init_processes(rank=2, world_size=2), ValueError, "rank must be below world_size 2, got 2"),
    (lambda: spawn(3, 1), TypeError, "fn must be callable, got int"),        # before any process starts
]


@pytest.mark.parametrize("call,error,words", KIND_SLIPS)
def test_wrong_kinds_of_object_are_named(call, error, words):
    with pytest.raises(error, match=words): call()
