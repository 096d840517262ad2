"""Chapter 6: EncoderLayer/DecoderLayer against nn.TransformerEncoderLayer/nn.TransformerDecoderLayer (outputs and every
gradient, both norm placements, masks), weight copying both ways, stacks, return_attention, errors."""
import re

import pytest
import torch
from torch import nn

from transformer_nb.layers import (EncoderLayer, DecoderLayer, Encoder, Decoder, LAYER_NAMES, layer_to_torch,
                                   layer_from_torch)
from transformer_nb.multihead import to_torch_masks, to_torch_state
from transformer_nb.norms import LayerNorm
from transformer_nb.core import compare_modules
from transformer_nb.masking import causal_mask
from conftest import pad_mask

B, T, S, D, H, F = 2, 5, 7, 24, 4, 40  # distinct sizes, so that a swapped axis fails
TOL = 1e-5


def causal(n): return causal_mask(n)                     # (1, 1, n, n), the package's


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, D, generator=g), torch.randn(B, S, D, generator=g)


def key_map(state): return to_torch_state(state, LAYER_NAMES)


def compare(ours, theirs, run_ours, run_theirs, xs):
    "Largest difference in output, every parameter gradient and input gradients (compare_modules)"
    diffs = compare_modules(run_ours, run_theirs, *xs, modules=(ours, theirs, key_map), seed=1)
    assert {k for k in diffs if k.startswith("grad ") and "input" not in k} == {f"grad {k}" for k, _ in
                                                                               theirs.named_parameters()}
    assert all(p.grad is not None for p in ours.parameters())
    assert all(d == d for d in diffs.values())                                # no NaN
    return max(diffs.values())


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masked", [False, True])
def test_encoder_layer_matches_torch(norm_first, activation, masked):
    torch.manual_seed(0)
    ours = EncoderLayer(D, H, F, dropout=0.0, norm_first=norm_first, activation=activation)
    theirs = layer_to_torch(ours, nn.TransformerEncoderLayer(D, H, F, 0.0, activation=activation,
                                                                     batch_first=True, norm_first=norm_first))
    mask = pad_mask([S, 4], S) if masked else None
    am, kpm = to_torch_masks(mask, H)
    _, x = inputs()
    d = compare(ours, theirs, lambda x: ours(x, mask)[0], lambda x: theirs(x, src_mask=am, src_key_padding_mask=kpm),
                [x])
    assert d < TOL, d


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("tgt_kind", ["causal", "causal+padding"])
def test_decoder_layer_matches_torch(norm_first, tgt_kind):
    torch.manual_seed(0)
    ours = DecoderLayer(D, H, F, dropout=0.0, norm_first=norm_first)
    theirs = layer_to_torch(ours, nn.TransformerDecoderLayer(D, H, F, 0.0, batch_first=True,
                                                                     norm_first=norm_first))
    tgt_mask = causal(T) if tgt_kind == "causal" else causal(T) & pad_mask([T, 3], T)
    mem_mask = pad_mask([S, 4], S)
    tm, tkpm = to_torch_masks(tgt_mask, H)
    mm, mkpm = to_torch_masks(mem_mask, H)
    y, mem = inputs()
    d = compare(ours, theirs, lambda y, m: ours(y, m, tgt_mask, mem_mask)[0],
                lambda y, m: theirs(y, m, tgt_mask=tm, memory_mask=mm, tgt_key_padding_mask=tkpm,
                                    memory_key_padding_mask=mkpm),
                [y, mem])
    assert d < TOL, d


def test_stacks_match_torch_stacks():
    "Encoder/Decoder of N layers vs nn.TransformerEncoder/Decoder with a final norm (pre-LN)"
    torch.manual_seed(0)
    enc, dec = Encoder(D, H, F, 2, dropout=0.0), Decoder(D, H, F, 3, dropout=0.0)
    t_enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, F, 0.0, batch_first=True, norm_first=True), 2,
                                  norm=nn.LayerNorm(D), enable_nested_tensor=False)
    t_dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(D, H, F, 0.0, batch_first=True, norm_first=True), 3,
                                  norm=nn.LayerNorm(D))
    for a, b in zip(enc.layers, t_enc.layers): layer_to_torch(a, b)
    for a, b in zip(dec.layers, t_dec.layers): layer_to_torch(a, b)
    t_enc.norm.load_state_dict(enc.norm.state_dict()); t_dec.norm.load_state_dict(dec.norm.state_dict())
    y, x = inputs()
    src_mask, tgt_mask = pad_mask([S, 4], S), causal(T)
    mem = enc(x, src_mask)
    out = dec(y, mem, tgt_mask, src_mask)
    kpm = to_torch_masks(src_mask, H)[1]
    mem_t = t_enc(x, src_key_padding_mask=kpm)
    out_t = t_dec(y, mem_t, tgt_mask=to_torch_masks(tgt_mask, H)[0], memory_key_padding_mask=kpm)
    assert (mem - mem_t).abs().max() < TOL and (out - out_t).abs().max() < TOL


