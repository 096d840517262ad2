"The checkers: each passes the book's implementation, and each classic mistake gets its own hint (one test per mistake)."
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_nb.attention import scaled_dot_product_attention
from transformer_nb.book.graders_decoding import *
from transformer_nb.book.graders_parts import *
from transformer_nb.book.graders_stack import *
from transformer_nb.book.graders_training import *
from transformer_nb.book.grading import *
from transformer_nb.decoding import beam_search, greedy_search
from transformer_nb.embeddings import Embeddings, TokenEmbedding, sinusoidal_encoding
from transformer_nb.ffn import PositionwiseFeedForward
from transformer_nb.gpt import filter_logits
from transformer_nb.induction import induction_score
from transformer_nb.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    LayerCache,
)
from transformer_nb.masking import causal_mask, padding_mask, target_mask
from transformer_nb.multihead import MultiHeadAttention, merge_heads, split_heads
from transformer_nb.norms import LayerNorm, SublayerConnection, residual
from transformer_nb.training import LabelSmoothingLoss, alignment_weight, noam_lr
from transformer_nb.transformer import Transformer

BOOK = [(grade_token_embedding, TokenEmbedding), (grade_positional_encoding, sinusoidal_encoding),
        (grade_embeddings, Embeddings), (grade_attention, scaled_dot_product_attention),
        (grade_split_heads, split_heads), (grade_merge_heads, merge_heads), (grade_multihead, MultiHeadAttention),
        (grade_ffn, PositionwiseFeedForward), (grade_layer_norm, LayerNorm), (grade_sublayer, SublayerConnection),
        (grade_encoder_layer, EncoderLayer), (grade_decoder_layer, DecoderLayer), (grade_encoder, Encoder),
        (grade_decoder, Decoder), (grade_transformer, Transformer),
        (grade_causal_mask, causal_mask), (grade_padding_mask, padding_mask), (grade_target_mask, target_mask),
        (grade_label_smoothing, LabelSmoothingLoss), (grade_noam_lr, noam_lr), (grade_alignment_weight, alignment_weight),
        (grade_greedy_search, greedy_search), (grade_beam_search, beam_search), (grade_layer_cache, LayerCache),
        (grade_filter_logits, filter_logits), (grade_induction_score, induction_score)]


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
        "grade_padding_mask", "grade_target_mask", "grade_noam_lr", "grade_alignment_weight", "grade_greedy_search",
        "grade_beam_search", "grade_filter_logits", "grade_induction_score")
        else stub_fn), "fill in the TODO")


@pytest.mark.parametrize("check,answer", BOOK, ids=[c.__name__ for c, _ in BOOK])
def test_unfilled_answer_hands_on_the_books(check, answer):
    "While the exercise holds its `...`, the verdict's answer is the book's, and the message says so once"
    v = check(StubModule if isinstance(answer, type) else stub_fn)
    assert v.answer is answer and v.message.count("Until then the cells below use the book's") == 1

def test_a_filled_answer_is_handed_on_as_it_is():
    wrong = attention(scale=lambda d: 1.0)
    assert grade_attention(wrong).answer is wrong and grade_attention(scaled_dot_product_attention).answer is \
        scaled_dot_product_attention

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
    invert_mask, q_from, drop_at = False, "query", "weights"
    def forward(self, query, key, value, mask=None, need_weights=True):
        B, T, d = query.shape; S, H, dk = key.shape[1], self.num_heads, self.d_k
        sp = lambda t, L: t.reshape(B, H, L, dk) if self.split == "view" else t.reshape(B, L, H, dk).transpose(1, 2)
        q = sp(self.W_q(query if self.q_from == "query" else key), T)
        k, v = sp(self.W_k(key), S), sp(self.W_v(value if self.v_from != "key" else key), S)
        if self.drop_at == "v": v = F.dropout(v, self.dropout, self.training)
        w = (q @ k.transpose(-2, -1) / (self.scale or math.sqrt(dk)))
        if mask is not None and self.use_mask:
            w = w.masked_fill(mask if self.invert_mask else ~mask, torch.finfo(w.dtype).min)
        w = w.softmax(-1)
        p = self.dropout if (self.training or self.drop_in_eval) and self.use_dropout else 0.0
        dropped = F.dropout(w, p) if self.drop_at == "weights" else w
        o = dropped @ v
        o = o.reshape(B, T, d) if self.merge == "view" else o.transpose(1, 2).reshape(B, T, d)
        out = self.W_o(o) if self.w_o else o
        if self.drop_at == "output": out = F.dropout(out, self.dropout, self.training)
        if not need_weights and not self.weights_always: return out, None
        return out, (dropped if self.return_dropped else w)

def mha(**kw): return type("MyMHA", (MHA,), kw)

def test_multihead_reference_variant_passes(): assert grade_multihead(mha())
def test_multihead_split_mixes_positions(): fails_with(grade_multihead(mha(split="view")), "split mixes positions")
def test_multihead_merge_mixes_positions(): fails_with(grade_multihead(mha(merge="view")), "merge mixes positions")
def test_multihead_scaled_by_d_model(): fails_with(grade_multihead(mha(scale=math.sqrt(24))), "√d_model", "√d_k")
def test_multihead_missing_w_o(): fails_with(grade_multihead(mha(w_o=False)), "W_o")
def test_multihead_mask_ignored(): fails_with(grade_multihead(mha(use_mask=False)), "mask is ignored")
def test_multihead_mask_the_wrong_way_round():  # a learner's review: "the output differs ... Follow the steps"
    fails_with(grade_multihead(mha(invert_mask=True)), "the mask is the wrong way round", "~mask")
