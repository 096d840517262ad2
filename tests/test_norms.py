"Tests of transformer_nb.norms: LayerNorm equal to nn.LayerNorm, the two residual placements, clear errors."
import pytest
import torch
from torch import nn

from transformer_nb.norms import LayerNorm, SublayerConnection


def _gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("fused", [False, True], ids=["formula", "fused"])
@pytest.mark.parametrize("shape", [(3, 2), (2, 5, 24), (4, 7, 512), (1, 1, 1, 8)])
def test_layernorm_matches_torch_forward_and_gradients(shape, fused):
    d = shape[-1]
    g = _gen(0)
    theirs = nn.LayerNorm(d)
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(d, generator=g)); theirs.bias.copy_(torch.randn(d, generator=g))
    ours = LayerNorm(d, fused=fused)                          # the formula of chapter 5, or F.layer_norm
    ours.load_state_dict(theirs.state_dict())                 # names match nn.LayerNorm
    x = 2.0 + 5.0 * torch.randn(shape, generator=g)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    up = torch.randn(shape, generator=g)
    y1, y2 = ours(x1), theirs(x2)
    torch.testing.assert_close(y1, y2, atol=1e-5, rtol=0)
    (y1 * up).sum().backward(); (y2 * up).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.bias.grad, theirs.bias.grad, atol=1e-5, rtol=1e-5)


def test_layernorm_state_dict_both_ways():
    ours = LayerNorm(6)
    assert set(ours.state_dict()) == {"weight", "bias"}
    with torch.no_grad(): ours.weight.fill_(2.0); ours.bias.fill_(-1.0)
    theirs = nn.LayerNorm(6)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(3, 6, generator=_gen(1))
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("eps", [1e-5, 1e-3, 1e-1])
def test_layernorm_eps_matches_torch(eps):
    x = 1e-2 * torch.randn(4, 16, generator=_gen(2))           # small spread: eps matters
    torch.testing.assert_close(LayerNorm(16, eps=eps, fused=False)(x), nn.LayerNorm(16, eps=eps)(x), atol=1e-5, rtol=0)


def test_layernorm_fused_flag():
    "The default is torch's fused kernel; fused=False runs the formula; anything but a bool is refused."
    assert LayerNorm(8).fused and not LayerNorm(8, fused=False).fused
    with pytest.raises(TypeError, match="fused must be a bool, got str 'yes'"): LayerNorm(8, fused="yes")


def test_layernorm_initial_output_is_standardised():
    y = LayerNorm(32, fused=False)(3.0 + 10.0 * torch.randn(2, 5, 32, generator=_gen(3)))
    torch.testing.assert_close(y.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-4, rtol=0)


def _tutorial_layer_norm(x, eps=1e-6):
    "unbiased std, eps outside the square root (the Annotated Transformer)"
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps)


@pytest.mark.parametrize("d,least", [(2, 0.25), (8, 0.04), (512, 5e-4)])
def test_unbiased_std_variant_is_measurably_different(d, least):
    x = torch.randn(1000, d, generator=_gen(4))
    with torch.no_grad():
        gap = (_tutorial_layer_norm(x) - LayerNorm(d)(x)).abs().mean()
    assert gap > least


def test_eps_outside_the_root_differs_on_small_spread():
    x = 1e-3 * torch.randn(3, 512, generator=_gen(5))
    with torch.no_grad():
        ours, tutorial = LayerNorm(512)(x).std(-1), _tutorial_layer_norm(x).std(-1)
    assert (ours < 0.5).all() and ((tutorial - 1).abs() < 1e-2).all()


def _ffn(d, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 3 * d), nn.ReLU(), nn.Linear(3 * d, d))


def _randomise(norm, seed):
    g = _gen(seed)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(norm.weight.shape, generator=g))
        norm.bias.copy_(torch.randn(norm.bias.shape, generator=g))


def test_sublayer_pre_ln_formula():
    d = 24
    sub = SublayerConnection(d, dropout=0.1).eval()
    assert sub.norm_first is True and isinstance(sub.norm, LayerNorm) and isinstance(sub.dropout, nn.Dropout)
    _randomise(sub.norm, 6)
    f, x = _ffn(d), torch.randn(2, 5, d, generator=_gen(7))
    expected = x + f(nn.functional.layer_norm(x, (d,), sub.norm.weight, sub.norm.bias, eps=1e-5))
    torch.testing.assert_close(sub(x, f), expected, atol=1e-5, rtol=0)


