"""The defects a review of the checkers found (notes/review_grading.md and review_training.md): correct answers
written another way that failed, wrong answers that passed and broke a later lesson, and hints that named a mistake
the learner had not made. Each test runs a correct answer written differently (it passes) and the wrong one (it
fails with the message that says what it did)."""
import importlib
import inspect
import re
import sys

import pytest
import torch
from test_exercises import EXERCISES, MODEL_CHAPTERS, NBS, _run_all, load, src
from test_grading import fails_with
from torch import nn

from transformer_nb.book.exercises import exercise_checker, make_exercise_source
from transformer_nb.book.graders_parts import grade_layer_norm
from transformer_nb.book.grading import _READ_LATER


# ---------------------------------------------------------------- LayerNorm: γ and β in either order
class _LN(nn.Module):
    "A right LayerNorm; `names` its (weight, bias) names, `bias_first` declares the bias first"
    names, bias_first = ("weight", "bias"), False
    def __init__(self, d_model, eps=1e-5, fused=True):
        super().__init__()
        self.d_model, self.eps, self.fused = d_model, eps, fused
        g, b = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))
        for n, p in ((self.names[1], b), (self.names[0], g)) if self.bias_first else \
                ((self.names[0], g), (self.names[1], b)):
            setattr(self, n, p)
    def forward(self, x):
        m, v = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        return (x - m) / torch.sqrt(v + self.eps) * getattr(self, self.names[0]) + getattr(self, self.names[1])


def ln(names, bias_first, swapped=False):
    cls = type("LN", (_LN,), {"names": names, "bias_first": bias_first})
    if swapped:  # the mistake: multiply by the bias, add the weight
        cls.forward = lambda self, x: _LN.forward(self, x) * 0 + (
            (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + self.eps)
            * getattr(self, self.names[1]) + getattr(self, self.names[0]))
    return cls


@pytest.mark.parametrize("bias_first", [False, True])
def test_layer_norm_passes_whatever_order_its_parameters_are_declared_in(bias_first):
    "review 1: bias declared first failed, with 'starts with `bias` = 0 … must start at 1' or 'swapped'"
    v = grade_layer_norm(ln(("weight", "bias"), bias_first))
    assert v, v


def test_layer_norm_that_swaps_weight_and_bias_still_fails():
    fails_with(grade_layer_norm(ln(("weight", "bias"), True, swapped=True)), "swapped")


# ---------------------------------------------------------------- what later cells read (review 4 and 7)
def _graded_classes(name):
    "The chapter's classes that the exercises of `name` ask for, the book's"
    chapter = load(NBS / name)
    own = re.search(r"^#\|\s*default_exp\s+(\S+)", "\n".join(src(c) for c in chapter["cells"]), re.M).group(1)
    mod = importlib.import_module(f"transformer_nb.{own}")
    return [getattr(mod, n) for c in chapter["cells"] if c["cell_type"] == "code" and exercise_checker(src(c))
            for n in make_exercise_source(src(c))[1] if isinstance(getattr(mod, n), type)]