def test_multihead_queries_from_the_keys():  # the same review: a crash without a mask got advice about the mask
    msg = str(grade_multihead(mha(q_from="key")))
    assert "Queries come from query (T positions)" in msg and "The mask broadcasts" not in msg, msg


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
    "A decoder layer written with chapter 5's `residual`; the cells after the exercise also use cache= and no cross"
    mistake = None
    def forward(self, y, memory=None, tgt_mask=None, memory_mask=None, need_weights=True, cache=None):
        tm = None if self.mistake == "no tgt mask" else tgt_mask
        mm = None if self.mistake in ("no memory mask", "self kv") else memory_mask
        s0, s1, s2 = ((lambda h, f, n=n: _res(self, h, f, n)) for n in (self.norm1, self.norm2, self.norm3))
        ws, wc = {}, {"w": None}
        def a(h): o, ws["w"] = self.self_attn(h, h, h, mask=tm, cache=cache); return o
        def c(h):
            kv = h if self.mistake == "self kv" else (self.norm2(memory) if self.mistake == "norm memory" else memory)
            o, wc["w"] = self.cross_attn(h, kv, kv, mask=mm, cache=cache); return o
        y = s0(y, a)
        if self.cross_attn is not None: y = s1(y, c)
        y = s2(y, self.ffn)
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
def test_multihead_dropout_on_the_output():  # review ch01-03, item 1: it passed, "dropout match the book's"
    fails_with(grade_multihead(mha(drop_at="output")), "somewhere other than on the attention weights")
def test_multihead_dropout_on_the_values():
    fails_with(grade_multihead(mha(drop_at="v")), "somewhere other than on the attention weights")
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


# a learner's notebook: the class reads the notebook's _ACTIVATIONS, which holds relu and gelu when the check runs
NOTEBOOK_FFN = """
from torch import nn
_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff=2048, dropout=0.1, activation="relu", bias=True):
        super().__init__()
        if activation not in _ACTIVATIONS: raise ValueError(f"activation {activation!r}")
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation
        self.linear1 = nn.Linear(d_model, {width}, bias=bias)
        self.act = {act}
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
    def forward(self, x): return self.linear2(self.dropout(self.act(self.linear1(x))))
"""

def notebook_ffn(width="2 * d_ff if activation == 'swiglu' else d_ff", act="_ACTIVATIONS[activation]()"):
    "The learner's class, defined in a namespace of its own as a notebook's cell defines it"
    ns = {}
    exec(NOTEBOOK_FFN.replace("{width}", width).replace("{act}", act), ns)
    return ns["PositionwiseFeedForward"], ns["_ACTIVATIONS"]

def test_ffn_swiglu_checked_with_the_notebooks_activations_left_as_they_were():
    cls, table = notebook_ffn()
    assert grade_ffn(cls)
    assert set(table) == {"relu", "gelu"}

def test_ffn_swiglu_with_linear1_d_ff_wide():
    "review of chapters 4-7, item 4: passed, then the chapter's SwiGLU cell failed with a raw shape error"
    cls, table = notebook_ffn(width="d_ff")
    fails_with(grade_ffn(cls), 'activation="swiglu"', "2·d_ff = 192", "yours writes 96")
    assert set(table) == {"relu", "gelu"}

def test_ffn_activation_not_read_from_the_table():
    cls, _ = notebook_ffn(act="nn.ReLU() if activation == 'relu' else nn.GELU()")
    fails_with(grade_ffn(cls), 'activation="swiglu"', "_ACTIVATIONS[activation]")


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


# ---------------------------------------------------------------- issue 35: answers as learners write them
# Each grader accepts the chapter's code and other correct forms, and rejects each mistake with its own hint;
# where an answer has two deviations, the hint names both, the more fundamental first.

def test_layer_norm_alternative_correct_forms():
    class Functional(nn.Module):                                   # F.layer_norm, torch's own
        def __init__(self, d_model, eps=1e-5, fused=True):
            super().__init__(); self.d_model, self.eps, self.fused = d_model, eps, fused
            self.weight, self.bias = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))
        def forward(self, x): return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)
    class ByHand(Functional):                                      # mean of squares, rsqrt
        def forward(self, x):
            c = x - x.mean(-1, keepdim=True)
            return c * torch.rsqrt((c * c).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias
    assert grade_layer_norm(Functional) and grade_layer_norm(ByHand)

class LNInit(LayerNorm):
    "The book's LayerNorm whose weight or bias starts elsewhere"
    gamma, beta = 1.0, 0.0
    def __init__(self, d_model, eps=1e-5, fused=True):
        super().__init__(d_model, eps, fused)
        with torch.no_grad(): self.weight.fill_(self.gamma); self.bias.fill_(self.beta)

def test_layer_norm_gamma_starting_at_zero():
    fails_with(grade_layer_norm(type("M", (LNInit,), {"gamma": 0.0})), "starts with `weight`", "start at 1")

def test_layer_norm_beta_starting_at_one():
    fails_with(grade_layer_norm(type("M", (LNInit,), {"beta": 1.0})), "starts with `bias`", "start at 0")

def test_layer_norm_two_deviations_named_in_order():
    class M(LNInit):
        gamma = 0.0
        def forward(self, x):                                      # unbiased variance, and γ starting at 0
            return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + self.eps) \
                * self.weight + self.bias
    v = grade_layer_norm(M)
    fails_with(v, "2 things differ", "(1) you used the unbiased variance", "(2) your new LayerNorm")
    assert v.message.index("unbiased") < v.message.index("start at 1")

