"""Bad input fails loudly at the boundary: a ValueError/TypeError naming the argument, what it got and what it
needs (issue 4's list), across the package's public modules -- never a NaN or a stack trace from inside torch."""
import pytest, torch
from transformer_nb.embeddings import Embeddings, sinusoidal_encoding
from transformer_nb.attention import scaled_dot_product_attention
from transformer_nb.multihead import MultiHeadAttention
from transformer_nb.ffn import PositionwiseFeedForward
from transformer_nb.norms import LayerNorm, SublayerConnection
from transformer_nb.layers import EncoderLayer, DecoderLayer, Decoder
from transformer_nb.transformer import Transformer
from transformer_nb.masking import pad_batch, padding_mask, causal_mask, target_mask

torch.manual_seed(0)
MODEL = Transformer(11, 13, d_model=16, num_heads=4, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                    dropout=0.0, max_len=8).eval()
SRC = torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0]])
TGT = torch.tensor([[1, 2, 3], [4, 5, 0]])
X = torch.randn(2, 3, 16)

CASES = {
    # d_model not divisible by num_heads (torch's wording first)
    "mha divisible": (lambda: MultiHeadAttention(10, 3), ValueError, ["embed_dim must be divisible by num_heads", "10", "3"]),
    "model divisible": (lambda: Transformer(5, 5, d_model=10, num_heads=3), ValueError, ["embed_dim must be divisible by num_heads"]),
    # odd d_model for sinusoidal positions
    "odd d_model": (lambda: sinusoidal_encoding(10, 7), ValueError, ["d_model must be even", "7"]),
    "odd d_model model": (lambda: Transformer(5, 5, d_model=9, num_heads=1), ValueError, ["d_model must be even", "9"]),
    # sequence longer than the position table
    "too long src": (lambda: MODEL(torch.ones(1, 9, dtype=torch.long), TGT[:1]), ValueError, ["sequence length 9", "exceeds max_len 8"]),
    "too long tgt": (lambda: MODEL(SRC, torch.ones(2, 9, dtype=torch.long)), ValueError, ["exceeds max_len 8"]),
    # token ids: not integers, negative, >= vocab
    "float ids": (lambda: MODEL(SRC.float(), TGT), TypeError, ["src", "integer token ids", "float32"]),
    "negative ids": (lambda: MODEL(SRC - 3, TGT), ValueError, ["[0, vocab_size=11)", "got -3"]),
    "ids too large": (lambda: MODEL(SRC, TGT + 10), ValueError, ["[0, vocab_size=13)", "got 15"]),
    # masks: not broadcasting, not boolean
    "mask shape": (lambda: MODEL(SRC, TGT, src_mask=torch.ones(3, 1, 1, 4, dtype=torch.bool)), ValueError, ["does not broadcast", "(3, 1, 1, 4)"]),
    "mask dtype": (lambda: MODEL(SRC, TGT, src_mask=padding_mask(SRC, 0).float()), TypeError, ["dtype torch.bool", "float32"]),
    "tgt mask dtype": (lambda: MODEL(SRC, TGT, tgt_mask=target_mask(TGT, 0).long()), TypeError, ["dtype torch.bool"]),
    "attention mask dtype": (lambda: scaled_dot_product_attention(X, X, X, mask=torch.ones(3, 3)), TypeError, ["mask", "dtype torch.bool"]),
    # source and target batches of different sizes
    "batch mismatch": (lambda: MODEL(SRC, TGT[:1]), ValueError, ["same batch size", "2", "1"]),
    "decode batch mismatch": (lambda: MODEL.decode(TGT[:1], MODEL.encode(SRC)), ValueError, ["batch", "1", "2"]),
    # last dimension not d_model
    "mha last dim": (lambda: MultiHeadAttention(16, 4)(torch.randn(2, 3, 8), X, X), ValueError, ["d_model=16", "(2, 3, 8)"]),
    "ffn last dim": (lambda: PositionwiseFeedForward(16, 32)(torch.randn(2, 3, 8)), ValueError, ["d_model=16"]),
    "norm last dim": (lambda: LayerNorm(16)(torch.randn(2, 3, 8)), ValueError, ["16", "(2, 3, 8)"]),
    "encoder layer last dim": (lambda: EncoderLayer(16, 4, 32)(torch.randn(2, 3, 8)), ValueError, ["d_model=16"]),
    "decoder memory last dim": (lambda: DecoderLayer(16, 4, 32)(X, torch.randn(2, 5, 8)), ValueError, ["memory", "d_model=16"]),
    # an empty sequence
    "empty src": (lambda: MODEL(torch.zeros(2, 0, dtype=torch.long), TGT), ValueError, ["at least one position"]),
    "empty tgt": (lambda: MODEL(SRC, torch.zeros(2, 0, dtype=torch.long)), ValueError, ["at least one position"]),
    "empty batch list": (lambda: pad_batch([], 0), ValueError, ["at least one sequence"]),
    "empty sequence in batch": (lambda: pad_batch([[1, 2], []], 0), ValueError, ["seqs[1]", "non-empty"]),
    # dropout outside [0, 1)
    "dropout 1": (lambda: Transformer(5, 5, d_model=16, num_heads=4, dropout=1.0), ValueError, ["dropout must be in [0, 1)", "1.0"]),
    "dropout negative": (lambda: MultiHeadAttention(16, 4, dropout=-0.1), ValueError, ["dropout must be in [0, 1)"]),
    "ffn dropout": (lambda: PositionwiseFeedForward(16, 32, dropout=2), ValueError, ["dropout must be in [0, 1)"]),
    "sublayer dropout": (lambda: SublayerConnection(16, dropout=1.5), ValueError, ["dropout must be in [0, 1)"]),
    # num_heads or layers <= 0
    "zero heads": (lambda: MultiHeadAttention(16, 0), ValueError, ["num_heads must be >= 1", "0"]),
    "zero encoder layers": (lambda: Transformer(5, 5, d_model=16, num_heads=4, num_encoder_layers=0), ValueError, ["num_layers must be >= 1", "0"]),
    "negative decoder layers": (lambda: Decoder(16, 4, 32, num_layers=-1), ValueError, ["num_layers must be >= 1"]),
    "float heads": (lambda: MultiHeadAttention(16, 4.0), TypeError, ["num_heads must be an int", "float"]),
    # misc
    "causal T": (lambda: causal_mask(0), ValueError, ["T must be >= 1"]),
    "positions kind": (lambda: Embeddings(10, 16, positions="rope"), ValueError, ['"sinusoidal" or "learned"', "rope"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_a_clear_error(name):
    call, err, words = CASES[name]
    with pytest.raises((ValueError, TypeError)) as e:
        call()
    assert e.type is err, f"{name}: expected {err.__name__}, got {e.type.__name__}: {e.value}"
    for w in words:
        assert w in str(e.value), f"{name}: {w!r} not in the message {str(e.value)!r}"


def test_no_nan_from_an_all_padding_sequence():
    "A sequence that is entirely padding gives finite outputs (fully masked rows attend to nothing and output 0)."
    src = pad_batch([[1, 2, 3], [0]], 0)
    m = padding_mask(src, 0)
    out = MODEL(src, TGT, src_mask=m, tgt_mask=target_mask(TGT, 0), memory_mask=m)
    assert torch.isfinite(out).all()
