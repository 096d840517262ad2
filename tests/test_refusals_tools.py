"""The bad-input audit of the public API (notes/audit_doors.md), the tools beside the model: reading a trained model,
batches, the training helpers, the language model's helpers, checkpoints. Each case used to give a silent wrong
answer, NaN, or an error from inside torch or Python that named something the caller never passed; each now raises
a ValueError/TypeError naming the caller's argument, once, at the door."""
import math

import pytest
import torch
from torch import nn

from transformer_nb.checkpoints import load_model, save_model
from transformer_nb.data import Vocab, batch_stream, make_batch, make_task
from transformer_nb.decoding import exact_match, translate
from transformer_nb.distributed import shard_stream
from transformer_nb.gpt import (
    GPT,
    bits_per_char,
    induction_scores,
    lm_batch,
    ngram_bits,
    sampling_test,
)
from transformer_nb.induction import (
    attention_only,
    composition,
    head_scores,
    k_composition,
    repeat_batch,
    run_summary,
    seed_table,
)
from transformer_nb.inside import lens_over, lm_lens, logit_difference
from transformer_nb.masking import pad_batch
from transformer_nb.pronouns import genders_differ, pronoun_pair, refers_to_agent
from transformer_nb.reading import (
    ablation_costs,
    alignment_shares,
    attention_maps,
    cross_attention,
    head_sharpness,
    teacher_forced_accuracy,
)
from transformer_nb.training import (
    LabelSmoothingLoss,
    alignment_weight,
    make_optimizer,
    smoothing_floor,
)
from transformer_nb.transformer import Transformer, TransformerConfig

COPY = make_task("copy", n_train=16, n_valid=8)          # 14 tokens


def transformer(vocab_size=14, max_len=64):
    torch.manual_seed(0)
    return Transformer(vocab_size, vocab_size, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                       d_ff=16, dropout=0.0, max_len=max_len)


def gpt(max_len=32):
    torch.manual_seed(0)
    return GPT(12, d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=max_len)


# the tools that take (model, vocab, pairs): what each calls them with
READERS = {
    "teacher_forced_accuracy": lambda m, v, p: teacher_forced_accuracy(m, v, p),
    "attention_maps": lambda m, v, p: attention_maps(m, v, *p[-1]),
    "head_sharpness": lambda m, v, p: head_sharpness(m, v, p),
    "cross_attention": lambda m, v, p: cross_attention(m, v, p),
    "ablation_costs": lambda m, v, p: ablation_costs(m, v, p),
    "alignment_weight": lambda m, v, p: alignment_weight(m, v, p, lambda s, t: [(0, 0)]),
    "lens_over": lambda m, v, p: lens_over(m, v, p),
}


@pytest.mark.parametrize("reader", READERS)
def test_the_reading_tools_refuse_a_vocabulary_that_is_not_the_models(reader):
    """Item 1: a 14-token vocabulary with a 60-token model read its ids as other tokens and gave a wrong accuracy
    (0.0) without a word; a longer one failed on `src`, which the caller never passed. Now the check of translate."""
    call, pairs = READERS[reader], [("123", "123"), ("45", "45")]
    for size in (60, 10):
        with pytest.raises(ValueError, match=f"vocab has 14 tokens, but the model's embedding has {size}"):
            call(transformer(size), COPY.vocab, pairs)
    call(transformer(), COPY.vocab, pairs)                              # its own vocabulary: no error


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("side, pair", [("source", ("1234567890", "12")), ("target", ("12", "12345678"))])
def test_the_reading_tools_name_the_pair_too_long_for_the_model(reader, side, pair):
    "Item 1, the message: 'src: sequence length 10 ... build the model with a larger max_len' named no pair"
    n, who = (10, "src_text") if side == "source" else (9, "tgt_text")
    if reader != "attention_maps": who = f"pairs\\[1\\]'s {side}"             # which takes one pair, as two strings
    words = f"{who} is {n} tokens long{' with <s>' if side == 'target' else ''}; the model reads at most 8 \\(its max_len\\)"
    with pytest.raises(ValueError, match=words):
        READERS[reader](transformer(max_len=8), COPY.vocab, [("12", "12"), pair])