def test_layer_norm_unbiased_and_no_bias():
    class M(LayerNorm):
        def forward(self, x):
            return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + self.eps) * self.weight
    v = grade_layer_norm(M)
    fails_with(v, "(1) you used the unbiased variance", "(2) the bias (β) is missing")

def test_attention_mask_applied_only_to_4d_masks():
    def f(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None and mask.dim() == 4: s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
        w = s.softmax(-1)
        if mask is not None and mask.dim() == 4: w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return w @ v, w
    v = grade_attention(f)
    fails_with(v, "the mask is ignored for this 2-D mask", "whatever its number of dimensions")
    assert "-100" not in v.message

def test_attention_unscaled_and_inverted_mask_named_in_order():
    v = grade_attention(attention(scale=lambda d: 1.0, invert=True))
    fails_with(v, "2 things differ", "(1) the scores are not scaled", "(2) the mask is inverted")

def test_attention_divided_by_d_k_and_softmax_over_queries():
    v = grade_attention(attention(scale=lambda d: d, dim=-2, zero_rows=False))
    fails_with(v, "(1) you divided by d_k", "(2) the softmax runs over the wrong axis")

def test_attention_alternative_correct_forms():
    def where(q, k, v, mask=None, dropout_p=0.0):                 # torch.where and F.softmax
        s = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        if mask is not None: s = torch.where(mask, s, torch.finfo(s.dtype).min)
        w = F.softmax(s, dim=-1)
        if mask is not None: w = torch.where(mask.any(-1, keepdim=True), w, 0.0)
        return torch.matmul(F.dropout(w, dropout_p), v), w
    def dropping(q, k, v, mask=None, dropout_p=0.0):              # dropout by hand, inverted scaling
        w = scaled_dot_product_attention(q, k, v, mask)[1]
        keep = (torch.rand_like(w) >= dropout_p).to(w.dtype) / (1 - dropout_p)
        return (w * keep) @ v, w
    assert grade_attention(where) and grade_attention(dropping)

def test_transformer_always_tying_the_output():
    class M(Transformer):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw); self.output.weight = self.tgt_embed.tokens.embed.weight
    v = grade_transformer(M)
    fails_with(v, "`tgt_embed.tokens.embed.weight` and `output.weight` are one tensor", "share_embeddings=True")
    assert "layers share" not in v.message

def test_transformer_share_embeddings_ignored():
    class M(Transformer):
        def __init__(self, *a, share_embeddings=False, **kw): super().__init__(*a, **kw)
    fails_with(grade_transformer(M), "share_embeddings=True", "shares 0 matrices where the book's shares 1")

def test_transformer_sharing_source_embedding_across_vocabularies():
    class M(Transformer):
        def __init__(self, src_vocab, tgt_vocab, *a, share_embeddings=False, **kw):
            super().__init__(src_vocab, tgt_vocab, *a, share_embeddings=share_embeddings, **kw)
            if share_embeddings and src_vocab != tgt_vocab:                  # and the source embedding: too much
                self.src_embed.tokens.embed = nn.Embedding(tgt_vocab, self.d_model)
                self.src_embed.tokens.embed.weight = self.output.weight
    fails_with(grade_transformer(M), "only the output projection and the target embedding")

class TorchStyleEncoderLayer(nn.Module):
    "nn.TransformerEncoderLayer's layout: its own dropouts drop1/drop2 and residuals, no `self.dropout`"
    def __init__(self, d_model, num_heads, d_ff, dropout=0.1, norm_first=True, activation="relu"):
        super().__init__()
        self.d_model, self.num_heads, self.norm_first = d_model, num_heads, norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)
    def forward(self, x, src_mask=None, need_weights=True):
        if self.norm_first:
            h = self.norm1(x); a, w = self.self_attn(h, h, h, mask=src_mask, need_weights=need_weights)
            x = x + self.drop1(a)
            return x + self.drop2(self.ffn(self.norm2(x))), w
        a, w = self.self_attn(x, x, x, mask=src_mask, need_weights=need_weights)
        x = self.norm1(x + self.drop1(a))
        return self.norm2(x + self.drop2(self.ffn(x))), w

def test_torch_style_encoder_layer_with_its_own_dropout_names_passes():
    v = grade_encoder_layer(TorchStyleEncoderLayer)
    assert v, v


# ---------------------------------------------------------------- chapter 10: label smoothing, the schedule
from transformer_nb.decoding import greedy_search
from transformer_nb.training import LabelSmoothingLoss, noam_lr


