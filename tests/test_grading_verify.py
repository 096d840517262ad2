"""The defects a verification of the reviewed checkers found (notes/verify_grading.md): wrong answers that passed
and broke a later lesson, and correct answers told of a mistake they did not make. Each test runs the wrong answer
(it fails with the message that says what it did and what was expected) and a correct one (it passes)."""
import pytest
from test_grading import fails_with
from test_grading_review import _Connection, _decoder_layer, ln

from transformer_nb.book.graders_parts import grade_layer_norm


# ---------------------------------------------------------------- 1. the cross-attention's cache
def test_decoder_layer_that_keeps_the_cache_from_its_cross_attention_is_told_so():
    "verify 1: a layer that gave the cache to its self-attention only passed, then x025 read cache.cross (None)"
    from transformer_nb.book.graders_stack import grade_decoder_layer
    assert grade_decoder_layer(_decoder_layer())
    fails_with(grade_decoder_layer(_decoder_layer(cross_cache=False)), "cache.cross is still None",
               "cross_attn(..., cache=cache)", "the cell after this check reads cache.cross")


# ---------------------------------------------------------------- 2. γ and β are `weight` and `bias`: later cells read them
LN_WHY = ("name them `weight` and `bias`", "as the TODO does", "load_state_dict", "pairs parameters by name")


@pytest.mark.parametrize("bias_first", [False, True])
@pytest.mark.parametrize("swapped", [False, True])
def test_layer_norm_under_other_names_is_told_why_the_names_are_fixed(bias_first, swapped):
    "verify 2: γ and β as `gamma`/`beta` passed, then x016 (load_state_dict from nn.LayerNorm) and x030 failed"
    v = grade_layer_norm(ln(("gamma", "beta"), bias_first, swapped=swapped))
    fails_with(v, "your LayerNorm's γ and β are named", "`gamma`", "`beta`", *LN_WHY,
               "`ours.weight.grad`", "`norm.weight` and `norm.bias`")
    assert "swapped" not in v.message and "must start at" not in v.message  # verify 3: no made-up mistakes
    assert grade_layer_norm(ln(("weight", "bias"), bias_first))


def test_sublayer_whose_norm_names_gamma_and_beta_otherwise_is_told_why():
    "verify 2: a SublayerConnection whose norm held `gamma`/`beta` passed, then x030 read pre.norm.weight"
    from transformer_nb.book.graders_parts import grade_sublayer
    C = lambda names: type("C", (_Connection,), {"norm_of": staticmethod(lambda d: ln(names, True)(d))})
    fails_with(grade_sublayer(C(("gamma", "beta"))), "your `self.norm`'s γ and β are named", *LN_WHY,
               "`pre.norm.weight` and `post.norm.bias`")
    assert grade_sublayer(C(("weight", "bias")))


# ---------------------------------------------------------------- 4. the cache lives through the loop
def test_greedy_search_that_makes_a_new_cache_every_step_is_told_so():
    "verify 4: a new cache and the whole prefix at every step passed; exercise 11's timing (x052) had nothing to find"
    import inspect

    from test_grading_review import _greedy

    from transformer_nb.book.graders_decoding import grade_greedy_search
    def fresh(*a, **k): return _greedy(*a, **k, how="fresh")
    fresh.__signature__ = inspect.signature(_greedy)
    fails_with(grade_greedy_search(fresh), "use_cache=True: the decoder got a new cache at each of the 6 steps",
               "the whole prefix (6 positions at the last step)", "saves no work",
               "Build one KVCache before the loop")
    assert grade_greedy_search(_greedy)


# ---------------------------------------------------------------- 5. a part later cells only call may be a function
def test_ffn_whose_activation_is_a_function_passes():
    "verify 5: `self.act = F.gelu` was told 'has no part `self.act`'; x031 and x036 only call it"
    import torch.nn.functional as F

    from transformer_nb.book.graders_parts import grade_ffn
    from transformer_nb.ffn import PositionwiseFeedForward
    class Fn(PositionwiseFeedForward):
        def __init__(self, d_model, d_ff=2048, dropout=0.1, activation="relu", bias=True):
            super().__init__(d_model, d_ff, dropout, activation, bias)
            if activation in ("relu", "gelu"):    # swiglu (chapter 11f's) as the book builds it
                del self.act                      # the book's module, which torch will not replace
                self.act = {"relu": F.relu, "gelu": F.gelu}[activation]
    v = grade_ffn(Fn)
    assert v, v
    class Named(PositionwiseFeedForward):    # the wrong answer: a name where a callable belongs
        def __init__(self, d_model, d_ff=2048, dropout=0.1, activation="relu", bias=True):
            super().__init__(d_model, d_ff, dropout, activation, bias)
            del self.act
            self.act = activation
    fails_with(grade_ffn(Named), "`self.act` is 'relu', which cannot be called",
               "later cells of the exercise call it", "a module or a function")