def _reads(name):
    """Run All of the unfilled exercise notebook `name` (the book's classes stand in after each check) and record
    which settings and parts without weights of the graded classes' modules are read other than by the methods the
    learner writes (their public methods and __init__): by later cells, by the helpers the scaffold keeps"""
    classes = [c for c in _graded_classes(name) if issubclass(c, nn.Module)]
    learners = {inspect.unwrap(getattr(v, "__func__", v)).__code__ for c in classes for k, v in vars(c).items()
                if (k == "__init__" or not k.startswith("_")) and hasattr(inspect.unwrap(getattr(v, "__func__", v)),
                                                                          "__code__")}
    ours = str(NBS.parent / "transformer_nb" / "book")
    reads, saved = set(), []
    def note(self, k, v):
        weightless = isinstance(v, nn.Module) and not any(True for _ in v.parameters()) \
            and not any(True for _ in v.buffers())
        if not (v is None or isinstance(v, (bool, int, float, str)) or weightless) or k.startswith("_"): return
        f = sys._getframe(2)
        if f.f_code in learners or f.f_code.co_filename.startswith(ours) or "torch" in f.f_code.co_filename: return
        reads.add((type(self).__name__, k))
    for cls in classes:
        get, getattr_ = cls.__getattribute__, cls.__getattr__
        def ga(self, k, _get=get):
            v = _get(self, k)
            if k in object.__getattribute__(self, "__dict__"): note(self, k, v)
            return v
        def gm(self, k, _getattr=getattr_):
            v = _getattr(self, k)
            note(self, k, v)
            return v
        saved.append((cls, vars(cls).get("__getattribute__"), vars(cls).get("__getattr__")))
        cls.__getattribute__, cls.__getattr__ = ga, gm
    try:
        errors, _ = _run_all([(i, src(c)) for i, c in enumerate(load(EXERCISES / name)["cells"])
                              if c["cell_type"] == "code"])
    finally:
        for cls, a, b in saved:
            for k, v in (("__getattribute__", a), ("__getattr__", b)):
                if v is None: delattr(cls, k)
                else: setattr(cls, k, v)
    assert not errors, errors
    return reads


def _code(text):
    "A cell's source without its comments (the lines of an IPython magic are kept as they are)"
    import io
    import tokenize
    lines = text.splitlines(keepends=True)
    try:
        comments = [t.start for t in tokenize.generate_tokens(io.StringIO(text).readline)
                    if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return "".join(line for line in lines if not line.lstrip().startswith("#"))
    for row, col in reversed(comments): lines[row - 1] = lines[row - 1][:col].rstrip() + "\n"
    return "".join(lines)


@pytest.mark.parametrize("name", [n for n in MODEL_CHAPTERS
                                  if any(c.__name__ in _READ_LATER for c in _graded_classes(n))])
def test_the_checkers_ask_for_what_later_cells_read(name):
    """Every setting and part without weights that a later cell of the exercise notebook reads is in _READ_LATER
    (the checker asks for it); and each entry of _READ_LATER is read there (a `.name` in a later cell or in a helper
    the scaffold keeps), so that 'later cells of the exercise read it' is true"""
    read = _reads(name)
    for cls, k in read: assert k in _READ_LATER.get(cls, ()), f"{name}: a later cell reads {cls}.{k}"
    cells = load(EXERCISES / name)["cells"]
    for cls in _graded_classes(name):
        first = next(i for i, c in enumerate(cells) if re.search(rf"^class {cls.__name__}\b", src(c), re.M))
        # the code only: the scaffold's TODO comment names every setting of the class
        later = "\n".join(_code(src(c)) for c in cells[first:] if c["cell_type"] == "code")
        for k in _READ_LATER.get(cls.__name__, ()):
            assert re.search(rf"\.{k}\b", later), f"{name}: nothing after {cls.__name__} reads .{k}"


def test_the_gpt_settings_asked_for_are_read_later():
    "11c trains for a minute: its table entry is checked by the reads in its later cells only"
    cells = load(EXERCISES / "11c_gpt.ipynb")["cells"]
    first = next(i for i, c in enumerate(cells) if re.search(r"^class GPT\b", src(c), re.M))
    later = "\n".join(src(c) for c in cells[first + 1:] if c["cell_type"] == "code")
    for k in _READ_LATER["GPT"]: assert re.search(rf"\bmodel\.{k}\b", later), k


class _Tok(nn.Module):
    "A right TokenEmbedding that keeps `vocab_size` (later cells read it) and no `scale`; `scale` set: stored as given"
    scale = None
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.vocab_size, self.d_model = vocab_size, d_model
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)
        if padding_idx is not None:
            with torch.no_grad(): self.embed.weight[padding_idx].zero_()
        if type(self).scale is not None: self.scale = torch.tensor(d_model ** 0.5)
    def forward(self, ids): return self.embed(ids) * self.d_model ** 0.5


