"""Chapter 3: MultiHeadAttention against torch.nn.MultiheadAttention, mask conversion, weight copying, errors."""
import pytest
import torch
from torch import nn

from conftest import all_close, pad_mask
from transformer_nb.core import compare_modules
from transformer_nb.masking import causal_mask
from transformer_nb.multihead import (
    MHA_NAMES,
    MultiHeadAttention,
    from_torch_masks,
    from_torch_state,
    merge_heads,
    mha_from_torch,
    mha_to_torch,
    split_heads,
    to_torch_masks,
    to_torch_state,
)

B, T, S, D, H = 2, 5, 7, 24, 4  # distinct sizes, so that a swapped axis fails
TOL = 1e-5


def make_inputs(cross, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=g)
    if not cross: return x, x, x
    src = torch.randn(B, S, D, generator=g)
    return x, src, src


def make_mask(kind, cross):
    n = S if cross else T
    if kind is None: return None
    if kind == "padding": return pad_mask([n, 3], n)
    if kind == "causal": return causal_mask(T)
    if kind == "causal+padding": return causal_mask(T) & pad_mask([T, 3], T)
    if kind == "random-per-head":
        m = torch.rand(B, H, T, n, generator=torch.Generator().manual_seed(1)) > 0.4
        m[..., 0] = True  # every query keeps one key (torch gives NaN for a fully masked row, we give zeros)
        return m
    raise ValueError(kind)


def compare_with_torch(bias, cross, kind, seed=0):
    "compare_modules between ours and nn.MultiheadAttention with the same weights: outputs, weights, gradients"
    torch.manual_seed(seed)
    ours = MultiHeadAttention(D, H, bias=bias)
    theirs = mha_to_torch(ours, nn.MultiheadAttention(D, H, bias=bias, batch_first=True))
    mask = make_mask(kind, cross)
    attn_mask, kpm = to_torch_masks(mask, H)
    diffs = compare_modules(lambda q, k, v: ours(q, k, v, mask=mask),
                            lambda q, k, v: theirs(q, k, v, attn_mask=attn_mask, key_padding_mask=kpm,
                                                   need_weights=True, average_attn_weights=False),
                            *make_inputs(cross, seed), modules=(ours, theirs, to_torch_state), seed=seed + 1)
    return ours, theirs, mask, diffs


CASES = [(bias, cross, kind) for bias in (True, False) for cross in (False, True)
         for kind in (None, "padding", "random-per-head")] + \
        [(bias, False, kind) for bias in (True, False) for kind in ("causal", "causal+padding")]


@pytest.mark.parametrize("bias,cross,kind", CASES)
def test_matches_torch(bias, cross, kind):
    ours, theirs, mask, diffs = compare_with_torch(bias, cross, kind)
    # output 0: the attention output, output 1: the weights; then the three inputs, then torch's parameters
    assert len(diffs) == 2 + 3 + (4 if bias else 2), diffs
    assert all_close(diffs, TOL), diffs
    if not bias: assert ours.W_q.bias is None and theirs.in_proj_bias is None
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in ours.parameters())
    # masked keys got exactly zero weight
    n = S if cross else T
    q, k, v = make_inputs(cross)
    with torch.no_grad(): out, w = ours(q, k, v, mask=mask)
    assert out.shape == (B, T, D) and w.shape == (B, H, T, n)
    if kind is not None:
        assert (w[~mask.expand(B, H, T, n)] == 0).all()


def maxdiff(a, b): return (a - b).abs().max().item()


def test_comparison_can_fail():
    "the harness notices a tiny change on one side"
    torch.manual_seed(0)
    ours = MultiHeadAttention(D, H)
    theirs = mha_to_torch(ours, nn.MultiheadAttention(D, H, batch_first=True))
    with torch.no_grad(): theirs.in_proj_weight[2 * D, 0] += 1e-3
    q, k, v = make_inputs(cross=True)
    assert maxdiff(ours(q, k, v)[0], theirs(q, k, v)[0]) > TOL


