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
from transformer_nb.norms import LayerNorm, SublayerConnection, residual
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
    split, merge, scale, w_o, use_mask, v_from = "ok", "ok", None, True, True, "value"
    use_dropout, drop_in_eval, return_dropped, weights_always = True, False, False, False
    def forward(self, query, key, value, mask=None, need_weights=True):
        B, T, d = query.shape; S, H, dk = key.shape[1], self.num_heads, self.d_k
        sp = lambda t, L: t.reshape(B, H, L, dk) if self.split == "view" else t.reshape(B, L, H, dk).transpose(1, 2)
        q, k, v = sp(self.W_q(query), T), sp(self.W_k(key), S), sp(self.W_v(value if self.v_from != "key" else key), S)
        w = (q @ k.transpose(-2, -1) / (self.scale or math.sqrt(dk)))
        if mask is not None and self.use_mask: w = w.masked_fill(~mask, torch.finfo(w.dtype).min)
        w = w.softmax(-1)
        p = self.dropout if (self.training or self.drop_in_eval) and self.use_dropout else 0.0
        dropped = F.dropout(w, p)
        o = dropped @ v
        o = o.reshape(B, T, d) if self.merge == "view" else o.transpose(1, 2).reshape(B, T, d)
        out = self.W_o(o) if self.w_o else o
        if not need_weights and not self.weights_always: return out, None
        return out, (dropped if self.return_dropped else w)

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
    def f(max_len, d_model, base=10000.0):
        pos = torch.arange(max_len, dtype=torch.float32)[:, None] + (1 if kind == "start1" else 0)
        i = torch.arange(d_model // 2, dtype=torch.float32) if kind == "i" else torch.arange(0, d_model, 2).float()
        ang = pos * base ** (-i / d_model)
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
    fails_with(grade_ffn(M), "does not change", "dropout to the hidden units")


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

def _res(layer, x, sublayer, norm):
    "A residual connection around `sublayer` with the layer's dropout and norm placement (chapter 5's `residual`)"
    return residual(x, sublayer, norm, layer.dropout, layer.norm_first)


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
            x = _res(self, x, self.ffn, self.norm1)
            out = {}
            def att(h): o, out["w"] = self.self_attn(h, h, h, mask=src_mask); return o
            return _res(self, x, att, self.norm2), out["w"]
    fails_with(grade_encoder_layer(M), "self-attention comes first")

class Dec(DecoderLayer):
    mistake = None
    def forward(self, y, memory, tgt_mask=None, memory_mask=None, need_weights=True):
        tm = None if self.mistake == "no tgt mask" else tgt_mask
        mm = None if self.mistake in ("no memory mask", "self kv") else memory_mask
        s0, s1, s2 = ((lambda h, f, n=n: _res(self, h, f, n)) for n in (self.norm1, self.norm2, self.norm3))
        ws, wc = {}, {}
        def a(h): o, ws["w"] = self.self_attn(h, h, h, mask=tm); return o
        def c(h):
            kv = h if self.mistake == "self kv" else (self.norm2(memory) if self.mistake == "norm memory" else memory)
            o, wc["w"] = self.cross_attn(h, kv, kv, mask=mm); return o
        y = s2(s1(s0(y, a), c), self.ffn)
        return (y, ws["w"], wc["w"]) if need_weights else (y, None, None)

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
        def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, need_weights=False):
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


# ================================================================ every argument and mode (issue 15)
# Each broken implementation below passed (or crashed) the checkers before; each must now fail with a hint that
# names its mistake.

# ---------------------------------------------------------------- never a crash, inputs kept, how far off

def test_pre_ln_encoder_without_masks_gets_a_hint_not_a_crash():
    class M(Encoder):
        def forward(self, x, src_mask=None, need_weights=False):
            return super().forward(x, None, need_weights)
    fails_with(grade_encoder(M), "masks are not passed")

def test_pre_ln_decoder_without_memory_mask_gets_a_hint_not_a_crash():
    class M(Decoder):
        def forward(self, y, memory, tgt_mask=None, memory_mask=None, need_weights=False):
            return super().forward(y, memory, tgt_mask, None, need_weights)
    fails_with(grade_decoder(M), "memory_mask is not passed")

def test_an_error_inside_the_checker_becomes_a_verdict():
    class M(Encoder):
        def parameters(self, recurse=True): raise RuntimeError("boom")
    fails_with(grade_encoder(M), "the check stopped at RuntimeError: boom")

