"The checkers: each passes the book's implementation, and each classic mistake gets its own hint (one test per mistake)."
import math
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformer_nb.book.grading import *
from transformer_nb.embeddings import TokenEmbedding, Embeddings, sinusoidal_encoding
from transformer_nb.attention import scaled_dot_product_attention
from transformer_nb.multihead import MultiHeadAttention, split_heads, merge_heads
from transformer_nb.ffn import PositionwiseFeedForward
from transformer_nb.norms import LayerNorm, SublayerConnection
from transformer_nb.layers import EncoderLayer, DecoderLayer, Encoder, Decoder
from transformer_nb.transformer import Transformer
from transformer_nb.masking import padding_mask, causal_mask, target_mask

BOOK = [(grade_token_embedding, TokenEmbedding), (grade_positional_encoding, sinusoidal_encoding),
        (grade_embeddings, Embeddings), (grade_attention, scaled_dot_product_attention),
        (grade_split_heads, split_heads), (grade_merge_heads, merge_heads), (grade_multihead, MultiHeadAttention),
        (grade_ffn, PositionwiseFeedForward), (grade_layer_norm, LayerNorm), (grade_sublayer, SublayerConnection),
        (grade_encoder_layer, EncoderLayer), (grade_decoder_layer, DecoderLayer), (grade_encoder, Encoder),
        (grade_decoder, Decoder), (grade_transformer, Transformer),
        (grade_causal_mask, causal_mask), (grade_padding_mask, padding_mask), (grade_target_mask, target_mask)]


@pytest.mark.parametrize("check,answer", BOOK, ids=[c.__name__ for c, _ in BOOK])
def test_book_implementation_passes(check, answer):
    v = check(answer)
    assert v and isinstance(v, Verdict) and repr(v).startswith("✓"), v


def fails_with(verdict, *words):
    "The verdict failed, and its message contains every one of `words`"
    assert not verdict, f"passed: {verdict}"
    assert repr(verdict).startswith("✗")
    for w in words: assert w in verdict.message, f"{w!r} not in: {verdict.message}"
    assert "Traceback" not in verdict.message


# ---------------------------------------------------------------- unfilled, errors, plumbing

def stub_fn(q, k, v, mask=None):
    "softmax(QKᵀ/√d_k)V"
    ...

class StubModule(nn.Module):
    def __init__(self, d_model, num_heads):
        "build"
        ...
    def forward(self, query, key, value, mask=None):
        ...

@pytest.mark.parametrize("check", [c for c, _ in BOOK], ids=[c.__name__ for c, _ in BOOK])
def test_unfilled_function_or_class_is_told_to_fill_in(check):
    fails_with(check(StubModule if "Module" in check.__doc__ or check.__name__ not in (
        "grade_positional_encoding", "grade_attention", "grade_split_heads", "grade_merge_heads", "grade_causal_mask",
        "grade_padding_mask", "grade_target_mask")
        else stub_fn), "fill in the TODO")

def test_not_implemented_error_is_told_to_fill_in():
    def f(q, k, v, mask=None): raise NotImplementedError
    fails_with(grade_attention(f), "NotImplementedError", "fill in the TODO")

def test_returning_none_is_told_to_return():
    def f(q, k, v, mask=None): w = (q @ k.transpose(-2, -1)).softmax(-1)  # noqa: F841
    fails_with(grade_attention(f), "returned None", "return")

def test_exception_becomes_hint_with_the_line():
    def f(q, k, v, mask=None):
        scores = q @ k.transpose(-1, -3)
        return scores @ v, scores
    fails_with(grade_attention(f), "RuntimeError", "scores = q @ k.transpose(-1, -3)")

def test_returning_only_the_output():
    fails_with(grade_attention(lambda q, k, v, mask=None: scaled_dot_product_attention(q, k, v, mask)[0]),
               "must return 2 things")

def test_missing_super_init():
    class M(nn.Module):
        def __init__(self, d_model, num_heads): self.d = d_model
        def forward(self, query, key, value, mask=None): return query
    fails_with(grade_multihead(M), "super().__init__()")