def test_split_merge():
    x = torch.arange(1, 17).reshape(1, 4, 4)
    h = split_heads(x, 2)
    assert h.shape == (1, 2, 4, 2)
    assert torch.equal(h[0, 0], torch.tensor([[1, 2], [5, 6], [9, 10], [13, 14]]))
    assert torch.equal(h[0, 1], torch.tensor([[3, 4], [7, 8], [11, 12], [15, 16]]))
    assert not torch.equal(x.view(1, 2, 4, 2), h)  # the naive view mixes positions
    y = torch.randn(B, T, D)
    assert torch.equal(merge_heads(split_heads(y, H)), y)
    assert torch.equal(split_heads(y, H)[:, 1], y[..., D // H: 2 * D // H])


def test_attributes_and_dropout():
    m = MultiHeadAttention(D, H, dropout=0.25)
    assert (m.num_heads, m.d_k, m.dropout) == (H, D // H, 0.25)
    for name in ("W_q", "W_k", "W_v", "W_o"):
        lin = getattr(m, name)
        assert isinstance(lin, nn.Linear) and lin.weight.shape == (D, D) and lin.bias is not None
    q, k, v = make_inputs(cross=True)
    with torch.no_grad():
        m.eval(); out_e, w_e = m(q, k, v)
        m.eval(); out_e2, _ = m(q, k, v)
        m.train(); out_t, w_t = m(q, k, v)
    assert torch.equal(out_e, out_e2)           # no dropout in eval mode
    assert not torch.allclose(out_t, out_e)     # dropout in training mode
    assert torch.allclose(w_t, w_e)             # returned weights are pre-dropout


# ---- weight copying

def test_weight_copy_both_ways():
    torch.manual_seed(0)
    ours = MultiHeadAttention(D, H)
    theirs = mha_to_torch(ours, nn.MultiheadAttention(D, H, batch_first=True))
    assert torch.equal(theirs.in_proj_weight.detach(),
                       torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]).detach())
    assert torch.equal(theirs.in_proj_bias.detach(), torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]).detach())
    assert torch.equal(theirs.out_proj.weight.detach(), ours.W_o.weight.detach())
    assert torch.equal(theirs.out_proj.bias.detach(), ours.W_o.bias.detach())
    torch.manual_seed(1)
    src = nn.MultiheadAttention(D, H, batch_first=True)
    nn.init.normal_(src.in_proj_bias); nn.init.normal_(src.out_proj.bias)  # torch zeroes them; make them matter
    back = mha_from_torch(src, MultiHeadAttention(D, H))
    for lin, w, b in zip((back.W_q, back.W_k, back.W_v), src.in_proj_weight.chunk(3), src.in_proj_bias.chunk(3)):
        assert torch.equal(lin.weight.detach(), w.detach()) and torch.equal(lin.bias.detach(), b.detach())
    assert torch.equal(back.W_o.weight.detach(), src.out_proj.weight.detach())
    assert torch.equal(back.W_o.bias.detach(), src.out_proj.bias.detach())
    q, k, v = make_inputs(cross=True)
    src.eval(); back.eval()
    with torch.no_grad():
        assert maxdiff(back(q, k, v)[0], src(q, k, v)[0]) < TOL


def test_weight_copy_errors():
    "What the state dicts cannot say (heads) is checked apart; keys and shapes by load_state_dict"
    ours = MultiHeadAttention(D, H)
    with pytest.raises(ValueError, match="num_heads differs: ours 4, theirs 3"):
        mha_to_torch(ours, nn.MultiheadAttention(D, 3, batch_first=True))
    with pytest.raises(ValueError, match="(?s)ours does not match.*size mismatch for W_q.weight"):
        mha_from_torch(nn.MultiheadAttention(2 * D, H, batch_first=True), ours)
    with pytest.raises(ValueError, match='(?s)theirs does not match.*Unexpected key.*"in_proj_bias"'):
        mha_to_torch(ours, nn.MultiheadAttention(D, H, bias=False, batch_first=True))
    with pytest.raises(ValueError, match='(?s)ours does not match.*Unexpected key.*"W_q.bias"'):
        mha_from_torch(nn.MultiheadAttention(D, H, batch_first=True), MultiHeadAttention(D, H, bias=False))
    with pytest.raises(ValueError, match='(?s)Missing key.*"bias_k"'):
        mha_to_torch(ours, nn.MultiheadAttention(D, H, add_bias_kv=True, batch_first=True))
    with pytest.raises(ValueError, match='(?s)Missing key.*"q_proj_weight"'):
        mha_to_torch(ours, nn.MultiheadAttention(D, H, kdim=8, vdim=8, batch_first=True))
    with pytest.raises(TypeError, match="ours must be a MultiHeadAttention"):
        mha_to_torch(nn.MultiheadAttention(D, H), ours)
    with pytest.raises(TypeError, match="theirs must be an nn.MultiheadAttention"):
        mha_from_torch(ours, ours)