class LS(nn.Module):
    "A label-smoothed loss as learners write it: explicit q, with one configurable mistake"
    others, true_extra, use, pad, kl, hard_eps, hard_pad, ignore_red = "V", True, "log_softmax", "skip", False, None, None, False
    def __init__(self, eps=0.1, ignore_index=0, reduction="mean"):
        super().__init__(); self.eps, self.ignore_index, self.reduction = eps, ignore_index, reduction
    def forward(self, logits, target):
        eps = self.hard_eps if self.hard_eps is not None else self.eps
        ig = self.hard_pad if self.hard_pad is not None else self.ignore_index
        V = logits.shape[-1]; x = logits.reshape(-1, V); t = target.reshape(-1)
        lp = {"log_softmax": x.log_softmax(-1), "logits": x, "softmax": x.softmax(-1)}[self.use]
        n_other = {"V": V, "V-1": V - 1}[self.others]
        q = torch.full_like(lp, eps / n_other)
        q[torch.arange(len(t)), t] = 1 - eps + (eps / V if self.true_extra else 0)
        loss = -(q * lp).sum(-1)
        if self.kl: loss = loss + (q * q.log()).sum(-1)
        keep = t != ig
        if self.reduction == "sum" and not self.ignore_red: return loss[keep].sum()
        if self.pad == "keep": return loss.mean()
        if self.pad == "divide all": return loss[keep].sum() / len(t)
        return loss[keep].sum() / keep.sum()

def ls(**kw): return type("MyLoss", (LS,), kw)

