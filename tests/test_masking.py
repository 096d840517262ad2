"Masks: their shapes and broadcasting, and the behaviours they guarantee in the full model (issue 4)."
import pytest
import torch

from transformer_nb.masking import causal_mask, pad_batch, padding_mask, target_mask
from transformer_nb.transformer import Transformer

PAD = 0


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Transformer(20, 20, d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=64,
                       dropout=0.0).eval()


SRC = pad_batch([[3, 4, 5, 6, 7, 8], [3, 9, 10, 11]], PAD)
TGT = pad_batch([[1, 12, 13, 14, 15], [1, 16, 17]], PAD)


def run(model, src, tgt, src_mask=None):
    m = padding_mask(src, PAD) if src_mask is None else src_mask
    return model(src, tgt, src_mask=m, tgt_mask=target_mask(tgt, PAD), memory_mask=m)


def test_shapes_and_broadcasting():
    assert padding_mask(SRC, PAD).shape == (2, 1, 1, 6)
    assert causal_mask(5).shape == (1, 1, 5, 5)
    tm = target_mask(TGT, PAD)
    assert tm.shape == (2, 1, 5, 5) and tm.dtype == torch.bool
    assert torch.broadcast_shapes(tm.shape, (2, 4, 5, 5)) == (2, 4, 5, 5)
    assert torch.equal(tm[0, 0], causal_mask(5)[0, 0])
    assert not tm[1, 0, :, 3:].any() and tm[1, 0, 2, :3].all()


@pytest.mark.parametrize("t", [1, 2, 3, 4])
def test_a_future_target_token_leaves_earlier_outputs_unchanged(model, t):
    with torch.no_grad():
        base = run(model, SRC, TGT)
        changed = TGT.clone(); changed[0, t] = 19
        out = run(model, SRC, changed)
    torch.testing.assert_close(out[0, :t], base[0, :t], atol=1e-6, rtol=0)
    assert not torch.allclose(out[0, t], base[0, t])


def test_padded_source_values_do_not_leak(model):
    with torch.no_grad():
        noisy = SRC.clone(); noisy[1, 4:] = torch.tensor([18, 19])
        m = padding_mask(SRC, PAD)
        mem, mem2 = model.encode(SRC, m), model.encode(noisy, m)
        torch.testing.assert_close(mem2[1, :4], mem[1, :4], atol=1e-6, rtol=0)
        torch.testing.assert_close(run(model, noisy, TGT, m), run(model, SRC, TGT, m), atol=1e-6, rtol=0)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_teacher_forcing_equals_step_by_step_decoding(model, mode):
    getattr(model, mode)()
    try:
        with torch.no_grad():
            m = padding_mask(SRC, PAD)
            memory = model.encode(SRC, m)
            whole = model.decode(TGT, memory, target_mask(TGT, PAD), m)
            steps = torch.cat([model.decode(TGT[:, :t + 1], memory, target_mask(TGT[:, :t + 1], PAD), m)[:, -1:]
                               for t in range(TGT.shape[1])], 1)
        torch.testing.assert_close(whole, steps, atol=1e-5, rtol=0)
    finally:
        model.eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_an_all_padding_sequence_gives_finite_outputs(dtype):
    torch.manual_seed(0)
    mdl = Transformer(20, 20, d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=64,
                      dropout=0.0).eval().to(dtype)
    src = pad_batch([[3, 4, 5], [PAD]], PAD)
    m = padding_mask(src, PAD)
    with torch.no_grad():
        out, at = mdl(src, TGT, src_mask=m, tgt_mask=target_mask(TGT, PAD), memory_mask=m, need_weights=True)
    assert torch.isfinite(out).all()
    assert (at.encoder[:, 1] == 0).all() and (at.cross[:, 1] == 0).all()   # zero weights: the chosen semantics


def test_pad_batch_pads_with_pad_id():
    b = pad_batch([torch.tensor([5, 6, 7]), [8]], pad_id=2)
    assert b.tolist() == [[5, 6, 7], [8, 2, 2]] and b.dtype == torch.long