@pytest.mark.parametrize("decoder", [False, True])
def test_copy_round_trip_covers_every_parameter(decoder):
    torch.manual_seed(0)
    if decoder:
        ours, theirs = DecoderLayer(D, H, F, norm_first=False), nn.TransformerDecoderLayer(D, H, F, batch_first=True)
        there, back = layer_to_torch, layer_from_torch
        fresh = DecoderLayer(D, H, F, norm_first=False)
    else:
        ours, theirs = EncoderLayer(D, H, F, norm_first=False), nn.TransformerEncoderLayer(D, H, F, batch_first=True)
        there, back = layer_to_torch, layer_from_torch
        fresh = EncoderLayer(D, H, F, norm_first=False)
    with torch.no_grad():                     # make every parameter distinct from a fresh module's
        for p in ours.parameters(): p.normal_()
    back(there(ours, theirs), fresh)
    for a, b in zip(ours.parameters(), fresh.parameters()): assert torch.equal(a, b)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())


def test_copy_refuses_mismatches():
    theirs = nn.TransformerEncoderLayer(D, H, F, batch_first=True, norm_first=True)
    with pytest.raises(ValueError, match="the layers differ in norm_first: ours False, theirs True"):
        layer_to_torch(EncoderLayer(D, H, F, norm_first=False), theirs)
    with pytest.raises(ValueError, match="(?s)theirs does not match.*size mismatch for linear1.weight"):
        layer_to_torch(EncoderLayer(D, H, 32), theirs)
    with pytest.raises(ValueError, match="differ in activation: ours 'gelu', theirs 'relu'"):
        layer_to_torch(EncoderLayer(D, H, F, activation="gelu"), theirs)
    with pytest.raises(ValueError, match="differ in num_heads: ours 6, theirs 4"):
        layer_to_torch(EncoderLayer(D, 3 * 2, F), theirs)
    with pytest.raises(ValueError, match="differ in eps"):
        layer_to_torch(EncoderLayer(D, H, F), nn.TransformerEncoderLayer(D, H, F, layer_norm_eps=1e-3,
                                                                         batch_first=True, norm_first=True))
    with pytest.raises(ValueError, match='(?s)theirs does not match.*Missing key.*"multihead_attn.in_proj_weight"'):
        layer_to_torch(EncoderLayer(D, H, F), nn.TransformerDecoderLayer(D, H, F, batch_first=True, norm_first=True))
    with pytest.raises(ValueError, match="the layers at layers.1 differ in norm_first"):
        enc = Encoder(D, H, F, 2); enc.layers[1].norm_first = False
        layer_to_torch(enc, nn.TransformerEncoder(theirs, 2, norm=nn.LayerNorm(D), enable_nested_tensor=False))
    with pytest.raises(TypeError, match="ours must be an EncoderLayer, DecoderLayer, Encoder or Decoder"):
        layer_to_torch(theirs, EncoderLayer(D, H, F))


def old_names(state):
    "A state dict as the layers wrote it before their norms took torch's names: sublayers.{i}.norm"
    return {re.sub(r"(^|\.)norm(\d)\.", lambda m: f"{m[1]}sublayers.{int(m[2]) - 1}.norm.", k): v
            for k, v in state.items()}


@pytest.mark.parametrize("make", [lambda: EncoderLayer(D, H, F), lambda: DecoderLayer(D, H, F, norm_first=False),
                                  lambda: Decoder(D, H, F, 2), lambda: Encoder(D, H, F, 3, final_norm=True)])