def test_label_smoothing_book_and_alternatives():
    assert grade_label_smoothing(LabelSmoothingLoss)
    assert grade_label_smoothing(ls())                                       # the explicit q
    class Torch(nn.Module):                                                 # torch's own loss
        def __init__(self, eps=0.1, ignore_index=0, reduction="mean"):
            super().__init__(); self.f = nn.CrossEntropyLoss(ignore_index=ignore_index, label_smoothing=eps,
                                                              reduction=reduction)
        def forward(self, logits, target): return self.f(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    assert grade_label_smoothing(Torch)

def test_label_smoothing_spread_over_v_minus_1():
    fails_with(grade_label_smoothing(ls(others="V-1", true_extra=False)), "V − 1 other tokens", "ε/V")
def test_label_smoothing_kl_divergence():
    fails_with(grade_label_smoothing(ls(kl=True)), "KL divergence", "entropy of q")
def test_label_smoothing_on_logits(): fails_with(grade_label_smoothing(ls(use="logits")), "log_softmax")
def test_label_smoothing_on_probabilities(): fails_with(grade_label_smoothing(ls(use="softmax")), "not probabilities")
def test_label_smoothing_padding_counted(): fails_with(grade_label_smoothing(ls(pad="keep")), "padding positions")
def test_label_smoothing_divided_by_all_positions():
    fails_with(grade_label_smoothing(ls(pad="divide all")), "divides by every position")
def test_label_smoothing_eps_ignored(): fails_with(grade_label_smoothing(ls(hard_eps=0.1)), "eps=0.3 is ignored")
def test_label_smoothing_ignore_index_ignored():
    fails_with(grade_label_smoothing(ls(hard_pad=0)), "ignore_index=4 is ignored")
def test_label_smoothing_sum_ignored(): fails_with(grade_label_smoothing(ls(ignore_red=True)), 'reduction="sum" is ignored')
def test_label_smoothing_v_minus_1_and_padding_counted_named_in_order():
    v = grade_label_smoothing(ls(others="V-1", true_extra=False, pad="keep"))
    fails_with(v, "(1) ε is spread over the V − 1", "(2) padding positions")

def test_label_smoothing_annotated_transformer_version():
    class M(LS):                                                    # ε/(V−2), padding column 0, KLDivLoss(sum)
        def forward(self, logits, target):
            V = logits.shape[-1]; x = logits.reshape(-1, V).log_softmax(-1); t = target.reshape(-1)
            q = torch.full_like(x, self.eps / (V - 2)); q[torch.arange(len(t)), t] = 1 - self.eps
            q[:, self.ignore_index] = 0; keep = t != self.ignore_index
            loss = -(q * x).sum(-1)
            return loss[keep].sum() if self.reduction == "sum" else loss[keep].sum() / keep.sum()
    fails_with(grade_label_smoothing(M), "V − 2 tokens", "padding's column")

def test_label_smoothing_detached():
    class M(LabelSmoothingLoss):
        def forward(self, logits, target): return torch.tensor(super().forward(logits, target).item())
    fails_with(grade_label_smoothing(M), "does not depend on the logits")

def lr(scale="rsqrt", shape="min", warm="power", hard_warmup=None, use_factor=True, guard=True):
    "The schedule as learners write it, with one configurable mistake"
    def f(step, d_model, warmup=4000, factor=1.0):
        w = hard_warmup or warmup
        s = max(step, 1) if guard else step
        rise = s * w ** -1.5 if warm == "power" else s / w
        core = (min if shape == "min" else max)(s ** -0.5, rise)
        k = {"rsqrt": d_model ** -0.5, "none": 1, "sqrt": math.sqrt(d_model), "inv": 1 / d_model}[scale]
        return (factor if use_factor else 1) * k * core
    return f

def test_noam_book_and_alternatives():
    assert grade_noam_lr(noam_lr) and grade_noam_lr(lr())
    def torchy(step, d_model, warmup=4000, factor=1.0):             # a tensor of one number, branches
        step = torch.tensor(float(max(step, 1)))
        return factor * d_model ** -0.5 * (step * warmup ** -1.5 if step < warmup else step.rsqrt())
    assert grade_noam_lr(torchy)

def test_noam_max_instead_of_min(): fails_with(grade_noam_lr(lr(shape="max")), "max where equation 3 has min")
def test_noam_step_over_warmup(): fails_with(grade_noam_lr(lr(warm="ratio")), "step / warmup is too steep")
def test_noam_without_d_model(): fails_with(grade_noam_lr(lr(scale="none")), "d_model^-0.5 factor is missing")
def test_noam_times_sqrt_d_model(): fails_with(grade_noam_lr(lr(scale="sqrt")), "multiplied by √d_model")
def test_noam_warmup_ignored(): fails_with(grade_noam_lr(lr(hard_warmup=4000)), "`warmup` is ignored")
def test_noam_factor_ignored(): fails_with(grade_noam_lr(lr(use_factor=False)), "`factor` is ignored")
def test_noam_step_zero_divides_by_zero():
    fails_with(grade_noam_lr(lr(guard=False)), "ZeroDivisionError", "read it as 1")
def test_noam_two_mistakes_named_in_order():
    fails_with(grade_noam_lr(lr(shape="max", scale="none")), "(1) max where", "(2) the d_model^-0.5 factor")


# ---------------------------------------------------------------- chapter 11: greedy decoding

def greedy(after_eos="pad", stop="all", keep_bos=False, steps=0, causal=True):
    "Greedy decoding as learners write it (a growing tensor, the cache its own way), with one configurable mistake"
    from transformer_nb.decoding import KVCache, decode_step

    def f(model, src, src_mask=None, max_len=32, use_cache=True, bos=1, pad=0, eos=2, pick=None):
        memory = model.encode(src, src_mask)
        cache = KVCache(model, memory, src_mask) if use_cache else None
        ys = torch.full((src.shape[0], 1), bos); done = torch.zeros(src.shape[0], dtype=torch.bool); out = []
        for t in range(max_len + steps):
            if cache is not None: logits = decode_step(model, cache, ys[:, -1])
            else:
                m = torch.ones(t + 1, t + 1, dtype=torch.bool).tril() if causal else None
                logits = model.decode(ys, memory, m, src_mask)[:, -1]
            nxt = logits.argmax(-1) if pick is None else pick(logits)
            if after_eos == "pad": nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
            ys = torch.cat([ys, nxt[:, None]], 1); out.append(logits)
            if eos is None: continue
            done = done | (nxt == eos)
            if (stop == "all" and done.all()) or (stop == "any" and done.any()): break
        return (ys if keep_bos else ys[:, 1:]), torch.stack(out, 1)
    return f

def test_greedy_book_and_alternatives():
    assert grade_greedy_search(greedy_search) and grade_greedy_search(greedy())

def test_greedy_setup_has_rows_ending_at_different_steps():
    "The checker's case: rows end at steps 3, 2, 1 and never, so each mistake below shows"
    from transformer_nb.book.graders_decoding import _decoding_case
    model, src, src_mask = _decoding_case()
    ids, _ = greedy_search(model, src, src_mask, max_len=10)
    ends = [(r == 2).nonzero()[:1].flatten().tolist() for r in ids]
    assert ends == [[3], [2], [1], []], ends

def test_greedy_no_pad_after_eos(): fails_with(grade_greedy_search(greedy(after_eos="go on")), "after </s>, write <pad>")
def test_greedy_stops_at_first_eos(): fails_with(grade_greedy_search(greedy(stop="any")), "when the first row writes </s>")
def test_greedy_never_stops(): fails_with(grade_greedy_search(greedy(stop="never")), "even after every row has written")
def test_greedy_keeps_bos(): fails_with(grade_greedy_search(greedy(keep_bos=True)), "start with <s>")
def test_greedy_one_token_short(): fails_with(grade_greedy_search(greedy(steps=-1)), "one token short")
def test_greedy_without_causal_mask(): fails_with(grade_greedy_search(greedy(causal=False)), "without the causal mask")
def test_greedy_no_pad_and_never_stops_named_in_order():
    fails_with(grade_greedy_search(greedy(after_eos="go on", stop="never")), "(1) you write max_len", "(2) a row that")


def test_greedy_pick_and_the_cache_switch_are_checked():
    "A learner's review: an answer that took the argmax whatever `pick`, or kept the cache on whatever `use_cache`, passed"
    def argmax_only(model, src, src_mask=None, max_len=32, use_cache=True, bos=1, pad=0, eos=2, pick=None):
        return greedy()(model, src, src_mask, max_len, use_cache, bos, pad, eos)
    fails_with(grade_greedy_search(argmax_only), "pick is never called")
    def cache_always(model, src, src_mask=None, max_len=32, use_cache=True, bos=1, pad=0, eos=2, pick=None):
        return greedy()(model, src, src_mask, max_len, True, bos, pad, eos, pick)
    fails_with(grade_greedy_search(cache_always), "use_cache=False: the decoder still read one new position")
    def cache_never(model, src, src_mask=None, max_len=32, use_cache=True, bos=1, pad=0, eos=2, pick=None):
        return greedy()(model, src, src_mask, max_len, False, bos, pad, eos, pick)
    fails_with(grade_greedy_search(cache_never), "use_cache=True: the decoder never got the cache")


# ---------------------------------------------------------------- chapter 11: beam search and its stopping rule
from transformer_nb.decoding import Hypothesis, beam_search, length_penalty


def beam(stop="bound", bound_len="max_len", count_eos=True, use_alpha=True, eos_any_rank=False, keep_unfinished=True):
    "Beam search as learners write it: a heap-free loop over prefixes, no cache, with one configurable mistake"
    def f(model, src, beam_size=4, max_len=32, alpha=0.6, bos=1, eos=2):
        mem = model.encode(src[None])
        score = lambda lp, n: lp / (length_penalty(n if count_eos else n - 1, alpha) if use_alpha else 1.0)
        live, done = [([], 0.0)], []
        for t in range(1, max_len + 1):
            ys = torch.tensor([[bos] + toks for toks, _ in live])
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            logp = model.decode(ys, mem.expand(len(live), -1, -1), mask)[:, -1].log_softmax(-1)
            cands = sorted(((lp + logp[r, w].item(), r, w) for r, (_, lp) in enumerate(live)
                            for w in range(logp.shape[1])), reverse=True)[:2 * beam_size]
            nxt = []
            for rank, (lp, r, w) in enumerate(cands):
                if w == eos:
                    if rank < beam_size or eos_any_rank: done.append(Hypothesis(live[r][0], lp, score(lp, t), True))
                elif len(nxt) < beam_size: nxt.append((live[r][0] + [w], lp))
            if not nxt: break
            if t == max_len:
                if keep_unfinished: done += [Hypothesis(toks, lp, score(lp, t), False) for toks, lp in nxt]
                break
            if stop == "first" and done: break
            if len(done) >= beam_size:
                if stop == "k finished": break
                best_live = max(lp for _, lp in nxt) / length_penalty(max_len if bound_len == "max_len" else t, alpha)
                if sorted(h.score for h in done)[-beam_size] >= best_live: break
            live = nxt
        return sorted(done, key=lambda h: -h.score)[:beam_size]
    return f

def test_beam_book_and_alternatives():
    assert grade_beam_search(beam_search)
    v = grade_beam_search(beam()); assert v, v

def test_beam_every_deviation_shows_in_the_checkers_cases():
    "Each deviation the checker names changes the result of at least one of its cases"
    from transformer_nb.book.graders_decoding import (
        _BEAM_MISTAKES,
        _beam_cases,
        _beam_variant,
        _hyps,
        _same_hyps,
    )
    for axis, options in _BEAM_MISTAKES:
        for option in options:
            assert any(not _same_hyps(_hyps(beam_search(m, s, beam_size=k, max_len=L, alpha=a), ""),
                                      _hyps(_beam_variant(m, s, k, L, a, **{axis: option}), ""))
                       for m, s, k, L, a in _beam_cases()), (axis, option)

def test_beam_stops_at_first_finished(): fails_with(grade_beam_search(beam(stop="first")), "first hypothesis finishes")
def test_beam_stops_at_k_finished(): fails_with(grade_beam_search(beam(stop="k finished")), "as soon as beam_size")
def test_beam_bound_with_current_length():
    fails_with(grade_beam_search(beam(bound_len="now")), "best reachable score", "length_penalty(max_len)")
def test_beam_alpha_ignored(): fails_with(grade_beam_search(beam(use_alpha=False)), "alpha is ignored")
def test_beam_penalty_without_eos(): fails_with(grade_beam_search(beam(count_eos=False)), "without </s>")
def test_beam_eos_below_rank_k(): fails_with(grade_beam_search(beam(eos_any_rank=True)), "only if it is one of the k best")
def test_beam_unfinished_lost(): fails_with(grade_beam_search(beam(keep_unfinished=False)), "live hypotheses are lost")
def test_beam_two_mistakes_named_in_order():
    fails_with(grade_beam_search(beam(stop="k finished", use_alpha=False)), "(1) you stop as soon as", "(2) alpha is ignored")


# ---------------------------------------------------------------- chapter 10: reading attention (alignment_weight)
from transformer_nb.data import make_batch
from transformer_nb.training import alignment_weight


def reading(maps="cross", swap=False, average="all", eval_mode=True, train=False):
    "alignment_weight as learners write it, with one configurable mistake"
    def f(model, vocab, pairs, align):
        if eval_mode: model.eval()
        if train: model.train()
        b = make_batch(pairs, vocab)
        attn = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask, b.src_mask, need_weights=True)[1]
        m = getattr(attn, maps)
        rows = [[m[:, i, :, k, q] if swap else m[:, i, :, q, k] for q, k in align(s, t)]
                for i, (s, t) in enumerate(pairs)]
        if average == "per example": return torch.stack([torch.stack(r).mean(0) for r in rows]).mean(0)
        flat = torch.stack([w for r in rows for w in r])
        return flat.max(0).values if average == "max" else flat.sum(0) / len(flat)
    return f