def test_teacher_forced_accuracy_names_the_pair_of_a_later_batch():
    with pytest.raises(ValueError, match="pairs\\[3\\]'s source is 9 tokens long"):
        teacher_forced_accuracy(transformer(max_len=8), COPY.vocab, [("1", "1")] * 3 + [("1" * 9, "1")], batch_size=2)


def test_the_window_helpers_name_context_and_length():
    """Item 2: a GPT of max_len 32 with the default context 64 (or length 24: 48 positions) was told to 'build the
    model with a larger max_len' about a 'sequence length' the caller never typed."""
    model, ids = gpt(), torch.arange(200) % 12
    with pytest.raises(ValueError, match="context 64 exceeds the model's max_len 32: pass a smaller context"):
        bits_per_char(model, ids)
    with pytest.raises(ValueError, match="length 24: its two copies take 48 positions, more than the model's max_len"):
        induction_scores(model, torch.arange(12))
    small = attention_only(2, vocab_size=8, d_model=8, num_heads=2, max_len=16)
    with pytest.raises(ValueError, match="data holds sequences of 32 tokens, more than the model's max_len 16"):
        head_scores(small, repeat_batch(2, 8, 32))
    assert math.isfinite(bits_per_char(model, ids, context=32))       # a context that fits


def test_the_logit_lens_of_a_gpt_names_context():
    "Item 2: lm_lens, as bits_per_char"
    model, ids = gpt(), torch.arange(200) % 12
    with pytest.raises(ValueError, match="context 64 exceeds the model's max_len 32: pass a smaller context"):
        lm_lens(model, ids)
    assert lm_lens(model, ids, context=32).accuracy.shape == (2,)


STRING_VOCAB = {
    "make_batch": lambda v: make_batch([("12", "21")], v),
    "batch_stream": lambda v: batch_stream(COPY.train, v, 4),
    "shard_stream": lambda v: shard_stream(COPY.train, v, 4, rank=0, world_size=2),
    "translate": lambda v: translate(transformer(), v, ["12"]),
    **{name: (lambda v, call=call: call(transformer(), v, [("12", "12")])) for name, call in READERS.items()
       if name != "alignment_weight"},
}


@pytest.mark.parametrize("door", STRING_VOCAB)
def test_a_string_is_not_a_vocab(door):
    """Item 5: the characters passed instead of Vocab(characters) passed the duck test (str has an encode) and failed
    with 'LookupError: unknown encoding: 12'; batch_stream said nothing until its first batch was drawn."""
    with pytest.raises(TypeError, match="vocab must be a Vocab, got the string '0123456789': build one with "
                                        "Vocab\\('0123456789'\\)"):
        STRING_VOCAB[door]("0123456789")


def test_smoothing_floor_without_smoothing_is_zero_and_refuses_what_the_loss_refuses():
    "Item 6: eps = 0 (which LabelSmoothingLoss takes) raised 'math domain error'; eps = 1 returned log V"
    assert smoothing_floor(14, 0.0) == 0.0 and str(smoothing_floor(14, 0)) == "0.0"
    # a certain, right prediction costs nothing without smoothing: the floor is reached
    logits = torch.full((1, 14), -1e4).index_fill(1, torch.tensor([5]), 0.0)
    assert LabelSmoothingLoss(eps=0.0, ignore_index=-1)(logits, torch.tensor([5])).item() == 0.0
    assert smoothing_floor(14, 0.1) == pytest.approx(0.5473, abs=1e-4)
    for kw, error, words in [(dict(eps=-0.1), ValueError, "eps must be in \\[0, 1\\), got -0.1"),
                             (dict(eps=1.0), ValueError, "eps must be in \\[0, 1\\), got 1.0"),
                             (dict(eps="0.1"), TypeError, "eps must be a number"),
                             (dict(vocab_size=0), ValueError, "vocab_size must be >= 1, got 0")]:
        with pytest.raises(error, match=words):
            smoothing_floor(**{"vocab_size": 14, **kw})


