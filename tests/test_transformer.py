"""Chapter 7: the full Transformer: shapes, need_weights, encode/decode == forward, weight sharing, initialisation,
equality of the stacks with nn.Transformer (outputs and every gradient, pre-LN and post-LN), weight copy, errors."""
import warnings

import pytest
import torch
from torch import nn

from transformer_nb.core import compare_modules
from transformer_nb.layers import LAYER_NAMES, LayerCache
from transformer_nb.masking import causal_mask, padding_mask, target_mask
from transformer_nb.multihead import to_torch_masks, to_torch_state
from transformer_nb.norms import LayerNorm
from transformer_nb.transformer import (
    Attention,
    Transformer,
    from_torch_transformer,
    show_attention_grid,
    to_torch_transformer,
)

D, H, F, VS, VT, PAD = 24, 4, 40, 11, 13, 0
TOL = 1e-5
SRC = torch.tensor([[5, 8, 3, 9, 4, 7, 2], [6, 3, 8, 2, PAD, PAD, PAD]])
TGT = torch.tensor([[1, 4, 9, 6, 3], [1, 7, 2, PAD, PAD]])
B, S = SRC.shape
T = TGT.shape[1]
SRC_MASK = padding_mask(SRC, PAD)                            # (B, 1, 1, S)
TGT_MASK = target_mask(TGT, PAD)                             # (B, 1, T, T)


def model(**kw):
    torch.manual_seed(0)
    return Transformer(VS, VT, D, H, num_encoder_layers=2, num_decoder_layers=3, d_ff=F, dropout=0.0, **kw)


def test_shapes_and_attention():
    m = model()
    logits, attn = m(SRC, TGT, SRC_MASK, TGT_MASK, SRC_MASK, need_weights=True)
    assert logits.shape == (B, T, VT) and isinstance(attn, Attention)
    assert attn.encoder.shape == (2, B, H, S, S)
    assert attn.decoder.shape == (3, B, H, T, T)
    assert attn.cross.shape == (3, B, H, T, S)
    assert (attn.cross[:, 1, ..., 4:] == 0).all() and (attn.decoder.triu(1) == 0).all()
    torch.testing.assert_close(m(SRC, TGT, SRC_MASK, TGT_MASK, SRC_MASK), logits, atol=1e-5, rtol=0)  # fast path


def test_encode_decode_equal_forward():
    m = model()
    memory = m.encode(SRC, SRC_MASK)
    assert memory.shape == (B, S, D)
    assert torch.equal(m.decode(TGT, memory, TGT_MASK, SRC_MASK), m(SRC, TGT, SRC_MASK, TGT_MASK, SRC_MASK))


def test_weight_sharing_ties_parameters():
    torch.manual_seed(0)
    m = Transformer(VT, VT, D, H, 1, 1, F, dropout=0.0, share_embeddings=True)
    w = m.tgt_embed.tokens.embed.weight
    assert m.output.weight is w and m.src_embed.tokens.embed.weight is w
    u = Transformer(VT, VT, D, H, 1, 1, F, dropout=0.0)
    n = lambda m: sum(p.numel() for p in m.parameters())
    assert n(u) - n(m) == 2 * VT * D
    # a gradient step through the output projection moves the embeddings too
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    before = m.src_embed.tokens.embed.weight.detach().clone()
    m(TGT, TGT).sum().backward(); opt.step()
    assert not torch.equal(before, m.src_embed.tokens.embed.weight)
    assert m.output.weight is m.src_embed.tokens.embed.weight
    # different vocabularies: only the target embedding and the output projection are tied
    d = Transformer(VS, VT, D, H, 1, 1, F, share_embeddings=True)
    assert d.output.weight is d.tgt_embed.tokens.embed.weight
    assert d.src_embed.tokens.embed.weight is not d.tgt_embed.tokens.embed.weight


def test_xavier_init():
    m = model()
    for name, p in m.named_parameters():
        if p.dim() > 1:
            bound = (6 / sum(p.shape)) ** 0.5
            assert p.abs().max() <= bound + 1e-6, name