def test_key_map_is_torchs_names_and_inverts():
    ours = MultiHeadAttention(D, H)
    mapped = to_torch_state(ours.state_dict())
    assert list(mapped) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    assert set(mapped) == set(nn.MultiheadAttention(D, H).state_dict())
    back = from_torch_state(mapped)
    assert back.keys() == ours.state_dict().keys()
    assert all(torch.equal(back[k], v) for k, v in ours.state_dict().items())
    nested = to_torch_state({f"a.{k}": v for k, v in ours.state_dict().items()}, MHA_NAMES | {"a": "b"})
    assert set(nested) == {f"b.{k}" for k in mapped}


# ---- masks

def full(m, n):
    "what each (batch, head, query) may attend to"
    return m.reshape((1,) * (4 - m.dim()) + tuple(m.shape)).expand(B, H, T, n)


def test_to_torch_masks_shapes():
    assert to_torch_masks(None, H) == (None, None)
    pad = pad_mask([S, 3], S)
    am, kpm = to_torch_masks(pad, H)
    assert am is None and kpm.shape == (B, S) and torch.equal(kpm, ~pad[:, 0, 0])
    c = causal_mask(T)                                      # (1, 1, T, T)
    for m in (c[0, 0], c):
        am, kpm = to_torch_masks(m, H)
        assert kpm is None and torch.equal(am, ~c[0, 0])
    both = c & pad_mask([T, 3], T)  # (B, 1, T, T)
    am, kpm = to_torch_masks(both, H)
    assert kpm is None and am.shape == (B * H, T, T)
    for b in range(B):
        for h in range(H): assert torch.equal(am[b * H + h], ~both[b, 0])  # heads vary fastest
    per_head = make_mask("random-per-head", cross=True)
    am, _ = to_torch_masks(per_head, H)
    assert torch.equal(am.view(B, H, T, S), ~per_head)


@pytest.mark.parametrize("kind", ["padding", "causal", "causal+padding", "random-per-head"])
def test_mask_round_trip_ours(kind):
    m = make_mask(kind, cross=kind in ("padding", "random-per-head"))
    n = m.shape[-1]
    back = from_torch_masks(*to_torch_masks(m, H), num_heads=H)
    assert back.dtype == torch.bool and torch.equal(full(back, n), full(m, n))


def test_mask_round_trip_torch():
    kpm = ~pad_mask([S, 3], S)[:, 0, 0]                    # torch's: True = pad
    am2 = torch.ones(T, S, dtype=torch.bool).triu(1)       # torch's: True = blocked
    am3 = torch.rand(B * H, T, S, generator=torch.Generator().manual_seed(0)) > 0.5
    assert torch.equal(to_torch_masks(from_torch_masks(key_padding_mask=kpm), H)[1], kpm)
    assert torch.equal(to_torch_masks(from_torch_masks(attn_mask=am2), H)[0], am2)
    assert torch.equal(to_torch_masks(from_torch_masks(attn_mask=am3, num_heads=H), H)[0], am3)
    combined = from_torch_masks(am2, kpm)                  # blocked by either = blocked
    assert combined.shape == (B, 1, T, S)
    assert torch.equal(combined, ~am2[None, None] & ~kpm[:, None, None, :])
    float_am = torch.zeros(T, S).masked_fill(am2, float("-inf"))
    assert torch.equal(from_torch_masks(attn_mask=float_am), from_torch_masks(attn_mask=am2))
    assert from_torch_masks() is None