def test_parameters_with_other_names():
    class Fused(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__(); self.qkv = nn.Linear(d_model, 3 * d_model); self.out = nn.Linear(d_model, d_model)
        def forward(self, query, key, value, mask=None): return query, None
    fails_with(grade_multihead(Fused), "do not match the chapter's", "W_q")

def test_random_state_is_untouched():
    torch.manual_seed(1); a = torch.rand(4)
    torch.manual_seed(1); grade_multihead(MultiHeadAttention); b = torch.rand(4)
    assert torch.equal(a, b)


# ---------------------------------------------------------------- attention

def attention(scale=lambda d: math.sqrt(d), dim=-1, fill="min", invert=False, zero_rows=True, times_k=False):
    "A scaled dot-product attention with one configurable mistake"
    def f(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / scale(q.shape[-1])
        if mask is not None:
            value = torch.finfo(scores.dtype).min if fill == "min" else fill
            scores = scores * mask if fill == "multiply" else scores.masked_fill(mask if invert else ~mask, value)
        w = scores.softmax(dim)
        if mask is not None and zero_rows: w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return w @ (k if times_k else v), w
    return f

def test_attention_without_scale(): fails_with(grade_attention(attention(scale=lambda d: 1.0)), "not scaled", "√d_k")
def test_attention_divided_by_d_k(): fails_with(grade_attention(attention(scale=lambda d: d)), "divided by d_k")
def test_attention_precedence_bug(): fails_with(grade_attention(attention(scale=lambda d: d ** 1/2)), "operator precedence")
def test_attention_multiplied(): fails_with(grade_attention(attention(scale=lambda d: d ** -0.5)), "multiplied by √d_k")
def test_attention_other_scale(): fails_with(grade_attention(attention(scale=lambda d: 3.0)), "c = 3.00", "√d_k = 2.83")
def test_attention_softmax_wrong_axis(): fails_with(grade_attention(attention(dim=-2)), "wrong axis", "dim=-1")
def test_attention_inverted_mask(): fails_with(grade_attention(attention(invert=True)), "inverted", "may attend")
def test_attention_fill_zero(): fails_with(grade_attention(attention(fill=0.0)), "not exactly 0", "finfo")
def test_attention_fill_too_weak(): fails_with(grade_attention(attention(fill=-20.0)), "not exactly 0", "not enough")
def test_attention_mask_multiplied(): fails_with(grade_attention(attention(fill="multiply")), "not exactly 0")
def test_attention_minus_inf_nan(): fails_with(grade_attention(attention(fill=float("-inf"), zero_rows=False)), "NaN", "-inf")
def test_attention_rows_not_zeroed(): fails_with(grade_attention(attention(zero_rows=False)), "all-zero weights")

def test_attention_times_k():
    def f(q, k, v, mask=None):
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1)
        return w @ k[..., :v.shape[-1]], w
    fails_with(grade_attention(f), "weights are right but the output is not weights @ v")

def test_attention_weights_transposed():
    def f(q, k, v, mask=None):
        out, w = scaled_dot_product_attention(q, k, v, mask)
        return out, w.transpose(-2, -1)
    fails_with(grade_attention(f), "keys before queries")


# ---------------------------------------------------------------- heads and multi-head attention

def test_split_heads_view_mixes_positions():
    fails_with(grade_split_heads(lambda x, h: x.view(x.shape[0], h, x.shape[1], -1)), "mixes positions")

def test_split_heads_missing_transpose():
    fails_with(grade_split_heads(lambda x, h: x.view(x.shape[0], x.shape[1], h, -1)), "transpose(1, 2)")

def test_merge_heads_view_mixes_positions():
    fails_with(grade_merge_heads(lambda x: x.reshape(x.shape[0], x.shape[2], -1)), "mixes positions")

def test_merge_heads_non_contiguous_view():
    fails_with(grade_merge_heads(lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)), "RuntimeError", ".reshape")

class MHA(MultiHeadAttention):
    "The book's module with one configurable mistake"
    split, merge, scale, w_o, use_mask = "ok", "ok", None, True, True
    def forward(self, query, key, value, mask=None):
        B, T, d = query.shape; S, H, dk = key.shape[1], self.num_heads, self.d_k
        sp = lambda t, L: t.view(B, H, L, dk) if self.split == "view" else t.view(B, L, H, dk).transpose(1, 2)
        q, k, v = sp(self.W_q(query), T), sp(self.W_k(key), S), sp(self.W_v(value), S)
        w = (q @ k.transpose(-2, -1) / (self.scale or math.sqrt(dk)))
        if mask is not None and self.use_mask: w = w.masked_fill(~mask, torch.finfo(w.dtype).min)
        w = w.softmax(-1)
        o = w @ v
        o = o.reshape(B, T, d) if self.merge == "view" else o.transpose(1, 2).reshape(B, T, d)
        return (self.W_o(o) if self.w_o else o), w