def test_sublayer_post_ln_formula():
    d = 24
    sub = SublayerConnection(d, dropout=0.1, norm_first=False).eval()
    _randomise(sub.norm, 8)
    f, x = _ffn(d), torch.randn(2, 5, d, generator=_gen(9))
    expected = nn.functional.layer_norm(x + f(x), (d,), sub.norm.weight, sub.norm.bias, eps=1e-5)
    torch.testing.assert_close(sub(x, f), expected, atol=1e-5, rtol=0)


def test_pre_and_post_differ_and_identity_path():
    d = 16
    x = torch.randn(2, 3, d, generator=_gen(10))
    pre, post = SublayerConnection(d).eval(), SublayerConnection(d, norm_first=False).eval()
    zero = lambda h: torch.zeros_like(h)
    assert torch.equal(pre(x, zero), x)                        # pre-LN: the input passes unchanged
    torch.testing.assert_close(post(x, zero), nn.functional.layer_norm(x, (d,)), atol=1e-5, rtol=0)
    f = _ffn(d)
    assert (pre(x, f) - post(x, f)).abs().max() > 0.1


def test_dropout_applies_to_sublayer_output_in_training():
    d = 16
    x = torch.randn(2, 3, d, generator=_gen(11))
    sub = SublayerConnection(d, dropout=0.5).train()
    torch.manual_seed(0)
    out = sub(x, lambda h: torch.ones_like(h))
    added = out - x                                            # dropout(ones): each entry 0 or 2
    zero, two = added.abs() < 1e-5, (added - 2).abs() < 1e-5
    assert (zero | two).all() and zero.any() and two.any()


@pytest.mark.parametrize("norm_first", [True, False])
def test_matches_torch_encoder_layer(norm_first):
    d = 24
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=3 * d, batch_first=True,
                                       norm_first=norm_first).eval()
    _randomise(layer.norm1, 12); _randomise(layer.norm2, 13)
    s1, s2 = SublayerConnection(d, norm_first=norm_first).eval(), SublayerConnection(d, norm_first=norm_first).eval()
    s1.norm.load_state_dict(layer.norm1.state_dict()); s2.norm.load_state_dict(layer.norm2.state_dict())
    attn = lambda h: layer.self_attn(h, h, h, need_weights=False)[0]
    ffn = lambda h: layer.linear2(layer.activation(layer.linear1(h)))
    x = torch.randn(2, 5, d, generator=_gen(14))
    torch.testing.assert_close(s2(s1(x, attn), ffn), layer(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("make,exc,msg", [
    (lambda: LayerNorm(0), ValueError, "d_model must be >= 1"),
    (lambda: LayerNorm(8, eps=0.0), ValueError, "eps must be > 0"),
    (lambda: LayerNorm(8, eps=-1e-5), ValueError, "eps must be > 0"),
    (lambda: LayerNorm(8, eps="1e-5"), TypeError, "eps must be a number > 0, got str"),
    (lambda: SublayerConnection(8, norm_first=1), TypeError, "norm_first must be a bool"),
    (lambda: SublayerConnection(8, norm_first="pre"), TypeError, "norm_first must be a bool"),
    (lambda: SublayerConnection(8, dropout=-0.1), ValueError, "dropout must be in [0, 1)"),
    (lambda: SublayerConnection(8.0), TypeError, "d_model must be an int"),
])
def test_bad_arguments(make, exc, msg):
    with pytest.raises(exc) as info:
        make()
    assert msg in str(info.value)


def test_bad_input():
    d = 8
    x = torch.randn(2, 3, d)
    with pytest.raises(ValueError, match="last dimension d_model=8"):
        LayerNorm(d)(torch.randn(2, 3, d + 1))
    with pytest.raises(TypeError, match="floating dtype"):
        LayerNorm(d)(torch.ones(2, 3, d, dtype=torch.long))
    sub = SublayerConnection(d)
    with pytest.raises(TypeError, match="sublayer must be callable"):
        sub(x, "ffn")
    with pytest.raises(ValueError, match="must return the shape of its input"):
        sub(x, lambda h: h[:, :1])                              # (B, 1, d) would broadcast silently
    with pytest.raises(TypeError, match="must return a torch.Tensor"):
        sub(x, lambda h: (h, None))
    with pytest.raises(ValueError, match="last dimension d_model=8"):
        sub(torch.randn(2, 3, 4), lambda h: h)