def test_settings_no_later_cell_reads_may_be_kept_as_the_learner_likes():
    "review 4: TokenEmbedding without `scale`, or with it as a tensor, failed: 'later cells of the exercise read it'"
    from transformer_nb.book.graders_parts import grade_ffn, grade_token_embedding
    from transformer_nb.ffn import PositionwiseFeedForward
    assert grade_token_embedding(_Tok)
    assert grade_token_embedding(type("Tok", (_Tok,), {"scale": True}))
    class NoVocab(_Tok):
        def __init__(self, *a, **k): super().__init__(*a, **k); del self.vocab_size
    fails_with(grade_token_embedding(NoVocab), "no attribute `vocab_size`", "later cells of the exercise read")
    class NoFused(_LN):
        def __init__(self, *a, **k): super().__init__(*a, **k); del self.fused
    assert grade_layer_norm(NoFused)
    class NoDff(PositionwiseFeedForward):
        def __init__(self, *a, **k): super().__init__(*a, **k); del self.d_ff
    assert grade_ffn(NoDff)


def test_a_setting_stored_otherwise_is_told_what_it_holds_not_that_it_was_not_passed_on():
    "review 7: 'n_kv_heads=4 is not passed on' where the checker passed none, 'dropout=0.0 is not passed on' where it was"
    from transformer_nb.book.graders_parts import grade_multihead
    from transformer_nb.multihead import MultiHeadAttention
    class AsGiven(MultiHeadAttention):             # n_kv_heads=None kept, not read as H
        def __init__(self, d_model, num_heads, dropout=0.0, bias=True, n_kv_heads=None, **kw):
            super().__init__(d_model, num_heads, dropout=dropout, bias=bias, n_kv_heads=n_kv_heads, **kw)
            self.n_kv_heads = n_kv_heads
    v = grade_multihead(AsGiven)
    fails_with(v, "`self.n_kv_heads` is None where the chapter's is 4, an int", "later cells")
    assert "passed on" not in v.message
    class DropModule(MultiHeadAttention):          # the float p kept as a module
        def __init__(self, *a, dropout=0.0, **kw):
            super().__init__(*a, dropout=dropout, **kw); self.dropout = nn.Dropout(dropout)
    v = grade_multihead(DropModule)
    fails_with(v, "`self.dropout` is Dropout(p=0.0", "where the chapter's is 0.0, a float")
    assert "passed on" not in v.message