def mha(**kw): return type("MyMHA", (MHA,), kw)

def test_multihead_reference_variant_passes(): assert grade_multihead(mha())
def test_multihead_split_mixes_positions(): fails_with(grade_multihead(mha(split="view")), "split mixes positions")
def test_multihead_merge_mixes_positions(): fails_with(grade_multihead(mha(merge="view")), "merge mixes positions")
def test_multihead_scaled_by_d_model(): fails_with(grade_multihead(mha(scale=math.sqrt(24))), "√d_model", "√d_k")
def test_multihead_missing_w_o(): fails_with(grade_multihead(mha(w_o=False)), "W_o")
def test_multihead_mask_ignored(): fails_with(grade_multihead(mha(use_mask=False)), "mask is ignored")


# ---------------------------------------------------------------- embeddings and positions

class Tok(TokenEmbedding):
    factor = None
    def forward(self, ids): return self.embed(ids) * (self.factor(self.d_model) if self.factor else 1.0)

def test_embedding_missing_sqrt_d_model(): fails_with(grade_token_embedding(Tok), "not scaled", "√d_model")
def test_embedding_times_d_model():
    fails_with(grade_token_embedding(type("T2", (Tok,), {"factor": staticmethod(lambda d: d)})), "multiplied by d_model")

def test_embedding_default_init():
    class T3(TokenEmbedding):
        def __init__(self, vocab_size, d_model):
            super().__init__(vocab_size, d_model); nn.init.normal_(self.embed.weight)
    fails_with(grade_token_embedding(T3), "std 1/√d_model")

def pe(kind):
    def f(max_len, d_model):
        pos = torch.arange(max_len, dtype=torch.float32)[:, None] + (1 if kind == "start1" else 0)
        i = torch.arange(d_model // 2, dtype=torch.float32) if kind == "i" else torch.arange(0, d_model, 2).float()
        ang = pos * 10000 ** (-i / d_model)
        if kind == "halves": return torch.cat([ang.sin(), ang.cos()], -1)
        out = torch.zeros(max_len, d_model)
        out[:, 0::2], out[:, 1::2] = (ang.cos(), ang.sin()) if kind == "swapped" else (ang.sin(), ang.cos())
        return out.T if kind == "transposed" else out
    return f

def test_positions_reference_variant_passes(): assert grade_positional_encoding(pe("ok"))
def test_positions_sin_cos_swapped(): fails_with(grade_positional_encoding(pe("swapped")), "sin and cos are swapped")
def test_positions_halves(): fails_with(grade_positional_encoding(pe("halves")), "interleave")
def test_positions_i_not_2i(): fails_with(grade_positional_encoding(pe("i")), "2i")
def test_positions_start_at_one(): fails_with(grade_positional_encoding(pe("start1")), "start at 0")
def test_positions_transposed(): fails_with(grade_positional_encoding(pe("transposed")), "rows are positions")

def test_embeddings_without_positions():
    class E(Embeddings):
        def forward(self, ids, offset=0): return self.dropout(self.tokens(ids))
    fails_with(grade_embeddings(E), "positions are missing")


# ---------------------------------------------------------------- feed-forward

def test_ffn_without_activation():
    class M(PositionwiseFeedForward):
        def forward(self, x): return self.linear2(self.dropout(self.linear1(x)))
    fails_with(grade_ffn(M), "no activation")

def test_ffn_gelu_ignored():
    class M(PositionwiseFeedForward):
        def forward(self, x): return self.linear2(self.dropout(torch.relu(self.linear1(x))))
    fails_with(grade_ffn(M), '"gelu" is ignored')

def test_ffn_without_dropout():
    class M(PositionwiseFeedForward):
        def forward(self, x): return self.linear2(self.act(self.linear1(x)))
    fails_with(grade_ffn(M), "nn.Dropout")


# ---------------------------------------------------------------- layer norm and residuals

def layer_norm(norm):
    class M(LayerNorm):
        def forward(self, x): return norm(x, self.eps) * self.weight + self.bias
    return M

def test_layer_norm_unbiased_variance():
    fails_with(grade_layer_norm(layer_norm(lambda x, e: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + e))),
               "unbiased variance")