# ---------------------------------------------------------------- 9. a size is an int
def test_a_size_stored_as_a_float_is_told_it_must_be_an_int():
    "verify 9: `self.d_k = d_model / num_heads` (6.0) passed, then x026 sliced W_q.weight with it"
    from transformer_nb.book.graders_parts import grade_multihead
    from transformer_nb.multihead import MultiHeadAttention
    class Float(MultiHeadAttention):
        def __init__(self, d_model, num_heads, *a, **k):
            super().__init__(d_model, num_heads, *a, **k)
            self.d_k = d_model / num_heads
    fails_with(grade_multihead(Float), "`self.d_k` is 6.0 where the chapter's is 6, an int",
               "in slices and shapes, where a float cannot go: store an int")
    class Int(MultiHeadAttention):
        def __init__(self, d_model, num_heads, *a, **k):
            super().__init__(d_model, num_heads, *a, **k)
            self.d_k = int(d_model / num_heads)
    assert grade_multihead(Int)


# ---------------------------------------------------------------- 7. norm_first not passed on to _Stack
def test_a_stack_that_gives_its_base_class_norm_first_true_is_told_to_pass_it_on():
    "verify 7: super().__init__(layers, True, final_norm) was told to 'create self.norm only when norm_first'"
    from conftest import stack_encoder
    from transformer_nb.book.graders_stack import grade_encoder
    enc = lambda to_base: stack_encoder(lambda nf, fn: (to_base(nf), fn))
    v = grade_encoder(enc(lambda nf: True))
    fails_with(v, "norm_first=False: a post-LN stack has no final LayerNorm", "but yours has one",
               "pass norm_first and final_norm on to the base class", "super().__init__(layers, norm_first, final_norm)")
    assert "Create self.norm" not in v.message
    assert grade_encoder(enc(lambda nf: nf))


# ---------------------------------------------------------------- 8. no norm2 without cross-attention
def test_decoder_layer_that_keeps_norm2_without_cross_attention_is_told_so():
    "verify 8: an unused norm2 got 'parameters do not match … Missing: none', which named neither the case nor norm2"
    from transformer_nb.book.graders_stack import grade_decoder_layer
    v = grade_decoder_layer(_decoder_layer(keep_norm2=True))
    fails_with(v, "cross_attention=False: your layer builds no cross-attention but still builds self.norm2",
               "asks for no norm2 without cross-attention (self.norm2 = None)")
    assert "ignored" not in v.message
    assert grade_decoder_layer(_decoder_layer())


# ---------------------------------------------------------------- 11. "each entry is read" reads code, not the TODO
def test_the_read_later_check_does_not_count_the_todo_comment():
    "verify 11: the search for `.fused` matched the scaffold's TODO comment, so an unread entry would have passed"
    import re

    from test_exercises import EXERCISES, load, src
    from test_grading_review import _code
    assert _code("x = a.b  # self.fused\n# self.scale, self.d_ff\ny = '#.c'\n") == "x = a.b\n\ny = '#.c'\n"
    cells = load(EXERCISES / "05_norms.ipynb")["cells"]
    first = next(i for i, c in enumerate(cells) if re.search(r"^class LayerNorm\b", src(c), re.M))
    todo = src(cells[first])
    assert re.search(r"\.fused\b", todo) and not re.search(r"\.fused\b", _code(todo))


# ---------------------------------------------------------------- 12. a padded query's row may hold anything
def test_target_mask_with_padded_rows_open_on_the_diagonal_passes():
    "verify 12: the book's mask | eye(T) failed on a padded query's row, which the grader itself says is never read"
    import torch

    from transformer_nb.book.graders_stack import grade_target_mask
    def causal(T): return torch.ones(T, T, dtype=torch.bool).tril()
    def eye(t, pad):
        return (t != pad)[:, None, None, :] & causal(t.shape[1]) | torch.eye(t.shape[1], dtype=torch.bool)
    assert grade_target_mask(eye)
    # the real queries' rows are still checked
    fails_with(grade_target_mask(lambda t, pad: causal(t.shape[1]).expand(t.shape[0], 1, -1, -1)),
               "with the padding at the start", "the padding is missing")
    def wrong(t, pad): return (t != pad)[:, None, :, None] & causal(t.shape[1])  # rows, not columns
    fails_with(grade_target_mask(wrong), "hides the padded queries (rows), not the padded keys (columns)")