def stack_diff(ours, theirs):
    "compare_modules on our encoder+decoder and nn.Transformer with the same weights: outputs and every gradient"
    to_torch_transformer(ours, theirs)
    with torch.no_grad(): x, y = ours.src_embed(SRC), ours.tgt_embed(TGT)
    (sm, skpm), (tm, tkpm) = to_torch_masks(SRC_MASK, H), to_torch_masks(TGT_MASK, H)
    stacks = nn.ModuleDict({"encoder": ours.encoder, "decoder": ours.decoder})
    diffs = compare_modules(lambda x, y: ours.decoder(y, ours.encoder(x, SRC_MASK), TGT_MASK, SRC_MASK),
                            lambda x, y: theirs(x, y, src_mask=sm, tgt_mask=tm, src_key_padding_mask=skpm,
                                                tgt_key_padding_mask=tkpm, memory_key_padding_mask=skpm),
                            x, y, modules=(stacks, theirs, lambda g: to_torch_state(g, LAYER_NAMES)), seed=1)
    assert len(diffs) == 3 + len(list(theirs.parameters()))   # output, two inputs, every parameter of torch's
    return max(diffs.values())


def torch_model(norm_first):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return nn.Transformer(D, H, 2, 3, F, dropout=0.0, batch_first=True, norm_first=norm_first)


def test_pre_ln_matches_nn_transformer():
    assert stack_diff(model(), torch_model(True)) < TOL


def test_post_ln_matches_without_torch_final_norms():
    theirs = torch_model(False)
    theirs.encoder.norm, theirs.decoder.norm = None, None
    assert stack_diff(model(norm_first=False), theirs) < TOL


def test_post_ln_with_our_final_norms_matches_stock_nn_transformer():
    ours = model(norm_first=False)
    ours.encoder.norm, ours.decoder.norm = LayerNorm(D), LayerNorm(D)
    assert stack_diff(ours, torch_model(False)) < TOL


def test_copy_round_trip_and_refusals():
    ours, theirs = model(), torch_model(True)
    with torch.no_grad():
        for p in ours.parameters(): p.normal_()
    fresh = from_torch_transformer(to_torch_transformer(ours, theirs), model())
    for n in ("encoder", "decoder"):
        for a, b in zip(getattr(ours, n).parameters(), getattr(fresh, n).parameters()): assert torch.equal(a, b)
    with pytest.raises(ValueError, match="encoder final norm differs"):
        to_torch_transformer(model(norm_first=False), torch_model(False))
    with pytest.raises(ValueError, match='(?s)theirs does not match.*Unexpected key.*"layers.2.self_attn.in_proj_weight"'):
        to_torch_transformer(ours, nn.Transformer(D, H, 2, 2, F, batch_first=True, norm_first=True))
    with pytest.raises(TypeError, match="theirs must be an nn.Transformer"):
        to_torch_transformer(ours, ours)


def test_errors():
    m = model()
    with pytest.raises(ValueError, match="src and tgt must have the same batch size B, got 2 and 1"): m(SRC, TGT[:1])
    with pytest.raises(TypeError, match="src must hold integer token ids"): m(SRC.float(), TGT)
    with pytest.raises(ValueError, match="src must lie in"): m(SRC + 20, TGT)
    with pytest.raises(ValueError, match="src_vocab must be >= 1"): Transformer(0, 5)
    with pytest.raises(TypeError, match="share_embeddings must be a bool"): Transformer(5, 5, 8, 2, 1, 1, 8, share_embeddings=1)
    with pytest.raises(ValueError, match="keys has 3 labels"):
        show_attention_grid(torch.rand(2, H, T, S), keys=["a", "b", "c"])
    with pytest.raises(ValueError, match="maps must have 4 dimensions"): show_attention_grid(torch.rand(H, T, S))


def test_positions_refused_by_the_transformer_not_by_its_embeddings():
    "review of chapters 4-7, item 10: 'xyz' got Embeddings' message, which offers 'rope', which Transformer refuses"
    with pytest.raises(ValueError) as info: Transformer(11, 13, 24, 4, positions="xyz")
    assert str(info.value) == """positions must be "sinusoidal" or "learned", got 'xyz'"""
    with pytest.raises(ValueError, match='got "rope": rotary positions are a switch of GPT'):
        Transformer(11, 13, 24, 4, positions="rope")


