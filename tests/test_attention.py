"Scaled dot-product attention: the numbers of F.scaled_dot_product_attention, exact zeros for masked keys, no NaN."
import math

import pytest
import torch
import torch.nn.functional as F

from transformer_nb.attention import scaled_dot_product_attention as sdpa
from transformer_nb.masking import causal_mask


def qkv(B=2, H=3, T=5, S=7, d_k=8, d_v=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, d_k, generator=g), torch.randn(B, H, S, d_k, generator=g),
            torch.randn(B, H, S, d_v, generator=g))


@pytest.mark.parametrize("mask_shape", [None, (2, 1, 1, 7), (1, 1, 5, 7), (2, 3, 5, 7), (5, 7)])
def test_equals_torch_sdpa(mask_shape):
    q, k, v = qkv()
    mask = None
    if mask_shape is not None:
        mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(1)) > 0.4
        mask[..., 0] = True  # every query keeps a key: torch's function gives NaN otherwise
    ours, w = sdpa(q, k, v, mask=mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 5))


def test_causal_equals_torch_and_gradients_agree():
    q, k, v = (t.requires_grad_() for t in qkv(S=5))
    ours, _ = sdpa(q, k, v, mask=causal_mask(5))
    g_ours = torch.autograd.grad(ours.square().sum(), (q, k, v))
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    g_theirs = torch.autograd.grad(theirs.square().sum(), (q, k, v))
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    for a, b in zip(g_ours, g_theirs): torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_masked_keys_get_exactly_zero_weight_and_do_not_leak():
    q, k, v = qkv()
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool); mask[1, ..., 4:] = False
    out, w = sdpa(q, k, v, mask=mask)
    assert (w[1, ..., 4:] == 0).all()
    k2, v2 = k.clone(), v.clone(); k2[1, :, 4:] = 1e3; v2[1, :, 4:] = -1e3
    out2, _ = sdpa(q, k2, v2, mask=mask)
    torch.testing.assert_close(out, out2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fully_masked_rows_are_zero_and_finite(dtype):
    q, k, v = (t.to(dtype) for t in qkv())
    mask = torch.ones(2, 1, 5, 7, dtype=torch.bool); mask[0, :, 2] = False; mask[1] = False
    out, w = sdpa(q, k, v, mask=mask)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (out[0, :, 2] == 0).all() and (w[0, :, 2] == 0).all() and (out[1] == 0).all()
    keep = mask.expand(2, 3, 5, 7).any(-1)
    torch.testing.assert_close(w.float().sum(-1)[keep], torch.ones(int(keep.sum())), atol=1e-2, rtol=0)


def test_scale_is_sqrt_dk():
    q = torch.tensor([[[1.0, 1.0, 1.0, 1.0]]]); k = torch.tensor([[[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]])
    _, w = sdpa(q, k, torch.zeros(1, 2, 3))
    expected = torch.softmax(torch.tensor([4.0 / math.sqrt(4), 0.0]), -1)
    torch.testing.assert_close(w[0, 0], expected)


def test_dropout_only_in_output_and_weights_are_pre_dropout():
    q, k, v = qkv()
    torch.manual_seed(0)
    out_d, w_d = sdpa(q, k, v, dropout_p=0.5)
    out, w = sdpa(q, k, v)
    torch.testing.assert_close(w_d, w)
    assert not torch.allclose(out_d, out)


@pytest.mark.parametrize("call, err, words", [
    (lambda q, k, v: sdpa(q, k[..., :4], v), ValueError, "same last dimension d_k"),
    (lambda q, k, v: sdpa(q, k, v[..., :3, :]), ValueError, "same number of positions S"),
    (lambda q, k, v: sdpa(q, k, v, mask=torch.ones(2, 1, 1, 7)), TypeError, "dtype torch.bool"),
    (lambda q, k, v: sdpa(q, k, v, mask=torch.ones(3, 1, 5, 7, dtype=torch.bool)), ValueError, "does not broadcast"),
    (lambda q, k, v: sdpa(q, k, v, mask=[[True]]), TypeError, "mask must be a boolean torch.Tensor"),
    (lambda q, k, v: sdpa(q.long(), k, v), TypeError, "q must have a floating dtype"),
    (lambda q, k, v: sdpa(q, k, v, dropout_p=1.0), ValueError, "dropout_p must be in [0, 1)"),
    (lambda q, k, v: sdpa(q[..., :0, :], k, v), ValueError, "q must hold at least one position"),
    (lambda q, k, v: sdpa(q, k[..., :0, :], v[..., :0, :]), ValueError, "k must hold at least one position"),
    (lambda q, k, v: sdpa(q[0, 0, 0], k, v), ValueError, "q must have shape (..., length, dim)"),
])
def test_bad_input_gets_a_clear_error(call, err, words):
    q, k, v = qkv()
    with pytest.raises(err, match=None) as e:
        call(q, k, v)
    assert words in str(e.value)