def test_attention_that_scales_q_in_place():
    def f(q, k, v, mask=None, dropout_p=0.0):
        q /= math.sqrt(q.shape[-1])
        return scaled_dot_product_attention(q * math.sqrt(q.shape[-1]), k, v, mask, dropout_p)
    fails_with(grade_attention(f), "changed its argument `q` in place")

def test_layer_norm_that_centres_x_in_place():
    class M(LayerNorm):
        def forward(self, x):
            x -= x.mean(-1, keepdim=True)
            return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)
    fails_with(grade_layer_norm(M), "changed its argument `x` in place")

def test_an_unrecognised_mistake_is_told_how_far_off():
    class M(LayerNorm):
        def forward(self, x): return super().forward(x) * 1.01
    fails_with(grade_layer_norm(M), "largest difference", "of the values within tolerance", "first difference at index")


# ---------------------------------------------------------------- chapter 1

class PadIgnored(TokenEmbedding):
    def __init__(self, vocab_size, d_model, padding_idx=None): super().__init__(vocab_size, d_model)

class PadNotRezeroed(TokenEmbedding):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__(vocab_size, d_model, padding_idx)
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)

def test_embedding_padding_idx_ignored(): fails_with(grade_token_embedding(PadIgnored), "padding_idx=3 is ignored")
def test_embedding_padding_row_overwritten(): fails_with(grade_token_embedding(PadNotRezeroed), "not zero after your initialisation")
def test_embedding_precedence_bug():
    fails_with(grade_token_embedding(type("T4", (Tok,), {"factor": staticmethod(lambda d: d ** 1/2)})), "operator precedence")

def test_positions_base_ignored():
    fails_with(grade_positional_encoding(lambda max_len, d_model, base=10000.0: sinusoidal_encoding(max_len, d_model)),
               "base is ignored")

class Emb(Embeddings):
    "The book's Embeddings with one configurable mistake"
    mistake = None
    def __init__(self, vocab_size, d_model, max_len=5000, dropout=0.1, positions="sinusoidal", padding_idx=None):
        super().__init__(vocab_size, d_model, max_len, dropout,
                         "sinusoidal" if self.mistake == "learned ignored" else positions,
                         None if self.mistake == "padding ignored" else padding_idx)
        self.p = dropout
    def forward(self, ids, offset=0):
        tok = self.tokens.embed(ids) if self.mistake == "unscaled" else self.tokens(ids)
        if self.mistake == "offset ignored": offset = 0
        if self.mistake == "dropout tokens": return self.positions(self.dropout(tok), offset=offset)
        x = self.positions(tok, offset=offset)
        return F.dropout(x, self.p) if self.mistake == "dropout in eval" else self.dropout(x)

def emb(m): return type("MyEmb", (Emb,), {"mistake": m})

def test_embeddings_reference_variant_passes(): assert grade_embeddings(emb(None))
def test_embeddings_offset_ignored(): fails_with(grade_embeddings(emb("offset ignored")), "offset=5 is ignored")
def test_embeddings_learned_ignored(): fails_with(grade_embeddings(emb("learned ignored")), 'positions="learned" is ignored')
def test_embeddings_unscaled(): fails_with(grade_embeddings(emb("unscaled")), "not scaled by √d_model")
def test_embeddings_padding_ignored(): fails_with(grade_embeddings(emb("padding ignored")), "padding_idx=3 is not passed on")
def test_embeddings_dropout_in_eval(): fails_with(grade_embeddings(emb("dropout in eval")), "dropout is applied in eval mode")
def test_embeddings_dropout_before_positions(): fails_with(grade_embeddings(emb("dropout tokens")), "dropout acts on the sum")

def test_embeddings_table_under_another_name():
    class P(nn.Module):
        def __init__(self, d_model, max_len):
            super().__init__(); self.d_model, self.max_len = d_model, max_len
            self.register_buffer("table", sinusoidal_encoding(max_len, d_model), persistent=False)
        def forward(self, x, offset=0): return x + self.table[offset:offset + x.shape[1]]
    class E(Embeddings):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            if isinstance(self.positions, type(Embeddings(5, 4).positions)):
                self.positions = P(self.positions.d_model, self.positions.max_len)
    fails_with(grade_embeddings(E), "`self.positions` has no tensor `pe`", "register_buffer")


# ---------------------------------------------------------------- chapter 2

def attn_with(drop="weights", fill="min", upcast=False, return_dropped=False):
    "The book's attention with dropout and dtype handling that can go wrong"
    def f(q, k, v, mask=None, dropout_p=0.0):
        if upcast: q, k, v = q.float(), k.float(), v.float()
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min if fill == "min" else fill)
        w = scores.softmax(-1)
        if mask is not None: w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        d = F.dropout(w, dropout_p) if drop == "weights" else w
        out = d @ v
        if drop == "output": out = F.dropout(out, dropout_p)
        return out, (d if return_dropped else w)
    return f