@pytest.mark.parametrize("kw, error, words", [
    (dict(factor=-1.0), ValueError, "factor must be > 0, got -1.0"),     # gradient ascent, silently
    (dict(factor=0.0), ValueError, "factor must be > 0, got 0.0"),       # a rate of 0
    (dict(factor=math.nan), ValueError, "factor must be > 0, got nan"),
    (dict(factor="1"), TypeError, "factor must be a number > 0, got str"),
    (dict(cooldown=-5, end=10), ValueError, "cooldown must be >= 0, got -5"),   # silently ignored
    (dict(cooldown=2, end="10"), TypeError, "end must be an int, got str"),
])
def test_make_optimizer_checks_what_train_checks(kw, error, words):
    "Item 9: the schedule's factor, cooldown and end, refused as train refuses them"
    with pytest.raises(error, match=words):
        make_optimizer(nn.Linear(2, 2), d_model=8, warmup=4, **kw)


@pytest.mark.parametrize("seqs, error, words", [
    (["45", "6"], TypeError, "seqs\\[0\\] is the string '45': it needs token ids, not text: encode it with "
                             "vocab.encode"),
    ([[1, None]], TypeError, "seqs\\[0\\] must be a sequence of int token ids, got \\[1, None\\]"),
    (None, TypeError, "seqs must be a list of sequences of token ids, got NoneType None"),
    ("45", TypeError, "seqs must be a list of sequences of token ids, got str '45'"),
    (torch.tensor([4, 5]), ValueError, "seqs must have 2 dimensions"),
    ([], ValueError, "at least one sequence"),
])
def test_pad_batch_names_the_bad_sequence(seqs, error, words):
    "Item 10: errors from inside torch (new(): invalid data type 'str', Could not infer dtype of NoneType)"
    with pytest.raises(error, match=words):
        pad_batch(seqs, 0)


def test_pad_batch_takes_a_batch_that_is_already_a_tensor():
    "Item 10: a (B, L) tensor raised 'Boolean value of Tensor with more than one value is ambiguous'"
    ids = torch.tensor([[4, 5], [6, 7]])
    assert torch.equal(pad_batch(ids, 0), ids) and torch.equal(pad_batch(list(ids), 0), ids)