# ---------------------------------------------------------------- greedy search: the cache, however it is passed
def _greedy(model, src, src_mask=None, max_len=32, use_cache=True, bos=1, pad=0, eos=2, pick=None, how="position"):
    "The chapter's greedy search with a LayerCache per layer, passed to model.decode by position or by keyword"
    from transformer_nb.layers import LayerCache
    from transformer_nb.masking import causal_mask
    memory = model.encode(src, src_mask)
    ys = torch.full((src.shape[0], 1), bos, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    caches = [LayerCache() for _ in model.decoder.layers] if use_cache else None
    out = []
    with torch.no_grad():
        for t in range(max_len):
            if not use_cache: logits = model.decode(ys, memory, causal_mask(t + 1), src_mask)[:, -1]
            elif how == "position": logits = model.decode(ys[:, -1:], memory, None, src_mask, False, caches)[:, -1]
            elif how == "fresh":    # the mistake: a new cache at every step, and the whole prefix
                logits = model.decode(ys, memory, causal_mask(t + 1), src_mask,
                                      cache=[LayerCache() for _ in model.decoder.layers])[:, -1]
            else: logits = model.decode(ys[:, -1:], memory, None, src_mask, cache=caches)[:, -1]
            out.append(logits)
            nxt = logits.argmax(-1) if pick is None else pick(logits)
            if eos is not None: nxt = nxt.masked_fill(done, pad)
            ys = torch.cat([ys, nxt[:, None]], 1)
            if eos is None: continue
            done |= nxt == eos
            if done.all(): break
    return ys[:, 1:], torch.stack(out, 1)


def test_greedy_search_that_passes_its_cache_by_position_passes():
    "review 3: the cache passed to model.decode by position was 'never got the cache ... re-read the whole prefix'"
    from transformer_nb.book.graders_decoding import grade_greedy_search
    assert grade_greedy_search(_greedy)
    def keyword(*a, **k): return _greedy(*a, **k, how="keyword")
    keyword.__signature__ = inspect.signature(_greedy)
    assert grade_greedy_search(keyword)
    def never(model, src, src_mask=None, max_len=32, use_cache=True, bos=1, pad=0, eos=2, pick=None):
        return _greedy(model, src, src_mask, max_len, False, bos, pad, eos, pick)
    fails_with(grade_greedy_search(never), "use_cache=True: the decoder never got the cache and re-read the prefix")


# ---------------------------------------------------------------- make_batch: the hint, the check and chapter 9 agree
def _batch(fill_eos=True, separately=False):
    "make_batch from the hint's recipe (cut in two), or with tgt_in and tgt_out built apart"
    from transformer_nb.data import Batch
    from transformer_nb.masking import pad_batch, padding_mask, target_mask
    def mb(pairs, vocab, device=None):
        src = pad_batch([vocab.encode(s) for s, _ in pairs], vocab.pad)
        if separately:
            tgt_in = pad_batch([vocab.encode(t, bos=True) for _, t in pairs], vocab.pad)
            tgt_out = pad_batch([vocab.encode(t, eos=True) for _, t in pairs], vocab.pad)
        else:
            tgt = pad_batch([vocab.encode(t, bos=True, eos=True) for _, t in pairs], vocab.pad)
            tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
            if fill_eos: tgt_in = tgt_in.masked_fill(tgt_in == vocab.eos, vocab.pad)
        src, tgt_in, tgt_out = (t.to(device) for t in (src, tgt_in, tgt_out))
        return Batch(src, tgt_in, tgt_out, padding_mask(src, vocab.pad), target_mask(tgt_in, vocab.pad))
    return mb


def test_make_batch_keeping_a_shorter_targets_eos_is_named_as_chapter_9s_lesson_needs():
    "review 2: the hint's recipe passed, and the lesson after the check failed on tgt_in[1] with a bare assertion"
    from transformer_nb.book.exercises import EFFORT
    from transformer_nb.book.graders_training import grade_make_batch
    from transformer_nb.data import Vocab
    assert grade_make_batch(_batch()) and grade_make_batch(_batch(separately=True))
    fails_with(grade_make_batch(_batch(fill_eos=False)), "[1, 7, 13, 2, 0, 0]", "expected [1, 7, 13, 0, 0, 0]",
               "</s> stays in tgt_in", "masked_fill(tgt_in == vocab.eos, vocab.pad)")
    assert "</s> left in tgt_in becomes <pad>" in EFFORT["grade_make_batch"][2]
    # what the lesson after the check asserts, on the answers that pass
    b = _batch(separately=True)([("40721", "12704"), ("93", "39")], Vocab("0123456789"))
    assert b.tgt_in[1].tolist() == [1, 7, 13, 0, 0, 0]
    lesson = next(src(c) for c in load(EXERCISES / "09_data.ipynb")["cells"]
                  if "b.tgt_in[1].tolist(), [1, 7, 13, 0, 0, 0]" in src(c))
    assert lesson


# ---------------------------------------------------------------- alignment_weight (review_training 1, review 8)
def _aw(eval_first=False, memory=True, train=False, swap=False):
    "alignment_weight read off one teacher-forced run"
    from transformer_nb.data import make_batch
    @torch.no_grad()
    def aw(model, vocab, pairs, align):
        if eval_first: model.eval()
        if train: model.train()
        b = make_batch(pairs, vocab)
        _, attn = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask, b.src_mask if memory else None,
                        need_weights=True)
        ws = [attn.cross[:, i, :, k, q] if swap else attn.cross[:, i, :, q, k]
              for i, (s, t) in enumerate(pairs) for q, k in align(s, t)]
        return torch.stack(ws).mean(0)
    return aw


def test_alignment_weight_need_not_switch_the_model_to_eval_mode():
    "review_training 1: the model came in training mode, and the hint said '(1) queries and keys are swapped'"
    from transformer_nb.book.graders_training import grade_alignment_weight
    assert grade_alignment_weight(_aw()) and grade_alignment_weight(_aw(eval_first=True))
    v = grade_alignment_weight(_aw(train=True))
    fails_with(v, "changes from call to call", "dropout is on", "eval mode")
    assert "swapped" not in v.message
    fails_with(grade_alignment_weight(_aw(swap=True)), "queries and keys are swapped")