def test_checkpoints_with_old_names_still_load(make, tmp_path):
    torch.manual_seed(0)
    ours = make()
    with torch.no_grad():
        for p in ours.parameters(): p.normal_()
    old = old_names(ours.state_dict())
    assert any(".norm." in k and "sublayers." in k for k in old) and not any(re.search(r"norm\d", k) for k in old)
    torch.save(old, tmp_path / "old.pt")                       # as a checkpoint written before the renaming
    fresh = make()
    fresh.load_state_dict(torch.load(tmp_path / "old.pt"))     # strict: every key found, none left over
    for (n, a), b in zip(ours.state_dict().items(), fresh.state_dict().values()): assert torch.equal(a, b), n
    assert list(torch.load(tmp_path / "old.pt")) == list(old)  # the caller's dict is left as it was


def test_return_attention_shapes_and_masks():
    torch.manual_seed(0)
    enc, dec = Encoder(D, H, F, 2, dropout=0.0), Decoder(D, H, F, 3, dropout=0.0)
    y, x = inputs()
    src_mask = pad_mask([S, 4], S)
    mem, ws = enc(x, src_mask, return_attention=True)
    assert len(ws) == 2 and all(w.shape == (B, H, S, S) for w in ws)
    torch.testing.assert_close(enc(x, src_mask), mem, atol=1e-5, rtol=0)   # the fast path: the same, up to rounding
    out, sw, cw = dec(y, mem, causal(T), src_mask, return_attention=True)
    assert out.shape == (B, T, D) and len(sw) == len(cw) == 3
    assert all(w.shape == (B, H, T, T) for w in sw) and all(w.shape == (B, H, T, S) for w in cw)
    assert all((w.triu(1) == 0).all() for w in sw)
    assert all((w[1, ..., 4:] == 0).all() for w in cw)


def test_final_norm_only_in_pre_ln():
    assert isinstance(Encoder(D, H, F, 1).norm, LayerNorm) and isinstance(Decoder(D, H, F, 1).norm, LayerNorm)
    assert Encoder(D, H, F, 1, norm_first=False).norm is None and Decoder(D, H, F, 1, norm_first=False).norm is None
    assert isinstance(Decoder(D, H, F, 1, norm_first=False, final_norm=True).norm, LayerNorm)
    assert Encoder(D, H, F, 1, final_norm=False).norm is None


def test_errors():
    with pytest.raises(ValueError, match="num_layers must be >= 1"): Encoder(D, H, F, 0)
    with pytest.raises(ValueError, match="num_layers must be >= 1"): Decoder(D, H, F, 0)
    with pytest.raises(TypeError, match="num_layers must be an int"): Decoder(D, H, F, 2.0)
    with pytest.raises(TypeError, match="final_norm must be a bool"): Encoder(D, H, F, 1, final_norm="yes")
    with pytest.raises(ValueError, match="divisible by num_heads"): EncoderLayer(D, 5, F)
    dec = DecoderLayer(D, H, F)
    y, mem = inputs()
    with pytest.raises(ValueError, match="y and memory must have the same batch size B, got 2 and 1"): dec(y, mem[:1])
    with pytest.raises(ValueError, match="y and memory must have the same batch size B, got 2 and 1"):
        Decoder(D, H, F, 1)(y, mem[:1])
    with pytest.raises(ValueError, match="memory must have last dimension d_model=24"): dec(y, mem[..., :8])
    with pytest.raises(ValueError, match="x must have 3 dimensions"): EncoderLayer(D, H, F)(mem[0])
    with pytest.raises(ValueError, match="x must hold at least one position"): Encoder(D, H, F, 1)(mem[:, :0])
    with pytest.raises(TypeError, match="dtype torch.bool"): EncoderLayer(D, H, F)(mem, src_mask=torch.ones(B, 1, 1, S))


def test_input_of_another_dtype_names_the_argument():
    "float64 into float32 layers: our error naming the argument, not torch's 'mixed dtype' from inside LayerNorm"
    import pytest, torch
    from transformer_nb.layers import Encoder, Decoder, EncoderLayer
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    for f, name in ((lambda: Encoder(8, 2, 16, 1)(x), "x"), (lambda: EncoderLayer(8, 2, 16)(x), "x"),
                    (lambda: Decoder(8, 2, 16, 1)(x.float(), x), "memory")):
        with pytest.raises(TypeError, match=f"{name} has dtype torch.float64, but the weights have torch.float32"):
            f()