def test_alignment_book_and_alternative(): assert grade_alignment_weight(alignment_weight) and grade_alignment_weight(reading())
def test_alignment_encoder_maps(): fails_with(grade_alignment_weight(reading(maps="encoder")), "encoder's self-attention")
def test_alignment_decoder_maps(): fails_with(grade_alignment_weight(reading(maps="decoder")), "decoder's self-attention")
def test_alignment_query_key_swapped(): fails_with(grade_alignment_weight(reading(swap=True)), "queries and keys are swapped")
def test_alignment_mean_of_means(): fails_with(grade_alignment_weight(reading(average="per example")), "a longer example counts more")
def test_alignment_max(): fails_with(grade_alignment_weight(reading(average="max")), "not the largest")
# the checker hands over the model in eval mode, as train() leaves a trained model (notes/review_training.md, 1)
def test_alignment_without_its_own_eval_call(): assert grade_alignment_weight(reading(eval_mode=False))
def test_alignment_dropout_switched_on(): fails_with(grade_alignment_weight(reading(train=True)), "dropout is on", "model.eval()")


# ---------------------------------------------------------------- how a new module starts (issue 35)

def test_ffn_second_layer_starting_at_zero():
    class M(PositionwiseFeedForward):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw); nn.init.zeros_(self.linear2.weight)
    fails_with(grade_ffn(M), "your new PositionwiseFeedForward starts with `linear2.weight`", "spread")