def test_alignment_weight_without_the_memory_mask_is_told_so():
    "review 8: told to 'average attn.cross[...]', which it did; the padded source keys were the difference"
    from transformer_nb.book.graders_training import grade_alignment_weight
    v = grade_alignment_weight(_aw(memory=False))
    fails_with(v, "padded source keys", "memory_mask")
    assert "average attn.cross" not in v.message


def test_explain_names_nothing_when_nothing_deviates():
    "review_training 1: explain tried one and two deviations, never none, and fell back to a hint per case"
    from transformer_nb.book.grading import explain
    x = torch.arange(6.0).view(2, 3)
    compute = lambda transpose=False: (x.T if transpose else x).softmax(-1)
    axes = [("transpose", {True: "the softmax runs over the wrong axis"})]
    assert explain([compute()], [compute], axes) == []
    assert explain([compute(transpose=True)], [compute], axes) == ["the softmax runs over the wrong axis"]


# ---------------------------------------------------------------- what the cells after an exercise use (review 5)
def _decoder_layer(cross_optional=True, use_cache=True, cross_cache=True, keep_norm2=False):
    "A DecoderLayer written out by hand (no _sa_block, no _normed): the paper's options, then the later cells'"
    from transformer_nb.core import Dropout
    from transformer_nb.ffn import PositionwiseFeedForward
    from transformer_nb.layers import _Sublayers
    from transformer_nb.multihead import MultiHeadAttention
    from transformer_nb.norms import LayerNorm
    class DL(_Sublayers):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.1, norm_first=True, activation="relu",
                     cross_attention=True, norm="layer", n_kv_heads=None, rope=False, qk_norm=False, bias=True):
            super().__init__()
            cross = cross_attention or not cross_optional
            self.d_model, self.num_heads, self.norm_first = d_model, num_heads, norm_first
            self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
            self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout) if cross else None
            self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation)
            self.norm1, self.norm3 = LayerNorm(d_model), LayerNorm(d_model)
            self.norm2 = LayerNorm(d_model) if cross or keep_norm2 else None
            self.dropout = Dropout(dropout)
        def forward(self, y, memory=None, tgt_mask=None, memory_mask=None, need_weights=True, cache=None):
            c = cache if use_cache else None
            sa = lambda h: self.self_attn(h, h, h, mask=tgt_mask, need_weights=need_weights, cache=c)
            ca = lambda h: self.cross_attn(h, memory, memory, mask=memory_mask, need_weights=need_weights,
                                           cache=c if cross_cache else None)
            wc = None
            if self.norm_first:
                a, ws = sa(self.norm1(y)); y = y + self.dropout(a)
                if self.cross_attn is not None: a, wc = ca(self.norm2(y)); y = y + self.dropout(a)
                return y + self.dropout(self.ffn(self.norm3(y))), ws, wc
            a, ws = sa(y); y = self.norm1(y + self.dropout(a))
            if self.cross_attn is not None: a, wc = ca(y); y = self.norm2(y + self.dropout(a))
            return self.norm3(y + self.dropout(self.ffn(y))), ws, wc
        def _check_inputs(self, *a, **k): pass
    return DL


def test_decoder_layer_is_checked_without_cross_attention_and_with_a_cache():
    "review 5: a layer with the paper's options only passed, and the cell after the check (x025) failed"
    from transformer_nb.book.graders_stack import grade_decoder_layer
    assert grade_decoder_layer(_decoder_layer())
    fails_with(grade_decoder_layer(_decoder_layer(cross_optional=False)), "cross_attention=False is ignored")
    fails_with(grade_decoder_layer(_decoder_layer(use_cache=False)), "one position at a time with a LayerCache",
               "the cache is not used", "self_attn(..., cache=cache)")