def test_layer_norm_eps_outside_sqrt():
    fails_with(grade_layer_norm(layer_norm(lambda x, e: (x - x.mean(-1, keepdim=True)) / (x.std(-1, unbiased=False, keepdim=True) + e))),
               "outside the square root")

def test_layer_norm_annotated_transformer():
    fails_with(grade_layer_norm(layer_norm(lambda x, e: (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + e))),
               "unbiased", "outside the square root")

def test_layer_norm_wrong_axis():
    fails_with(grade_layer_norm(layer_norm(lambda x, e: (x - x.mean(0, keepdim=True)) / torch.sqrt(x.var(0, unbiased=False, keepdim=True) + e))),
               "over the batch")

def test_layer_norm_without_weight_and_bias():
    class M(LayerNorm):
        def forward(self, x): return F.layer_norm(x, (self.d_model,), eps=self.eps)
    fails_with(grade_layer_norm(M), "weight (γ)")

class PostAlways(SublayerConnection):
    def forward(self, x, sublayer): return self.norm(x + self.dropout(sublayer(x)))
class PreAlways(SublayerConnection):
    def forward(self, x, sublayer): return x + self.dropout(sublayer(self.norm(x)))

def test_sublayer_post_ln_where_pre_ln_asked(): fails_with(grade_sublayer(PostAlways), "asks for pre-LN", "post-LN")
def test_sublayer_pre_ln_where_post_ln_asked(): fails_with(grade_sublayer(PreAlways), "asks for the paper's post-LN")

def test_sublayer_without_residual():
    class M(SublayerConnection):
        def forward(self, x, sublayer): return self.dropout(sublayer(self.norm(x))) if self.norm_first else self.norm(sublayer(x))
    fails_with(grade_sublayer(M), "residual is missing")

def test_sublayer_dropout_on_the_sum():
    class M(SublayerConnection):
        def forward(self, x, sublayer):
            return self.dropout(x + sublayer(self.norm(x))) if self.norm_first else self.norm(x + self.dropout(sublayer(x)))
    fails_with(grade_sublayer(M), "dropout belongs on the sublayer's output")


# ---------------------------------------------------------------- encoder and decoder

def test_encoder_layer_mask_ignored():
    class M(EncoderLayer):
        def forward(self, x, src_mask=None): return super().forward(x, None)
    fails_with(grade_encoder_layer(M), "src_mask is not used")

def test_encoder_layer_norm_first_ignored():
    class M(EncoderLayer):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.1, norm_first=True):
            super().__init__(d_model, num_heads, d_ff, dropout, norm_first=True)
    fails_with(grade_encoder_layer(M), "norm_first=False is not passed on")

def test_encoder_layer_ffn_first():
    class M(EncoderLayer):
        def forward(self, x, src_mask=None):
            x = self.sublayers[0](x, self.ffn)
            out = {}
            def att(h): o, out["w"] = self.self_attn(h, h, h, mask=src_mask); return o
            return self.sublayers[1](x, att), out["w"]
    fails_with(grade_encoder_layer(M), "self-attention comes first")

class Dec(DecoderLayer):
    mistake = None
    def forward(self, y, memory, tgt_mask=None, memory_mask=None):
        tm = None if self.mistake == "no tgt mask" else tgt_mask
        mm = None if self.mistake in ("no memory mask", "self kv") else memory_mask
        s0, s1, s2 = self.sublayers
        ws, wc = {}, {}
        def a(h): o, ws["w"] = self.self_attn(h, h, h, mask=tm); return o
        def c(h):
            kv = h if self.mistake == "self kv" else (s1.norm(memory) if self.mistake == "norm memory" else memory)
            o, wc["w"] = self.cross_attn(h, kv, kv, mask=mm); return o
        y = s2(s1(s0(y, a), c), self.ffn)
        return y, ws["w"], wc["w"]

def dec(m): return type("MyDec", (Dec,), {"mistake": m})

