"Embeddings and positions: the paper's formulas, √d_model scaling, offsets for step-by-step decoding, clear errors."
import math

import pytest
import torch

from transformer_nb.embeddings import (
    Embeddings,
    LearnedPositions,
    SinusoidalPositions,
    TokenEmbedding,
    sinusoidal_encoding,
)


def test_sinusoidal_matches_the_paper_formula():
    pe = sinusoidal_encoding(50, 16)
    for pos in (0, 1, 7, 49):
        for i in range(8):
            w = 1 / 10000 ** (2 * i / 16)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(pos * w), abs=1e-5)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos * w), abs=1e-5)


def test_position_dot_products_depend_only_on_distance():
    pe = sinusoidal_encoding(64, 32)
    dots = pe @ pe.T
    for k in range(0, 40, 7):
        d = torch.diagonal(dots, offset=k)
        torch.testing.assert_close(d, d[:1].expand_as(d), atol=1e-3, rtol=0)


def test_token_embedding_scaled_by_sqrt_d_model():
    torch.manual_seed(0)
    emb = TokenEmbedding(100, 64)
    ids = torch.tensor([[3, 4]])
    torch.testing.assert_close(emb(ids), emb.embed.weight[ids] * 8.0)
    rms = emb(torch.arange(100)[None]).pow(2).mean().sqrt().item()
    assert 0.9 < rms < 1.1  # unit-size entries after scaling


@pytest.mark.parametrize("P", [SinusoidalPositions(8, 20), LearnedPositions(8, 20)])
def test_offset_gives_the_same_positions_as_the_whole_sequence(P):
    x = torch.randn(2, 5, 8)
    whole = P(x)
    steps = torch.cat([P(x[:, t:t + 1], offset=t) for t in range(5)], 1)
    torch.testing.assert_close(whole, steps)


def test_embeddings_module_and_padding_idx():
    torch.manual_seed(0)
    emb = Embeddings(50, 16, max_len=10, dropout=0.0, positions="learned", padding_idx=0).eval()
    out = emb(torch.tensor([[0, 3, 3]]))
    assert out.shape == (1, 3, 16)
    assert (emb.tokens.embed.weight[0] == 0).all()


@pytest.mark.parametrize("call, err, words", [
    (lambda: sinusoidal_encoding(10, 7), ValueError, "d_model must be even"),
    (lambda: SinusoidalPositions(8, 4)(torch.zeros(1, 5, 8)), ValueError, "sequence length 5 (from offset 0) exceeds max_len 4"),
    (lambda: LearnedPositions(8, 4)(torch.zeros(1, 3, 8), offset=2), ValueError, "exceeds max_len 4"),
    (lambda: SinusoidalPositions(8, 4)(torch.zeros(1, 3, 6)), ValueError, "last dimension d_model=8"),
    (lambda: SinusoidalPositions(8, 4)(torch.zeros(1, 0, 8)), ValueError, "at least one position"),
    (lambda: TokenEmbedding(10, 4)(torch.tensor([[1, 10]])), ValueError, "[0, vocab_size=10), got 10"),
    (lambda: TokenEmbedding(10, 4)(torch.tensor([[-1, 2]])), ValueError, "got -1"),
    (lambda: TokenEmbedding(10, 4)(torch.tensor([[1.0, 2.0]])), TypeError, "integer token ids"),
    (lambda: TokenEmbedding(10, 4)(torch.zeros(1, 0, dtype=torch.long)), ValueError, "at least one position"),
    (lambda: TokenEmbedding(0, 4), ValueError, "vocab_size must be >= 1"),
    (lambda: Embeddings(10, 4, dropout=1.5), ValueError, "dropout must be in [0, 1)"),
    (lambda: Embeddings(10, 4, positions="rotary"), ValueError, 'positions must be "sinusoidal" or "learned"'),
    (lambda: Embeddings(10, 4)(torch.tensor([1, 2])), ValueError, "ids must have 2 dimensions"),
])
def test_bad_input_gets_a_clear_error(call, err, words):
    with pytest.raises(err) as e:
        call()
    assert words in str(e.value)


@pytest.mark.parametrize("kind", ["Transformer", "GPT"])
def test_a_model_built_on_the_meta_device_gets_its_position_table_back(kind):
    """Deferred initialisation, as a sharded model is built: on the meta device, `to_empty` (its buffers hold
    whatever the memory held: NaN here), then the weights loaded. The sinusoidal table is not in the state dict:
    loading computes it again, and so does `reset_parameters`, which torch's idiom calls after `to_empty`"""
    from conftest import small_gpt, small_transformer
    make = (lambda: small_gpt(positions="sinusoidal").eval()) if kind == "GPT" else small_transformer
    ref, ids = make(), torch.randint(0, 14, (2, 7))
    run = (lambda m: m(ids)) if kind == "GPT" else (lambda m: m(ids, ids))
    with torch.device("meta"): model = make()
    model = model.to_empty(device="cpu")
    tables = [m for m in model.modules() if isinstance(m, SinusoidalPositions)]
    assert tables
    for t in tables: t.pe.fill_(math.nan)
    model.load_state_dict(ref.state_dict())
    torch.testing.assert_close(run(model), run(ref), atol=0, rtol=0)
    for t in tables:
        t.pe.fill_(math.nan); t.reset_parameters()
        assert torch.equal(t.pe, sinusoidal_encoding(t.max_len, t.d_model))