def test_attention_reference_variant_passes(): assert grade_attention(attn_with())
def test_attention_dropout_ignored(): fails_with(grade_attention(attn_with(drop=None)), "dropout_p=0.5 is ignored")
def test_attention_dropout_on_output(): fails_with(grade_attention(attn_with(drop="output")), "dropout belongs on the weights")
def test_attention_returns_dropped_weights():
    fails_with(grade_attention(attn_with(return_dropped=True)), "return the weights before dropout")
def test_attention_fill_minus_1e9_overflows_half():
    fails_with(grade_attention(attn_with(fill=-1e9)), "float16", "overflow", "finfo")
def test_attention_upcasts_half(): fails_with(grade_attention(attn_with(upcast=True)), "returns torch.float32")

def test_attention_fails_on_2d_inputs():
    def f(q, k, v, mask=None, dropout_p=0.0):
        return scaled_dot_product_attention(q, k.transpose(2, 3).transpose(2, 3), v, mask, dropout_p)
    fails_with(grade_attention(f), "raised IndexError", "k.transpose(2, 3)")


# ---------------------------------------------------------------- chapter 3

def test_multihead_need_weights_ignored(): fails_with(grade_multihead(mha(weights_always=True)), "need_weights=False", "None")
def test_multihead_dropout_ignored(): fails_with(grade_multihead(mha(use_dropout=False)), "does not change", "attention weights")
def test_multihead_dropout_in_eval(): fails_with(grade_multihead(mha(drop_in_eval=True)), "dropout is applied in eval mode")
def test_multihead_returns_dropped_weights(): fails_with(grade_multihead(mha(return_dropped=True)), "weights are dropped")
def test_multihead_values_from_keys(): fails_with(grade_multihead(mha(v_from="key")), "W_v(value), not W_v(key)")
def test_multihead_divided_by_d_k(): fails_with(grade_multihead(mha(scale=6.0)), "divided by d_k")
def test_multihead_not_scaled(): fails_with(grade_multihead(mha(scale=1.0)), "not scaled")

def test_multihead_bias_ignored():
    class M(MHA):
        def __init__(self, d_model, num_heads, dropout=0.0, bias=True): super().__init__(d_model, num_heads, dropout)
    fails_with(grade_multihead(M), "bias=False is ignored")

def test_multihead_without_d_k():
    class M(MHA):
        def __init__(self, *a, **kw): super().__init__(*a, **kw); del self.d_k
        def forward(self, *a, **kw): self.d_k = self.d_model // self.num_heads; return super().forward(*a, **kw)
    fails_with(grade_multihead(M), "no attribute `d_k`")

def test_multihead_dropout_as_a_module():
    class M(MHA):
        def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
            super().__init__(d_model, num_heads, dropout, bias); del self.dropout; self.dropout = nn.Dropout(dropout)
    fails_with(grade_multihead(M), "`self.dropout` is Dropout")


# ---------------------------------------------------------------- chapter 4

class FFN(PositionwiseFeedForward):
    mistake = None
    def forward(self, x):
        if self.mistake == "dropout output": return self.dropout(self.linear2(self.act(self.linear1(x))))
        if self.mistake == "dropout in eval":
            return self.linear2(F.dropout(self.act(self.linear1(x)), self.dropout.p))
        if self.mistake == "act last": return self.act(self.linear2(self.linear1(x)))
        return super().forward(x)

def ffn(m): return type("MyFFN", (FFN,), {"mistake": m})

def test_ffn_reference_variant_passes(): assert grade_ffn(ffn(None))
def test_ffn_dropout_on_output(): fails_with(grade_ffn(ffn("dropout output")), "dropout belongs on the hidden units")
def test_ffn_dropout_in_eval(): fails_with(grade_ffn(ffn("dropout in eval")), "dropout is applied in eval mode")
def test_ffn_activation_last(): fails_with(grade_ffn(ffn("act last")), "after the second layer")

def test_ffn_activation_under_another_name():
    class M(PositionwiseFeedForward):
        def __init__(self, *a, **kw): super().__init__(*a, **kw); self.nonlin = self.act; del self.act
        def forward(self, x): return self.linear2(self.dropout(self.nonlin(self.linear1(x))))
    fails_with(grade_ffn(M), "no part `self.act`")


# ---------------------------------------------------------------- chapter 5