def test_decoder_stack_passes_cross_attention_on():
    "review 5: the later cell builds Decoder(..., cross_attention=False), a decoder-only stack"
    from transformer_nb.book.graders_stack import grade_decoder
    from transformer_nb.layers import Decoder, DecoderLayer, _Stack
    class Deaf(Decoder):        # builds its layers with cross-attention whatever it is asked
        def __init__(self, d_model, num_heads, d_ff, num_layers=6, dropout=0.1, norm_first=True,
                     activation="relu", final_norm=None, cross_attention=True, **kw):
            _Stack.__init__(self, [DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation)
                                   for _ in range(num_layers)], norm_first, final_norm)
    fails_with(grade_decoder(Deaf), "cross_attention=False is not passed on to the layers")


def test_ffn_bias_false_is_checked():
    "review 5: a feed-forward network that ignored bias=False passed; the cells after it build one (x034)"
    from transformer_nb.book.graders_parts import grade_ffn
    from transformer_nb.ffn import PositionwiseFeedForward
    class Biased(PositionwiseFeedForward):
        def __init__(self, d_model, d_ff=2048, dropout=0.1, activation="relu", bias=True):
            super().__init__(d_model, d_ff, dropout, activation)
    fails_with(grade_ffn(Biased), "bias=False is ignored")


# ---------------------------------------------------------------- the residual connection (review 6)
class _Connection(nn.Module):
    "A SublayerConnection written inline (no call of residual); `norm` builds its norm"
    norm_of = staticmethod(lambda d: nn.LayerNorm(d))
    def __init__(self, d_model, dropout=0.1, norm_first=True):
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        self.norm, self.dropout = self.norm_of(d_model), nn.Dropout(dropout)
    def forward(self, x, sublayer):
        if self.norm_first: return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


def test_sublayer_is_judged_against_the_books_layer_norm():
    "review 6: with no norm (nn.Identity), or a LayerNorm without γ and β, the connection passed"
    from transformer_nb.book.graders_parts import grade_sublayer
    assert grade_sublayer(_Connection)                                     # torch's LayerNorm: the same numbers
    for norm in (lambda d: nn.Identity(), lambda d: nn.LayerNorm(d, elementwise_affine=False)):
        fails_with(grade_sublayer(type("C", (_Connection,), {"norm_of": staticmethod(norm)})),
                   "has no weights", "LayerNorm")
    class Scaled(nn.LayerNorm):
        def forward(self, x): return super().forward(x) * 1.5
    fails_with(grade_sublayer(type("C", (_Connection,), {"norm_of": staticmethod(lambda d: Scaled(d))})),
               "its norm does not compute chapter 5's LayerNorm")


def test_the_residual_function_of_the_exercise_is_checked():
    "review 6: a wrong `residual` passed (the check never called it) and was handed on to the cells below"
    from transformer_nb.book.graders_parts import grade_sublayer
    from transformer_nb.norms import residual
    def always_post(x, sublayer, norm, dropout, norm_first):
        return norm(x + dropout(sublayer(x)))
    def dropped_sum(x, sublayer, norm, dropout, norm_first):
        return dropout(x + sublayer(norm(x))) if norm_first else norm(dropout(x + sublayer(x)))
    def unfilled(x, sublayer, norm, dropout, norm_first):
        "the exercise's stub"
        ...
    def keyword(x, sublayer, norm, dropout, norm_first):                  # written otherwise: right
        h = norm(x) if norm_first else x
        out = x + dropout(sublayer(h))
        return out if norm_first else norm(out)
    assert grade_sublayer(_Connection, residual) and grade_sublayer(_Connection, keyword)
    fails_with(grade_sublayer(_Connection, always_post), "your residual", "norm_first=True asks for pre-LN",
               "you computed post-LN")
    fails_with(grade_sublayer(_Connection, dropped_sum), "your residual", "dropout belongs on the sublayer's output")
    unfilled.__name__ = "residual"                                         # as the exercise names it
    v = grade_sublayer(_Connection, unfilled)
    fails_with(v, "`residual` still holds the `...`")
    assert v.book_if_unfilled(unfilled) is residual and "use the book's `residual` too" in v.message