def test_ablate_heads_equals_zeroing_the_head_and_restores():
    from transformer_nb.decoding import greedy_search
    from transformer_nb.transformer import ablate_heads
    m = model().eval()
    ref, attn = m(SRC, TGT, SRC_MASK, TGT_MASK, SRC_MASK, need_weights=True)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    # one cross-attention head: the layer's output equals W_o applied to the heads with that head zeroed
    mha = m.decoder.layers[1].cross_attn
    y, mem = torch.randn(B, T, D), torch.randn(B, S, D)
    with torch.no_grad():
        q, k, v = (W(t).unflatten(-1, (H, D // H)).transpose(1, 2) for W, t in
                   ((mha.W_q, y), (mha.W_k, mem), (mha.W_v, mem)))
        heads = torch.softmax(q @ k.transpose(-2, -1) / (D // H) ** 0.5, -1) @ v     # (B, H, T, d_k)
        heads[:, 3] = 0
        want = mha.W_o(heads.transpose(1, 2).flatten(2))
        with ablate_heads(m, [("cross", 1, 3)]):
            for need in (True, False):
                torch.testing.assert_close(mha(y, mem, mem, need_weights=need)[0], want, atol=1e-5, rtol=0)
    # every cross head: the source no longer matters, on the readable, fast and cached decoding paths
    every = [("cross", l, h) for l in range(3) for h in range(H)]
    other = SRC.flip(0)
    with torch.no_grad(), ablate_heads(m, every):
        a = m(SRC, TGT, SRC_MASK, TGT_MASK, SRC_MASK, need_weights=True)[0]
        b = m(other, TGT, padding_mask(other, PAD), TGT_MASK, padding_mask(other, PAD))
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        for cache in (True, False):
            g1, l1 = greedy_search(m, SRC, SRC_MASK, max_len=6, use_cache=cache, bos=1, eos=None)
            g2, l2 = greedy_search(m, other, padding_mask(other, PAD), max_len=6, use_cache=cache, bos=1,
                                   eos=None)
            assert torch.equal(g1, g2)
            torch.testing.assert_close(l1, l2, atol=1e-5, rtol=0)
    # restored, also after an error inside the block
    with pytest.raises(RuntimeError, match="boom"):
        with ablate_heads(m, [("encoder", 0, 0), ("decoder", 2, 1)]):
            assert (m.encoder.layers[0].self_attn.W_o.weight[:, :D // H] == 0).all()
            raise RuntimeError("boom")
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())
    torch.testing.assert_close(m(SRC, TGT, SRC_MASK, TGT_MASK, SRC_MASK, need_weights=True)[0], ref,
                               atol=0, rtol=0)


@pytest.mark.parametrize("heads, err, match", [
    ([("self", 0, 0)], ValueError, "kind must be one of"),
    ([("encoder", 2, 0)], ValueError, "encoder has layers 0..1, got layer 2"),
    ([("cross", 0, 4)], ValueError, "cross has heads 0..3, got head 4"),
    ([("cross", 0)], TypeError, "heads must hold"),
    ([("decoder", 0.0, 0)], ValueError, "got layer 0.0"),
])
def test_ablate_heads_errors(heads, err, match):
    from transformer_nb.transformer import ablate_heads
    m = model()
    with pytest.raises(err, match=match):
        with ablate_heads(m, heads): pass
    with pytest.raises(TypeError, match="model must be a Transformer"):
        with ablate_heads(nn.Linear(2, 2), []): pass


@pytest.mark.parametrize("norm_first", [True, False])
def test_decode_with_a_cache_equals_one_pass(norm_first):
    "decode(tgt[:, t:t+1], ..., cache=...) step by step: the positions continue after the cached ones; same logits"
    m = model(norm_first=norm_first).eval()
    T = TGT.shape[1]
    with torch.no_grad():
        memory = m.encode(SRC, SRC_MASK)
        full = m.decode(TGT, memory, causal_mask(T), SRC_MASK)
        cache = [LayerCache() for _ in m.decoder.layers]
        steps = torch.cat([m.decode(TGT[:, t:t + 1], memory, None, SRC_MASK, cache=cache) for t in range(T)], 1)
        torch.testing.assert_close(steps, full, atol=1e-5, rtol=0)
        # with a cache, a mask covers the cached positions too: (2, T + 2), not (2, 2)
        with pytest.raises(ValueError, match=rf"tgt_mask of shape \(1, 1, 2, 2\) does not broadcast .* \(2, {H}, 2, {T + 2}\)"):
            m.decode(TGT[:, :2], memory, causal_mask(2), SRC_MASK, cache=cache)