def test_layer_norm_eps_ignored():
    class M(LayerNorm):
        def forward(self, x): return F.layer_norm(x, (self.d_model,), self.weight, self.bias, 1e-5)
    fails_with(grade_layer_norm(M), "eps=0.01 is ignored")

def test_layer_norm_weight_and_bias_swapped():
    class M(LayerNorm):
        def forward(self, x): return F.layer_norm(x, (self.d_model,), self.bias, self.weight, self.eps)
    fails_with(grade_layer_norm(M), "swapped")

def test_layer_norm_without_bias():
    class M(LayerNorm):
        def forward(self, x): return F.layer_norm(x, (self.d_model,), self.weight, None, self.eps)
    fails_with(grade_layer_norm(M), "bias (β) is missing")

def test_layer_norm_unfused_path_wrong():
    class M(LayerNorm):
        def forward(self, x):
            if self.fused: return super().forward(x)
            return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + self.eps) * self.weight + self.bias
    fails_with(grade_layer_norm(M), "fused=False", "unbiased variance")

class Sub(SublayerConnection):
    mistake = None
    def __init__(self, d_model, dropout=0.1, norm_first=True):
        super().__init__(d_model, dropout, norm_first); self.p = dropout
    def forward(self, x, sublayer):
        drop = (lambda t: F.dropout(t, self.p)) if self.mistake == "dropout in eval" else self.dropout
        if self.norm_first: return x + drop(sublayer(self.norm(x)))
        if self.mistake == "post no dropout": return self.norm(x + sublayer(x))
        if self.mistake == "residual normalised": return self.norm(x) + drop(sublayer(self.norm(x)))
        return self.norm(x + drop(sublayer(x)))

def sub(m): return type("MySub", (Sub,), {"mistake": m})

def test_sublayer_reference_variant_passes(): assert grade_sublayer(sub(None))
def test_sublayer_post_ln_never_drops(): fails_with(grade_sublayer(sub("post no dropout")), "(post-LN)", "does not change")
def test_sublayer_dropout_in_eval(): fails_with(grade_sublayer(sub("dropout in eval")), "dropout is applied in eval mode")

def test_sublayer_residual_normalised():
    class M(SublayerConnection):
        def forward(self, x, sublayer):
            if self.norm_first: return self.norm(x) + self.dropout(sublayer(self.norm(x)))
            return self.norm(x + self.dropout(sublayer(x)))
    fails_with(grade_sublayer(M), "adds the normalised input")


# ---------------------------------------------------------------- chapter 6

def test_encoder_layer_activation_ignored():
    class M(EncoderLayer):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.1, norm_first=True, activation="relu"):
            super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
    fails_with(grade_encoder_layer(M), 'activation="gelu" is not passed on')

def test_encoder_layer_need_weights_ignored():
    class M(EncoderLayer):
        def forward(self, x, src_mask=None, need_weights=True): return super().forward(x, src_mask)
    fails_with(grade_encoder_layer(M), "need_weights=False", "None")

def test_encoder_layer_dropout_not_passed():
    class M(EncoderLayer):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.1, norm_first=True, activation="relu"):
            super().__init__(d_model, num_heads, d_ff, 0.0, norm_first, activation)
    fails_with(grade_encoder_layer(M), "does not change", "pass dropout on")

def test_encoder_layer_without_attention():
    class M(EncoderLayer):
        def forward(self, x, src_mask=None, need_weights=True):
            w = self.self_attn(x, x, x, mask=src_mask)[1] if need_weights else None
            return _res(self, x, self.ffn, self.norm2), w
    fails_with(grade_encoder_layer(M), "self-attention sublayer is missing")

def test_decoder_layer_without_cross_attention():
    class M(DecoderLayer):
        def forward(self, y, memory, tgt_mask=None, memory_mask=None, need_weights=True):
            ws = self.self_attn(y, y, y, mask=tgt_mask)[1]
            wc = self.cross_attn(y, memory, memory, mask=memory_mask)[1]
            y = _res(self, y, lambda h: self.self_attn(h, h, h, mask=tgt_mask)[0], self.norm1)
            return _res(self, y, self.ffn, self.norm3), ws, wc
    fails_with(grade_decoder_layer(M), "cross-attention sublayer is missing")

def test_post_ln_encoder_ignoring_final_norm_true():
    class M(Encoder):
        def __init__(self, *a, final_norm=None, **kw): super().__init__(*a, **kw)
    fails_with(grade_encoder(M), "final_norm=True")

def test_encoder_need_weights_repeats_the_first_layer():
    class M(Encoder):
        def forward(self, x, src_mask=None, need_weights=False):
            out = super().forward(x, src_mask, need_weights)
            return (out[0], [out[1][0]] * len(out[1])) if need_weights else out
    fails_with(grade_encoder(M), "weights of layer 1")