def test_decoder_layer_reference_variant_passes(): assert grade_decoder_layer(dec(None))
def test_decoder_layer_no_causal_mask(): fails_with(grade_decoder_layer(dec("no tgt mask")), "tgt_mask is not used", "future")
def test_decoder_layer_no_memory_mask(): fails_with(grade_decoder_layer(dec("no memory mask")), "memory_mask is not used")
def test_decoder_layer_cross_attends_to_itself(): fails_with(grade_decoder_layer(dec("self kv")), "from the memory")
def test_decoder_layer_normalises_memory(): fails_with(grade_decoder_layer(dec("norm memory")), "memory goes into the cross-attention as it is")

def test_decoder_layer_masks_swapped():
    class M(DecoderLayer):
        def forward(self, y, memory, tgt_mask=None, memory_mask=None): return super().forward(y, memory, memory_mask, tgt_mask)
    fails_with(grade_decoder_layer(M), "raised", "tgt_mask goes to the self-attention")

def test_encoder_without_final_norm():
    class M(Encoder):
        def __init__(self, *a, **kw): super().__init__(*a, **kw); self.norm = None
    fails_with(grade_encoder(M), "final LayerNorm")

def test_decoder_with_final_norm_in_post_ln():
    class M(Decoder):
        def __init__(self, *a, **kw): super().__init__(*a, **{**kw, "final_norm": True})
    fails_with(grade_decoder(M), "no final LayerNorm")

def test_encoder_layers_sharing_parameters():
    class M(Encoder):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw); self.layers = nn.ModuleList([self.layers[0]] * len(self.layers))
    fails_with(grade_encoder(M), "share their parameters")


# ---------------------------------------------------------------- the full model

def test_transformer_returns_probabilities():
    class M(Transformer):
        def forward(self, *a, **kw): return super().forward(*a, **kw).softmax(-1)
    fails_with(grade_transformer(M), "return the logits")

def test_transformer_memory_mask_not_passed():
    class M(Transformer):
        def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, return_attention=False):
            return super().forward(src, tgt, src_mask, tgt_mask, None)
    fails_with(grade_transformer(M), "memory_mask is not passed")

def test_transformer_not_xavier():
    class M(Transformer):
        def _reset_parameters(self): pass
    fails_with(grade_transformer(M), "Xavier")


# ---------------------------------------------------------------- causal mask

def test_causal_mask_off_by_one_without_diagonal():
    fails_with(grade_causal_mask(lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1)), "off by one", "diagonal")
def test_causal_mask_off_by_one_sees_next():
    fails_with(grade_causal_mask(lambda T: torch.ones(T, T, dtype=torch.bool).tril(1)), "off by one", "t + 1")
def test_causal_mask_inverted():
    fails_with(grade_causal_mask(lambda T: torch.ones(T, T, dtype=torch.bool).triu(1)), "inverted")
def test_causal_mask_not_boolean():
    fails_with(grade_causal_mask(lambda T: torch.ones(T, T).tril()), "boolean")


# ---------------------------------------------------------------- padding and target masks (chapter 8)

def test_padding_mask_inverted(): fails_with(grade_padding_mask(lambda ids, pad: (ids == pad)[:, None, None, :]), "inverted")
def test_padding_mask_shape(): fails_with(grade_padding_mask(lambda ids, pad: ids != pad), "(B, 1, 1, S)", "broadcasts")
def test_padding_mask_not_boolean(): fails_with(grade_padding_mask(lambda ids, pad: (ids != pad).float()[:, None, None, :]), "boolean")

def tmask(combine):
    def f(tgt, pad):
        T = tgt.shape[1]
        return combine((tgt != pad)[:, None, None, :], torch.ones(T, T, dtype=torch.bool).tril(), (tgt != pad)[:, None, :, None])
    return f

def test_target_mask_reference_variant_passes(): assert grade_target_mask(tmask(lambda p, c, q: p & c))
def test_target_mask_without_padding(): fails_with(grade_target_mask(tmask(lambda p, c, q: (c & True).expand(p.shape[0], 1, *c.shape))), "padding is missing")
def test_target_mask_or(): fails_with(grade_target_mask(tmask(lambda p, c, q: p | c)), "AND")
def test_target_mask_padding_on_rows(): fails_with(grade_target_mask(tmask(lambda p, c, q: q & c)), "queries (rows)")
def test_target_mask_causal_off_by_one(): fails_with(grade_target_mask(tmask(lambda p, c, q: p & c.tril(-1))), "off by one")