# ---------------------------------------------------------------- stacks: the final norm is _Stack's (review 9)
def test_a_stack_that_does_not_pass_final_norm_to_its_base_class_is_told_so():
    "review 9: told to 'create self.norm = LayerNorm(d_model)', which _Stack does when final_norm reaches it"
    from conftest import stack_encoder
    from transformer_nb.book.graders_stack import grade_encoder
    enc = lambda final: stack_encoder(lambda nf, fn: (nf, final(fn)))
    assert grade_encoder(enc(lambda f: f))
    v = grade_encoder(enc(lambda f: None))
    fails_with(v, "final_norm=True is not passed on to the base class", "super().__init__(layers, norm_first, final_norm)")
    assert "create self.norm" not in v.message


# ---------------------------------------------------------------- prose and scaffolds (review 11-14, review_training 15)
def test_the_held_out_dates_have_the_widths_the_page_gives():
    "review 11: '8 to 28 columns' where the eight held-out dates have 10 to 18"
    from transformer_nb.data import make_task
    task = make_task("dates")
    widths = [len(task.vocab.encode(s)) for s, _ in task.valid[:8]]
    assert (min(widths), max(widths)) == (10, 18)
    md = "\n".join(src(c) for c in load(NBS / "91c_graders_training.ipynb")["cells"] if c["cell_type"] == "markdown")
    assert "10 to 18 columns" in md and "8 to 28" not in md


def test_the_helpers_the_grading_page_names_exist():
    "review 12: the page named `_nontrivial` and `_same_parts`, and Exercise put the checkers in book.grading"
    from transformer_nb.book import grading
    from transformer_nb.book.exercises import (
        EFFORT,
        Exercise,
        grader_module,
        list_exercises,
    )
    cell = next(src(c) for c in load(NBS / "91_grading.ipynb")["cells"] if c.get("id") == "c015")
    for name in re.findall(r"`(\w+)`", cell):
        if name not in ("weight", "bias", "load_state_dict"): assert hasattr(grading, name), name
    assert "in transformer_nb.book.grading" not in Exercise.__doc__
    for e in list_exercises(NBS):
        assert hasattr(importlib.import_module(grader_module(e.chapter)), e.checker), e.checker
    assert set(EFFORT) == {e.checker for e in list_exercises(NBS)}


def _stub(name, cls):
    return next(src(c) for c in load(EXERCISES / name)["cells"] if re.search(rf"^class {cls}\b", src(c), re.M)
                and "# TODO" in src(c))


def test_the_init_todo_fits_the_class():
    "review 13, review_training 15: LayerCache (no nn.Module) and LabelSmoothingLoss (no weights) were told to call "
    "super().__init__() and that 'the checker gives them the book's weights'"
    cache, loss = _stub("06_layers.ipynb", "LayerCache"), _stub("10_training.ipynb", "LabelSmoothingLoss")
    for stub in (cache, loss): assert "book's weights" not in stub
    assert "super().__init__()" not in cache and "fused_projection" not in cache
    assert "keep the settings of LabelSmoothingLoss" in loss
    mha = " ".join(l.strip().lstrip("#").strip() for l in _stub("03_multihead.ipynb", "MultiHeadAttention").split("\n"))
    assert "call super().__init__(), then build the parts and settings" in mha
    assert "the checker gives the parts the book's weights by name" in mha


def test_only_the_error_lessons_are_marked_optional():
    "review 14: the 'optional' line opened whole cells whose lessons are required (01's x019, 05's x030, 06's x025)"
    for name in sorted(p.name for p in EXERCISES.glob("*.ipynb")):
        for c in load(EXERCISES / name)["cells"]:
            lines = src(c).split("\n")
            for i, line in enumerate(lines):
                if line.startswith("# optional: the book's implementation raises"):
                    assert lines[i + 1].startswith("# test_fail("), (name, c["id"], lines[i + 1])
    x025 = next(src(c) for c in load(EXERCISES / "06_layers.ipynb")["cells"] if "gpt_layer = DecoderLayer" in src(c))
    assert not x025.startswith("# optional")