FAIR = torch.tensor([0.5, 0.5])
draw = lambda n: torch.multinomial(FAIR, n, replacement=True, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("kw, error, words", [
    (dict(alpha=0), ValueError, "alpha must be in \\(0, 1\\), got 0"),       # was 'q must be in (0, 1), got 1'
    (dict(alpha=1.5), ValueError, "alpha must be in \\(0, 1\\), got 1.5"),
    (dict(n=0), ValueError, "n must be >= 1, got 0"),                          # chi2 = nan
    (dict(intended=torch.tensor([5.0, 5.0])), ValueError, "intended must be >= 0 and sum to 1"),   # scored
    (dict(intended=torch.tensor([math.nan, 0.5])), ValueError, "intended must be >= 0 and sum to 1"),
    (dict(intended=[0.5, 0.5]), TypeError, "intended must be a torch.Tensor"),
    (dict(draw=lambda n: draw(n)[:-1]), ValueError, "draw\\(n\\) must return n=200 ids, got 199"),   # scored
    (dict(draw=lambda n: draw(n) + 2), ValueError, "draw\\(n\\) must lie in \\[0, len\\(intended\\)=2\\), got 3"),
    (dict(draw=lambda n: draw(n).float()), TypeError, "draw\\(n\\) must hold integer token ids"),
])
def test_sampling_test_checks_its_arguments_and_the_draws(kw, error, words):
    "Item 11: silent NaN or a test of the wrong numbers, and alpha reported as chi2_quantile's q"
    with pytest.raises(error, match=words):
        sampling_test(**{"draw": draw, "intended": FAIR, "n": 200, **kw})
    assert sampling_test(draw, FAIR, n=200).passed


@pytest.mark.parametrize("pairs, words", [
    ({"ab": "ab"}, "pairs must be a list of \\(source, target\\) pairs, got dict"),       # was 0.0, silently
    ("ab", "got the string 'ab'"),
    (None, "got NoneType None"),
    ([("ab",)], "each a string, the source not empty, got pairs\\[0\\] = \\('ab',\\)"),
    ([("ab", "ab"), ("a", "b", "c")], "got pairs\\[1\\] = \\('a', 'b', 'c'\\)"),
    ([("ab", ["a", "b"])], "got pairs\\[0\\]"),               # a target of tokens never equals a written string
])
def test_exact_match_checks_its_pairs_as_make_batch_does(pairs, words):
    "Item 12: a dict's keys were unpacked as (source 'a', target 'b'); a str or a 3-tuple failed unpacking"
    with pytest.raises(TypeError, match=words):
        exact_match(transformer(12), Vocab("abcdefgh"), pairs)


def test_the_analysis_helpers_refuse_bad_counts_windows_and_ids():
    "Item 14: ZeroDivisionError, (B, 0) windows, NaN, bincount's NotImplementedError, torch's random_ errors"
    model, ids, g = gpt(), torch.arange(200) % 12, torch.Generator().manual_seed(0)
    small = attention_only(2, vocab_size=8, d_model=8, num_heads=2, max_len=16)
    cases = [
        (lambda: composition(small, "K", draws=0), ValueError, "draws must be >= 1, got 0"),
        (lambda: k_composition(small, draws=-1), ValueError, "draws must be >= 1, got -1"),
        (lambda: lm_batch(ids, 200, 2, g), ValueError, "ids must hold more than context=200, got 200"),
        (lambda: lm_batch(ids, 0, 2, g), ValueError, "context must be >= 1, got 0"),
        (lambda: lm_batch(ids.view(2, 100), 5, 2, g), ValueError, "ids must have 1 dimensions"),
        (lambda: ngram_bits(ids, ids[:0], 12), ValueError, "valid must hold at least one position"),
        (lambda: ngram_bits(ids, ids, 5), ValueError, "train must lie in \\[0, vocab_size=5\\), got 11"),
        (lambda: ngram_bits(ids.float(), ids, 12), TypeError, "train must hold integer token ids"),
        (lambda: induction_scores(model, torch.arange(0), length=8), ValueError, "pool must hold at least one"),
        (lambda: induction_scores(model, torch.arange(5.0), length=8), TypeError, "pool must hold integer token ids"),
        (lambda: induction_scores(model, torch.arange(40), length=8), ValueError, "pool must lie in"),
        (lambda: induction_scores(model, torch.arange(5), length=8, batch=0), ValueError, "batch must be >= 1"),
        (lambda: run_summary({}), ValueError, "row must be a run of benchmarks/induction_seeds.py"),
        (lambda: seed_table([]), ValueError, "rows must hold at least one run"),
    ]
    for call, error, words in cases:
        with pytest.raises(error, match=words):
            call()
    assert lm_batch(ids, 5, 2, g)[0].shape == (2, 5)


def test_the_pronoun_helpers_name_what_is_not_of_the_task():
    "Item 14: KeyError: 'unicorn', an IndexError, or a silent False on a sentence that is not the task's"
    for call, words in [(lambda: pronoun_pair("unicorn", "river", "tired"), "agent must be one of animal, dog"),
                        (lambda: pronoun_pair("dog", "river", "purple"), "adjective must be one of tired"),
                        (lambda: refers_to_agent("the dog".split()), "english must be the words of a sentence"),
                        (lambda: genders_differ(pronoun_pair("dog", "river", "tired")[1]), "english must be the words")]:
        with pytest.raises(ValueError, match=words):
            call()
    en = pronoun_pair("dog", "street", "tired")[0]
    assert refers_to_agent(en) and genders_differ(en)                    # der Hund, die Straße


def test_logit_difference_checks_its_rows():
    "Item 14: a negative pos read from the end, silently; an int good raised 'int object is not subscriptable'"
    logits, rows = torch.randn(2, 3, 5), torch.tensor([1, 2])
    for kw, error, words in [(dict(pos=torch.tensor([1, -1])), ValueError, "pos must be in 0..2, got \\[1, -1\\]"),
                             (dict(pos=torch.tensor([1, 3])), ValueError, "pos must be in 0..2"),
                             (dict(good=torch.tensor([1, 2, 3])), ValueError, "good must have one entry per row, B=2"),
                             (dict(bad=torch.tensor([0.5, 1.0])), TypeError, "bad must be an int or a \\(B,\\) tensor")]:
        with pytest.raises(error, match=words):
            logit_difference(logits, **{"pos": rows, "good": rows, "bad": rows, **kw})
    # an int stands for every row, as logit_attribution takes it
    assert logit_difference(logits, 1, 2, 3) == logit_difference(logits, *(torch.tensor([k, k]) for k in (1, 2, 3)))


def test_alignment_shares_needs_one_gold_and_length_per_example():
    "Item 14: zip cut golds and src_lens silently; a gold word past the source was never hit; more golds: IndexError"
    w = torch.eye(3)[None, None, None]                                    # (L, B, H, T, S) = (1, 1, 1, 3, 3)
    for golds, lens, words in [([[{0}, {1}, {2}]], [3, 3], "golds and src_lens must hold one entry per example"),
                               ([[{0}], [{1}]], [3, 3], "B=1, got 2 and 2"),
                               ([[{0}, {1}, {5}]], [3], "golds\\[0\\] must hold at most T=3 pieces"),
                               ([[{0}, {1}, {2}, {2}]], [3], "golds\\[0\\] must hold at most T=3 pieces")]:
        with pytest.raises(ValueError, match=words):
            alignment_shares(w, golds, lens)
    assert alignment_shares(w, [[{0}, {1}, {2}]], [3]).alignment.item() == 1.0


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cfg = TransformerConfig(12, 12, 8, 2, 1, 1, 16)
    path = tmp_path_factory.mktemp("ck") / "f15.pt"
    save_model(path, Transformer.from_config(cfg), cfg, Vocab("abcdefgh"))
    return path, cfg


@pytest.mark.parametrize("where, error, words", [
    ({"cpu": "cuda:0"} if not torch.cuda.is_available() else {"cpu": "cuda:99"}, ValueError, "map_location\\['cpu'\\] is"),
    (0, TypeError, "map_location must name a device such as 'cpu' or 'cuda' \\(or be a dict of them, or a function\\), "
                   "got int 0"),
    ("meta", ValueError, "map_location is 'meta', where the weights would hold no numbers"),
    ({"cpu": "meta"}, ValueError, "map_location\\['cpu'\\] is 'meta'"),
])
def test_a_bad_map_location_is_not_blamed_on_the_file(checkpoint, where, error, words):
    "Item 15: these said the file 'is not a transformer_nb checkpoint' or 'was saved by another version'"
    with pytest.raises(error, match=words):
        load_model(checkpoint[0], map_location=where)
    for fine in ("cpu", torch.device("cpu"), {"cpu": "cpu"}, lambda storage, loc: storage):
        assert isinstance(load_model(checkpoint[0], map_location=fine)[0], Transformer)


def test_a_model_on_the_meta_device_is_not_saved(checkpoint, tmp_path):
    "Item 15: a data-less checkpoint was written, and load_model then blamed 'another version'"
    with torch.device("meta"):
        model = Transformer.from_config(checkpoint[1])
    with pytest.raises(ValueError, match="model is on the meta device"):
        save_model(tmp_path / "meta.pt", model, checkpoint[1], Vocab("abcdefgh"))
    assert not (tmp_path / "meta.pt").exists()