def test_multihead_output_projection_starting_at_zero():
    class M(MultiHeadAttention):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw); nn.init.zeros_(self.W_o.weight)
    fails_with(grade_multihead(M), "your new MultiHeadAttention starts with `W_o.weight`")

def test_multihead_xavier_initialised_passes():
    "Xavier-uniform is within the spread the checker allows (the whole model is Xavier-initialised in chapter 7)"
    class M(MultiHeadAttention):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            for p in self.parameters():
                if p.dim() > 1: nn.init.xavier_uniform_(p)
    assert grade_multihead(M)


# ---------------------------------------------------------------- chapter 6: the key/value cache
from transformer_nb.layers import LayerCache


def kv(dim=2, new_first=False, store="all", returns="all", length="positions", swap=False, cross=True):
    "A key/value cache as learners write it, with one configurable mistake"
    class C:
        def __init__(self):
            self.k = self.v = None; self.calls = 0
            if cross: self.cross = None
        def append(self, k, v):
            self.calls += 1
            if self.k is None: K, V = k, v
            else:
                K = torch.cat([k, self.k] if new_first else [self.k, k], dim)
                V = torch.cat([v, self.v] if new_first else [self.v, v], dim)
            if store == "all" or self.k is None: self.k, self.v = (V, K) if swap else (K, V)
            return (k, v) if returns == "new" else (K, V)
        def __len__(self): return self.calls if length == "calls" else (0 if self.k is None else self.k.shape[2])
    return C

def test_cache_book_and_alternative():
    assert grade_layer_cache(LayerCache) and grade_layer_cache(kv())
    class Lists:                                                    # lists of steps, concatenated when asked
        def __init__(self): self.ks, self.vs, self.cross = [], [], None
        def append(self, k, v):
            self.ks.append(k); self.vs.append(v); return torch.cat(self.ks, 2), torch.cat(self.vs, 2)
        def __len__(self): return sum(k.shape[2] for k in self.ks)
    assert grade_layer_cache(Lists)

def test_cache_along_heads(): fails_with(grade_layer_cache(kv(dim=1)), "RuntimeError", "Positions are dim 2")
def test_cache_along_d_k(): fails_with(grade_layer_cache(kv(dim=-1)), "RuntimeError", "Positions are dim 2")
def test_cache_new_first(): fails_with(grade_layer_cache(kv(new_first=True)), "new positions go before")
def test_cache_not_stored(): fails_with(grade_layer_cache(kv(store="first")), "keeps only what the first call stored")
def test_cache_returns_only_new(): fails_with(grade_layer_cache(kv(returns="new")), "returns only the new positions")
def test_cache_len_counts_calls(): fails_with(grade_layer_cache(kv(length="calls")), "len counts the calls")
def test_cache_keys_values_swapped(): fails_with(grade_layer_cache(kv(swap=True)), "keys and values are swapped")
def test_cache_without_cross(): fails_with(grade_layer_cache(kv(cross=False)), "`cross = None`")
def test_cache_new_first_and_len_calls_named_in_order():
    fails_with(grade_layer_cache(kv(new_first=True, length="calls")), "(1) the new positions", "(2) len counts")


# ---------------------------------------------------------------- chapter 11c: sampling's filter, top-p's boundary
from transformer_nb.gpt import filter_logits