def test_decoder_activation_not_passed():
    class M(Decoder):
        def __init__(self, d_model, num_heads, d_ff, num_layers=6, dropout=0.1, norm_first=True,
                     activation="relu", final_norm=None):
            super().__init__(d_model, num_heads, d_ff, num_layers, dropout, norm_first, "relu", final_norm)
    fails_with(grade_decoder(M), 'activation="gelu" is not passed on to the layers')

def test_encoder_dropout_not_passed():
    class M(Encoder):
        def __init__(self, d_model, num_heads, d_ff, num_layers=6, dropout=0.1, norm_first=True,
                     activation="relu", final_norm=None):
            super().__init__(d_model, num_heads, d_ff, num_layers, 0.0, norm_first, activation, final_norm)
    fails_with(grade_encoder(M), "pass dropout on to every layer")

def test_encoder_keeps_only_the_last_layer():
    class M(Encoder):
        def forward(self, x, src_mask=None, need_weights=False):
            h = x
            for layer in self.layers: h = layer(x, src_mask)[0]
            return self.norm(h) if self.norm is not None else h
    fails_with(grade_encoder(M), "only the last layer's output is kept")


# ---------------------------------------------------------------- chapter 7

def test_transformer_norm_first_not_passed():
    class M(Transformer):
        def __init__(self, *a, norm_first=True, **kw):
            super().__init__(*a, norm_first=True, **kw); self.norm_first = norm_first
    fails_with(grade_transformer(M), "norm_first=False is not passed on")

def test_transformer_attention_of_the_last_layer_only():
    class M(Transformer):
        def forward(self, *a, need_weights=False, **kw):
            out = super().forward(*a, need_weights=need_weights, **kw)
            if not need_weights: return out
            att = out[1]
            return out[0], att._replace(encoder=att.encoder[-1:])
    fails_with(grade_transformer(M), "`.encoder`", "every layer")

def test_transformer_decode_without_projection():
    class M(Transformer):
        def decode(self, tgt, memory, tgt_mask=None, memory_mask=None, need_weights=False):
            return self.decoder(self.tgt_embed(tgt), memory, tgt_mask, memory_mask)
        def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, need_weights=False):
            return Transformer.forward(self, src, tgt, src_mask, tgt_mask, memory_mask, need_weights) \
                if need_weights else self.output(self.decode(tgt, self.encode(src, src_mask), tgt_mask, memory_mask))
    fails_with(grade_transformer(M), "decode(...)", "output projection")


# ---------------------------------------------------------------- chapter 8

def test_padding_mask_pad_id_ignored(): fails_with(grade_padding_mask(lambda ids, pad: (ids != 0)[:, None, None, :]), "pad_id=3 is ignored")
def test_target_mask_pad_id_ignored():
    causal = lambda T: torch.ones(T, T, dtype=torch.bool).tril()
    fails_with(grade_target_mask(lambda t, pad: (t != 0)[:, None, None, :] & causal(t.shape[1])), "pad_id=3 is ignored")
def test_causal_mask_two_dimensional():
    fails_with(grade_causal_mask(lambda T, device=None: torch.ones(T, T, dtype=torch.bool, device=device).tril()), "(1, 1, T, T)")
def test_causal_mask_device_ignored():
    fails_with(grade_causal_mask(lambda T, device=None: torch.ones(T, T, dtype=torch.bool).tril()[None, None]),
               "device argument is not used")

def test_threads_are_restored():
    n = torch.get_num_threads()
    grade_ffn(PositionwiseFeedForward)
    assert torch.get_num_threads() == n


# ---------------------------------------------------------------- correct answers written otherwise still pass

def test_attention_scaling_q_first_passes():
    def f(q, k, v, mask=None, dropout_p=0.0):
        scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)
        if mask is not None: scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        w = scores.softmax(-1)
        if mask is not None: w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return F.dropout(w, dropout_p) @ v, w
    assert grade_attention(f)

def test_attention_softmax_in_float32_passes():
    def f(q, k, v, mask=None, dropout_p=0.0):
        scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        if mask is not None: scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        w = scores.float().softmax(-1).to(q.dtype)
        if mask is not None: w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return F.dropout(w, dropout_p) @ v, w
    assert grade_attention(f)

def test_layer_norm_written_out_passes():
    class M(LayerNorm):
        def forward(self, x):
            mean = x.mean(-1, keepdim=True)
            var = ((x - mean) ** 2).mean(-1, keepdim=True)
            return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
    assert grade_layer_norm(M)
