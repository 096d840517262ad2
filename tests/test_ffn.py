"Tests of transformer_nb.ffn: the same numbers as torch.nn, position-wise behaviour, clear errors."
import pytest
import torch
from torch import nn

from transformer_nb.ffn import PositionwiseFeedForward

B, T, D, F = 2, 5, 24, 96


def _x(seed=0):
    return torch.randn(B, T, D, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_matches_torch_encoder_layer(activation):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, nhead=4, dim_feedforward=F, activation=activation, batch_first=True).eval()
    ffn = PositionwiseFeedForward(D, F, activation=activation).eval()
    ffn.load_state_dict({k: v for k, v in layer.state_dict().items() if k.startswith(("linear1.", "linear2."))})
    x = _x()
    expected = layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))
    torch.testing.assert_close(ffn(x), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("activation,act", [("relu", nn.ReLU()), ("gelu", nn.GELU())])
def test_matches_sequential(activation, act):
    torch.manual_seed(1)
    ffn = PositionwiseFeedForward(D, F, activation=activation).eval()
    seq = nn.Sequential(nn.Linear(D, F), act, nn.Linear(F, D))
    seq[0].load_state_dict(ffn.linear1.state_dict()); seq[2].load_state_dict(ffn.linear2.state_dict())
    x = _x(1)
    torch.testing.assert_close(ffn(x), seq(x), atol=1e-6, rtol=0)


def test_relu_and_gelu_differ():
    torch.manual_seed(0)
    relu = PositionwiseFeedForward(D, F, activation="relu").eval()
    gelu = PositionwiseFeedForward(D, F, activation="gelu").eval()
    gelu.load_state_dict(relu.state_dict())
    x = _x()
    assert (relu(x) - gelu(x)).abs().max() > 1e-3


def test_shape_and_parameters():
    ffn = PositionwiseFeedForward(D, F)
    assert ffn(_x()).shape == (B, T, D)
    assert sorted(k for k, _ in ffn.named_parameters()) == ["linear1.bias", "linear1.weight",
                                                           "linear2.bias", "linear2.weight"]
    assert ffn.linear1.weight.shape == (F, D) and ffn.linear2.weight.shape == (D, F)
    assert PositionwiseFeedForward(D).d_ff == 2048


def test_position_wise():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(D, F).eval()
    x = _x()
    y = ffn(x)
    perm = torch.tensor([3, 0, 4, 1, 2])
    torch.testing.assert_close(ffn(x[:, perm]), y[:, perm], atol=1e-6, rtol=0)
    x2 = x.clone(); x2[:, 2] += 1.0
    moved = (ffn(x2) - y).abs().amax(-1) > 0          # (B, T)
    assert moved[:, 2].all() and not moved[:, [0, 1, 3, 4]].any()


def test_dropout_only_in_training():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(D, F, dropout=0.5)
    x = _x()
    assert not torch.equal(ffn.train()(x), ffn.eval()(x))
    torch.testing.assert_close(ffn.eval()(x), ffn.eval()(x))


@pytest.mark.parametrize("kwargs,exc,msg", [
    (dict(activation="tanh"), ValueError, 'activation should be "relu" or "gelu"'),
    (dict(activation=nn.ReLU()), ValueError, 'activation should be "relu" or "gelu"'),
    (dict(d_ff=0), ValueError, "d_ff must be >= 1"),
    (dict(d_ff=2.5), TypeError, "d_ff must be an int"),
    (dict(dropout=1.0), ValueError, "dropout must be in [0, 1)"),
    (dict(d_model=0), ValueError, "d_model must be >= 1"),
    # built a module with biases, silently (review of chapters 4-7, item 10)
    (dict(bias="no"), TypeError, "bias must be a bool, got str 'no'"),
])
def test_bad_arguments(kwargs, exc, msg):
    args = dict(d_model=D, d_ff=F) | kwargs
    with pytest.raises(exc, match=None) as info:
        PositionwiseFeedForward(**args)
    assert msg in str(info.value)


def test_bad_input():
    ffn = PositionwiseFeedForward(D, F)
    with pytest.raises(ValueError, match="last dimension d_model=24"):
        ffn(torch.randn(B, T, D + 1))
    with pytest.raises(TypeError, match="floating dtype"):
        ffn(torch.ones(B, T, D, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.Tensor"):
        ffn([[0.0] * D])