def filt(crossing="kept", ties="kept", temp="first", kties="kept", order="after top-k"):
    "filter_logits as learners write it (no max subtraction), with one configurable mistake"
    def f(logits, temperature=1.0, top_k=None, top_p=None):
        x = logits.float()
        if temp == "first": x = x / temperature
        if temp == "times": x = x * temperature
        before = x
        if top_k is not None and top_k < x.shape[-1]:
            if kties == "kept": x = torch.where(x >= x.topk(top_k, -1).values[..., -1:], x, -math.inf)
            else: x = torch.full_like(x, -math.inf).scatter(-1, x.topk(top_k, -1).indices, x.topk(top_k, -1).values)
        if top_p is not None and top_p < 1:
            p = (x if order == "after top-k" else before).softmax(-1)
            sp, si = p.sort(-1, descending=True)
            cum = sp.cumsum(-1)
            keep = (cum - sp < top_p) if crossing == "kept" else (cum < top_p)
            if ties == "kept":
                x = torch.where(p >= sp.masked_fill(~keep, 2.0).amin(-1, keepdim=True), x, -math.inf)
            else:
                x = x.masked_fill(~torch.zeros_like(keep).scatter(-1, si, keep), -math.inf)
        if temp == "last": x = x / temperature
        return x
    return f

def test_filter_book_and_alternative():
    assert grade_filter_logits(filter_logits)
    v = grade_filter_logits(filt()); assert v, v

def test_top_p_drops_the_crossing_token(): fails_with(grade_filter_logits(filt(crossing="dropped")), "carries the mass past p", "that token is kept")
def test_top_p_splits_ties(): fails_with(grade_filter_logits(filt(ties="split")), "top-p splits tied tokens")
def test_top_k_splits_ties(): fails_with(grade_filter_logits(filt(kties="split")), "top-k splits ties")
def test_temperature_after_filtering(): fails_with(grade_filter_logits(filt(temp="last")), "applied after the filtering")
def test_temperature_multiplied(): fails_with(grade_filter_logits(filt(temp="times")), "multiplied by the temperature")
def test_top_p_before_top_k(): fails_with(grade_filter_logits(filt(order="before top-k")), "before top-k")
def test_top_p_crossing_dropped_and_ties_split_named_in_order():
    fails_with(grade_filter_logits(filt(crossing="dropped", ties="split")), "(1) top-p drops", "(2) top-p splits")


# ---------------------------------------------------------------- chapter 11e: the induction score

def ind(key="induction", queries="second", pool="all", reduce="mean"):
    "induction_score as learners write it, with loops, and one configurable mistake"
    def f(weights, data):
        B, H, T, _ = weights.shape
        per_seq, rows = [], []
        for b in range(B):
            n, p = int(data.length[b]), int(data.start[b])
            qs = range(T) if queries == "every" else range(p + n, p + 2 * n - 1)
            if queries == "late": qs = range(p + n + 1, p + 2 * n)
            got = []
            for t in qs:
                k = {"induction": t - n + 1, "duplicate": t - n, "previous": t - 1}[key]
                if k < 0: continue
                got.append(weights[b, :, t, k])
            rows += got
            per_seq.append(torch.stack(got).mean(0))
        if reduce == "sum": return torch.stack(rows).sum(0)
        if pool == "per sequence": return torch.stack(per_seq).mean(0)
        return torch.stack(rows).mean(0)
    return f

def test_induction_score_book_and_alternative():
    assert grade_induction_score(induction_score)
    v = grade_induction_score(ind()); assert v, v

def test_induction_score_duplicate_key(): fails_with(grade_induction_score(ind(key="duplicate")), "duplicate-token head")
def test_induction_score_previous_key(): fails_with(grade_induction_score(ind(key="previous")), "previous-token score")
def test_induction_score_late_queries(): fails_with(grade_induction_score(ind(queries="late")), "one position too late")
def test_induction_score_every_query(): fails_with(grade_induction_score(ind(queries="every")), "every position")
def test_induction_score_per_sequence(): fails_with(grade_induction_score(ind(pool="per sequence")), "each sequence first")
def test_induction_score_sum(): fails_with(grade_induction_score(ind(reduce="sum")), "adds the weights")
def test_induction_score_shape():
    fails_with(grade_induction_score(lambda w, d: ind()(w, d)[None]), "(H,)")
def test_induction_score_two_mistakes_named_in_order():
    fails_with(grade_induction_score(ind(key="previous", queries="every")), "(1)", "previous-token score", "(2)",
               "every position")


def test_beam_search_first_k_to_finish_and_eos_kept_are_named():
    """A learner's review: returning the first k hypotheses to finish was explained as two other mistakes (the stopping
    rule, the unfinished ones), and </s> kept in the tokens as 'sort them by score'"""
    import inspect

    from transformer_nb import decoding
    src = inspect.getsource(decoding.beam_search).replace("@torch.no_grad()\n", "")
    def variant(old, new):
        assert old in src
        ns = dict(vars(decoding)); exec(src.replace(old, new), ns); return ns["beam_search"]
    first_k = variant("return sorted(finished, key=lambda h: h.score, reverse=True)[:beam_size]",
                      "return finished[:beam_size]")
    fails_with(grade_beam_search(first_k), "the first beam_size hypotheses that ended")
    eos_kept = variant("beams[row], lp, lp / length_penalty(step, alpha), True",
                       "beams[row] + [eos], lp, lp / length_penalty(step, alpha), True")
    fails_with(grade_beam_search(eos_kept), "keep </s> (2) in their tokens")