# ---------------------------------------------------------------- 13. a heading's own section of the paper
def test_the_residual_todos_name_the_section_their_heading_is_about():
    "verify 13: SublayerConnection's and residual's TODOs said 'section 5.3' (the warm-up, an aside) for section 3.1"
    from test_exercises import EXERCISES, load, src

    from transformer_nb.book.exercises import _section
    assert _section("The paper (section 3.1) … (section 5.4) … section 5.3.", first=True) == "3.1"
    assert _section("The paper (section 3.1) … (section 5.4) … section 5.3.") == "5.3"
    text = "".join(src(c) for c in load(EXERCISES / "05_norms.ipynb")["cells"])
    todos = [line for line in text.splitlines() if "Paper: section" in line]
    assert todos and all("section 3.1" in line for line in todos), todos


# ---------------------------------------------------------------- 6. every mask of the model's call is named
@pytest.mark.parametrize("left_out, told", [
    ("tgt", "the target mask is not passed"),
    ("src", "the encoder got no source mask"),
    ("all", "the model got no masks"),
])
def test_alignment_weight_without_a_mask_is_told_which(left_out, told):
    "verify 6: leaving out tgt_mask, the encoder's src_mask or every mask was told to 'average attn.cross[…]'"
    import torch

    from transformer_nb.book.graders_training import grade_alignment_weight
    from transformer_nb.data import make_batch
    @torch.no_grad()
    def aw(model, vocab, pairs, align):
        b = make_batch(pairs, vocab)
        keep = lambda which, m: None if left_out in (which, "all") else m
        _, attn = model(b.src, b.tgt_in, keep("src", b.src_mask), keep("tgt", b.tgt_mask),
                        keep("memory", b.src_mask), need_weights=True)
        return torch.stack([attn.cross[:, i, :, q, k] for i, (s, t) in enumerate(pairs)
                            for q, k in align(s, t)]).mean(0)
    v = grade_alignment_weight(aw)
    fails_with(v, told, "model(b.src, b.tgt_in, b.src_mask, b.tgt_mask, b.src_mask, need_weights=True)")
    assert "average attn.cross" not in v.message
    left_out = None
    assert grade_alignment_weight(aw)


# ---------------------------------------------------------------- 10. dropout on every sublayer's output
def test_a_layer_that_drops_one_sublayers_output_only_is_told_which_it_missed():
    "verify 10: residual dropout on the FFN branch only passed with 'dropout passed on'"
    from torch import nn

    from transformer_nb.book.graders_stack import grade_encoder_layer
    from transformer_nb.layers import EncoderLayer
    def layer(drop_attn):
        class L(EncoderLayer):
            def forward(self, x, src_mask=None, need_weights=True):
                drop = self.dropout if drop_attn else nn.Identity()
                if self.norm_first:
                    h = self.norm1(x)
                    a, w = self.self_attn(h, h, h, mask=src_mask, need_weights=need_weights)
                    x = x + drop(a)
                    return x + self.dropout(self.ffn(self.norm2(x))), w
                a, w = self.self_attn(x, x, x, mask=src_mask, need_weights=need_weights)
                x = self.norm1(x + drop(a))
                return self.norm2(x + self.dropout(self.ffn(x))), w
        return L
    fails_with(grade_encoder_layer(layer(False)), "the self-attention sublayer's output is not dropped",
               "x + dropout(sublayer(norm(x)))")
    assert grade_encoder_layer(layer(True))


def test_a_stack_that_gives_dropout_to_its_first_layer_only_is_told_so():
    "it passed: training mode changed the output, as one dropping layer is enough for that"
    from torch import nn

    from transformer_nb.book.graders_stack import grade_encoder
    from transformer_nb.layers import Encoder

    class FirstOnly(Encoder):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            for layer in list(self.layers)[1:]:
                for x in layer.modules():
                    if isinstance(x, nn.Dropout): x.p = 0.0
    v = grade_encoder(FirstOnly)
    assert not v.passed and "the layers drop out differently" in str(v)
    assert grade_encoder(Encoder).passed