def test_mask_conversion_errors():
    with pytest.raises(TypeError, match="boolean"):
        to_torch_masks(torch.ones(T, S), H)
    with pytest.raises(ValueError, match="head dimension"):
        to_torch_masks(torch.ones(B, 3, T, S, dtype=torch.bool), H)
    with pytest.raises(ValueError, match="needs num_heads"):
        from_torch_masks(attn_mask=torch.zeros(B * H, T, S, dtype=torch.bool))
    with pytest.raises(ValueError, match="B\\*num_heads"):
        from_torch_masks(attn_mask=torch.zeros(7, T, S, dtype=torch.bool), num_heads=H)
    with pytest.raises(ValueError, match="no boolean equivalent"):
        from_torch_masks(attn_mask=torch.randn(T, S))
    with pytest.raises(ValueError, match="key_padding_mask must have shape"):
        from_torch_masks(key_padding_mask=torch.zeros(S, dtype=torch.bool))


# ---- errors

def test_divisibility_error():
    with pytest.raises(ValueError, match=r"^embed_dim must be divisible by num_heads.*d_model=10, num_heads=3"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads"):
        split_heads(torch.randn(B, T, D), 5)


def test_constructor_errors():
    with pytest.raises(ValueError, match="num_heads must be >= 1"): MultiHeadAttention(D, 0)
    with pytest.raises(ValueError, match="d_model must be >= 1"): MultiHeadAttention(0, 1)
    with pytest.raises(TypeError, match="num_heads must be an int"): MultiHeadAttention(D, 4.0)
    with pytest.raises(ValueError, match="dropout must be in"): MultiHeadAttention(D, H, dropout=1.0)
    with pytest.raises(TypeError, match="dropout"): MultiHeadAttention(D, H, dropout="0.1")
    with pytest.raises(TypeError, match="bias must be a bool"): MultiHeadAttention(D, H, bias=None)


def test_forward_errors():
    m = MultiHeadAttention(D, H)
    q, k, v = make_inputs(cross=True)
    with pytest.raises(ValueError, match="key and value must have the same length S"): m(q, k, v[:, :6])
    with pytest.raises(ValueError, match="same batch size B"): m(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="query must have last dimension d_model=24"): m(q[..., :16], k, v)
    with pytest.raises(ValueError, match="key must have 3 dimensions"): m(q, k[0], v)
    with pytest.raises(TypeError, match="floating dtype"): m(q, k.long(), v)
    with pytest.raises(TypeError, match="dtype torch.bool"): m(q, k, v, mask=pad_mask([S, 3], S).float())
    with pytest.raises(ValueError, match="does not broadcast"): m(q, k, v, mask=torch.ones(T, T, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least one position"): m(q, k[:, :0], v[:, :0])


def test_fully_masked_query_gives_zeros():
    "where we differ from torch (NaN): a query with no allowed key gets zero weights"
    m = MultiHeadAttention(D, H, bias=False)
    q, k, v = make_inputs(cross=True)
    mask = torch.tensor([True, False])[:, None, None, None].expand(B, 1, 1, S)
    out, w = m(q, k, v, mask=mask)
    assert torch.isfinite(out).all()
    assert (w[1] == 0).all() and (out[1] == 0).all()


@pytest.mark.parametrize("batch", [2, H])
def test_chapter_2_padding_mask_is_refused(batch):
    """Chapter 2's padding mask (B, 1, S) reads as (1, B, 1, S) against (B, H, T, S), a mask per head: with B == H it
    ran and the padded keys got weight, with B != H the broadcast error gave no hint (review of chapters 1-3, item 4)"""
    m = MultiHeadAttention(D, H)
    x = torch.randn(batch, T, D)
    three_d = pad_mask([T, 3] + [T] * (batch - 2), T)[:, 0]                  # (batch, 1, T)
    with pytest.raises(ValueError, match=r"mask of shape \((2|4), 1, 5\) would read as \(H, T, S\).*mask\[:, None\]"):
        m(x, x, x, mask=three_d)
    _, w = m(x, x, x, mask=three_d[:, None])                                  # (batch, 1, 1, T): the padding mask
    assert (w[1, :, :, 3:] == 0).all()
    _, w = m(x, x, x, mask=causal_mask(T)[0])                                 # (1, T, T) is still one mask for all
    assert (w.triu(1) == 0).all()


def test_rope_with_a_cache_is_for_self_attention():
    """A cached cross-attention step's query was rotated as position 0, teacher forcing rotated it as position t: the two
    differed by 0.12 without a word (review of chapters 1-3, item 5). Self-attention with a cache still matches."""
    from transformer_nb.layers import LayerCache
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 2, rope=True).eval()
    y, mem = torch.randn(1, 4, 16), torch.randn(1, 6, 16)
    with pytest.raises(ValueError,
                       match=r"rope=True with a cache is for self-attention \(key is query, or is_self=True\)"):
        m(y[:, :1], mem, mem, cache=LayerCache())
    m(y, mem, mem)                                                    # without a cache: each counts from 0
    with torch.no_grad():
        cache, full = LayerCache(), m(y, y, y, mask=causal_mask(4))[0]
        steps = torch.cat([m(yt, yt, yt, cache=cache)[0] for t in range(4) for yt in [y[:, t:t + 1]]], 1)
    assert all_close({"steps": (steps - full).abs().max().item()}, TOL)


def test_to_torch_masks_padding_per_head_needs_T():
    """A padding mask that differs by head, (B, H, 1, S), which our module accepts, became attn_mask (B*H, 1, S), and
    nn.MultiheadAttention refused it for T > 1 (review of chapters 1-3, item 11): it now needs T and gives (B*H, T, S)"""
    torch.manual_seed(0)
    per_head = torch.rand(B, H, 1, S, generator=torch.Generator().manual_seed(2)) > 0.4
    per_head[..., 0] = True
    with pytest.raises(ValueError, match="one query row per head.*pass T"):
        to_torch_masks(per_head, H)
    with pytest.raises(ValueError, match=r"has 3 query rows, not T=5"):
        to_torch_masks(per_head.expand(B, H, 3, S), H, T=T)
    ours = MultiHeadAttention(D, H)
    theirs = mha_to_torch(ours, nn.MultiheadAttention(D, H, batch_first=True))
    q, k, v = make_inputs(cross=True)
    am, kpm = to_torch_masks(per_head, H, T=T)
    assert am.shape == (B * H, T, S) and kpm is None
    out, w = ours(q, k, v, mask=per_head)
    out_t, w_t = theirs(q, k, v, attn_mask=am, average_attn_weights=False)
    assert (out - out_t).abs().max() < TOL and (w - w_t).abs().max() < TOL
    am1, _ = to_torch_masks(per_head, H, T=1)                          # one query: (B*H, 1, S) as before
    assert am1.shape == (B * H, 1, S)


def test_chapter_2_padding_mask_is_refused_by_the_layers_and_the_model():
    """The same (B, 1, S) mask given to a layer, a stack or the Transformer reached the attention inside the door, past
    its check: with B == H it ran as a mask per head. Each entry point now names its own argument"""
    from transformer_nb.layers import DecoderLayer, Encoder, EncoderLayer
    from transformer_nb.transformer import Transformer
    torch.manual_seed(0)
    B, S = 4, 5                                                                # B == H
    x, pad = torch.randn(B, S, D), pad_mask([S, 3, S, S], S)                   # (B, 1, 1, S)
    sa = dict(d_model=D, num_heads=B, d_ff=8, dropout=0.0)
    for call, name in [
        (lambda m: EncoderLayer(**sa)(x, m), "src_mask"),
        (lambda m: Encoder(**sa, num_layers=2)(x, m), "src_mask"),
        (lambda m: DecoderLayer(**sa)(x, x, causal_mask(S), m), "memory_mask"),
        (lambda m: DecoderLayer(**sa)(x, x, m), "tgt_mask"),
    ]:
        with pytest.raises(ValueError, match=name + r" of shape \(4, 1, 5\) would read as \(H, T, S\).*" + name + r"\[:, None\]"):
            call(pad[:, 0])
        call(pad)                                                             # (B, 1, 1, S) runs
    model = Transformer(11, 11, d_model=D, num_heads=B, d_ff=8, num_encoder_layers=1,
                        num_decoder_layers=1, dropout=0.0)
    ids = torch.randint(1, 11, (B, S))
    with pytest.raises(ValueError, match=r"src_mask of shape \(4, 1, 5\)"):
        model(ids, ids, pad[:, 0], causal_mask(S), pad)
    model(ids, ids, pad, causal_mask(S), pad)
