"""What a reviewer, trying the package as a new user, found it accepting silently or answering with a stack trace from
inside torch; each now a ValueError/TypeError naming the caller's argument (or an OSError naming the file)."""
import pytest
import torch

from conftest import small_transformer
from transformer_nb.attention import scaled_dot_product_attention
from transformer_nb.checkpoints import load_model, save_model
from transformer_nb.data import Vocab, make_batch, make_task
from transformer_nb.gpt import GPT, load_lm, save_lm, train_lm
from transformer_nb.training import (
    LabelSmoothingLoss,
    smoothed_targets,
    train,
    train_task,
)
from transformer_nb.transformer import Transformer

TASK = make_task("copy", n_train=64, n_valid=8)


small = small_transformer  # conftest's


def test_rope_is_refused_by_the_encoder_decoder():
    "positions='rope' built a model with no positions at all, whose config said 'sinusoidal'"
    with pytest.raises(ValueError, match='positions must be "sinusoidal" or "learned", got "rope"'):
        Transformer(14, 14, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16,
                    positions="rope")


def test_label_smoothing_refuses_target_ids_it_would_have_clamped():
    "An id of 7 with 5 classes was scored as class 4, -1 as class 0: a finite, wrong loss"
    loss, logits = LabelSmoothingLoss(0.1), torch.randn(2, 3, 5)
    for target, words in [(torch.full((2, 3), 7), "got 7"), (torch.full((2, 3), -1), "got -1")]:
        with pytest.raises(ValueError, match=f"target ids must lie in \\[0, 5\\).*{words}"):
            loss(logits, target)
    with pytest.raises(ValueError, match="target must have the shape of logits"):
        loss(logits, torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="target"):
        loss(logits, torch.zeros(2, 3))
    with pytest.raises(TypeError, match="logits"):
        loss(logits.long(), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="ignore_index must be an int"):
        LabelSmoothingLoss(0.1, ignore_index=1.5)
    with pytest.raises(ValueError, match="num_classes"):
        smoothed_targets(torch.tensor([1, 9]), 5)
    # padding (id 0 by default) is still ignored, and in-range targets give the loss as before
    target = torch.tensor([[1, 2, 0], [3, 4, 0]])
    assert torch.isfinite(loss(logits, target)) and loss(logits, torch.zeros(2, 3, dtype=torch.long)) == 0


def test_attention_refuses_empty_features_mixed_dtypes_and_devices():
    "d_k = 0 gave NaN everywhere; float64 q with float32 k, or q on another device, a torch error or garbage"
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match="d_k >= 1"):
        scaled_dot_product_attention(q[..., :0], k[..., :0], v)
    with pytest.raises(TypeError, match="share one dtype"):
        scaled_dot_product_attention(q.double(), k, v)
    with pytest.raises(ValueError, match="one device, got meta, cpu and cpu"):
        scaled_dot_product_attention(q.to("meta"), k, v)


def test_training_settings_that_did_nothing_are_refused():
    "cooldown_end=0 meant `steps` and -1 drove the rate to 0; warmup=0 took the task's 100; runs=2.0 was accepted"
    b = make_batch(TASK.train[:8], TASK.vocab)
    with pytest.raises(ValueError, match="cooldown_end must be >= 4, got -1"):
        train(small(), [b] * 4, 4, warmup=2, cooldown=2, cooldown_end=-1, progress=False)
    with pytest.raises(ValueError, match="smoothing must be in \\[0, 1\\), got 1.0"):
        train(small(), [b] * 4, 4, warmup=2, smoothing=1.0, progress=False)
    with pytest.raises(ValueError, match="warmup must be >= 1, got 0"):
        train_task("copy", steps=2, n_train=64, n_valid=8, warmup=0, progress=False)
    for runs in (-0.5, 2.0, float("nan")):
        with pytest.raises(ValueError, match="runs must be in \\[0, 1\\]"):
            train_task("copy", steps=2, n_train=64, n_valid=8, runs=runs, progress=False)
    for kw, words in [(dict(n_train=0), "n_train must be >= 1"), (dict(n_valid=0), "n_valid must be >= 1"),
                      (dict(seed="x"), "seed must be an int")]:
        with pytest.raises((ValueError, TypeError), match=words):
            make_task("copy", **kw)


def test_save_refuses_what_load_cannot_read_and_names_the_path(tmp_path):
    "save_model wrote meta load_model then refused; bad paths were torch RuntimeErrors"
    m = small()
    vocab = TASK.vocab
    with pytest.raises(TypeError, match="meta\\['foo'\\] is of type object"):
        save_model(tmp_path / "a.pt", m, m.config, vocab, foo=object())
    with pytest.raises(TypeError, match="training must be a dict"):
        save_model(tmp_path / "a.pt", m, m.config, vocab, training="junk")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        save_model(tmp_path, m, m.config, vocab)
    with pytest.raises(FileNotFoundError, match="no folder"):
        save_model(tmp_path / "nodir" / "a.pt", m, m.config, vocab)
    with pytest.raises(TypeError, match="path must be a str or a Path, got NoneType"):
        save_model(None, m, m.config, vocab)
    save_model(tmp_path / "ok.pt", m, m.config, vocab, steps=3, note=[1, "x", {"a": torch.ones(2)}])
    assert load_model(tmp_path / "ok.pt")[2]["steps"] == 3


def test_incomplete_checkpoints_and_missing_devices_are_named(tmp_path):
    "A checkpoint without 'config' (or with 'meta' None, a short vocabulary) was a KeyError or AttributeError"
    m = small()
    save_model(tmp_path / "ok.pt", m, m.config, TASK.vocab)
    full = torch.load(tmp_path / "ok.pt", weights_only=True)
    for change, words in [(dict(config=None), "its 'config' is of type NoneType, not dict"),
                          (dict(meta=None), "its 'meta' is of type NoneType"),
                          (dict(vocab=["a", "b"]), "a vocabulary of 6 tokens for a model of 14"),
                          (dict(training="junk"), "its 'training' is of type str")]:
        torch.save({**full, **change}, tmp_path / "bad.pt")
        with pytest.raises(ValueError, match=words):
            load_model(tmp_path / "bad.pt")
    torch.save({k: v for k, v in full.items() if k != "state_dict"}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="it has no 'state_dict'"):
        load_model(tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="map_location must name a device"):
        load_model(tmp_path / "ok.pt", map_location="nope")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA device"):
            load_model(tmp_path / "ok.pt", map_location="cuda")


def test_language_model_checkpoints_are_checked_both_ways(tmp_path):
    "save_lm wrote whatever it was given; load_lm met a missing entry with a KeyError"
    lm = GPT(10, d_model=8, num_heads=2, num_layers=1, max_len=16)
    with pytest.raises(ValueError, match="chars must be a str of the model's 10 characters"):
        save_lm(tmp_path / "lm.pt", lm, "abc")
    save_lm(tmp_path / "lm.pt", lm, "abcdefghij", steps=3)
    assert load_lm(tmp_path / "lm.pt")[1:] == ("abcdefghij", {"steps": 3})
    full = torch.load(tmp_path / "lm.pt", weights_only=True)
    for change, words in [(dict(chars="abc"), "holds 3 characters for a model of 10"),
                          (dict(meta=None), "its 'meta' is of type NoneType")]:
        torch.save({**full, **change}, tmp_path / "bad.pt")
        with pytest.raises(ValueError, match=words):
            load_lm(tmp_path / "bad.pt")
    torch.save({k: v for k, v in full.items() if k != "chars"}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="it has no 'chars'"):
        load_lm(tmp_path / "bad.pt")


def test_one_model_kind_where_the_other_is_expected_and_a_vocabulary_that_is_not_the_models():
    """generate() with an encoder-decoder was an AttributeError (max_len), train() with a GPT a TypeError from
    _check_inputs; translate() with another task's vocabulary decoded to <unk> silently; RoPE with an odd head
    width built, then failed inside the first forward"""
    from transformer_nb.decoding import beam_translate, translate
    from transformer_nb.gpt import generate
    from transformer_nb.multihead import MultiHeadAttention
    m = small()
    with pytest.raises(TypeError, match="model must be a GPT, got Transformer"):
        generate(m, torch.tensor([1, 2]), 3)
    b = make_batch(TASK.train[:8], TASK.vocab)
    with pytest.raises(TypeError, match="got GPT: a GPT trains with gpt.train_lm"):
        train(GPT(14, d_model=16, num_heads=2), [b], 2, progress=False)
    for decode in (translate, lambda *a: beam_translate(*a, beam_size=2)):
        with pytest.raises(ValueError, match="vocab has 8 tokens, but the model's embedding has 14"):
            decode(m, Vocab("0123"), ["12"])
        with pytest.raises(TypeError, match="vocab must be a Vocab, got NoneType"):
            decode(m, None, ["12"])
    for build in (lambda: MultiHeadAttention(12, 4, rope=True), lambda: GPT(20, d_model=12, num_heads=4,
                                                                            positions="rope")):
        with pytest.raises(ValueError, match="rope needs an even d_k = d_model / num_heads, got 3"):
            build()


def test_the_smaller_reports_name_the_callers_argument():
    """Each was a Python or torch error (AttributeError, AssertionError, IndexError, a RuntimeError listing device
    types) or named another function's argument (`ids` for target_mask's `tgt`)"""
    from transformer_nb.decoding import greedy_search
    from transformer_nb.embeddings import Embeddings
    from transformer_nb.explorer import attention_explorer
    from transformer_nb.masking import causal_mask, target_mask
    from transformer_nb.plotting import show_attention
    cases = [
        (lambda: target_mask(torch.tensor([4, 5]), 0), ValueError, "tgt must have 2 dimensions"),
        (lambda: causal_mask(3, device="nope"), ValueError, "device must name a device"),
        (lambda: Embeddings(10, 8, padding_idx=20), ValueError, "padding_idx must be None or a token id in \\[0, 10\\)"),
        (lambda: Vocab(None), TypeError, "chars must be a str or a sequence of str"),
        (lambda: Vocab([1, 2]), TypeError, "chars must be a str or a sequence of str"),
        (lambda: TASK.vocab.decode(torch.tensor([[4, 5]])), ValueError, "ids must be one sequence"),
        (lambda: TASK.vocab.decode([4.0]), TypeError, "ids must be ints, got float"),
        (lambda: make_batch([("12", "21")], None), TypeError, "vocab must be a Vocab, got NoneType"),
        (lambda: make_batch([("12",)], TASK.vocab), TypeError, "pairs\\[0\\] = \\('12',\\)"),
        (lambda: make_batch("12", TASK.vocab), TypeError, "got the string '12'"),
        (lambda: make_batch([("12", "21")], TASK.vocab, device="nope"), ValueError, "device must name a device"),
        (lambda: show_attention(torch.zeros(0, 3)), ValueError, "at least one head, query and key"),
        (lambda: show_attention(torch.rand(3, 2, 2), head_titles=["a"]), ValueError, "head_titles has 1 titles"),
        (lambda: attention_explorer(torch.rand(2, 3, 3).softmax(-1), list("abc"), decimals=-1), ValueError,
         "decimals must be an int from 0 to 6"),
        (lambda: greedy_search(small(), torch.tensor([[4, 5]]), use_cache="no"), TypeError, "use_cache must be a bool"),
        (lambda: train(small(), [make_batch(TASK.train[:4], TASK.vocab)], 2, progress="no"), TypeError,
         "progress must be a bool"),
    ]
    for fn, error, words in cases:
        with pytest.raises(error, match=words):
            fn()
    assert make_batch([("12", "")], TASK.vocab).tgt_out.shape == (1, 1)       # an empty target: only </s>


def test_a_diverging_run_stops_with_the_setting_to_lower():
    """train(factor=1e6) and train_lm(lr=1e6) ran to the end with a NaN loss and NaN weights, silently; a loss that
    is not finite now stops the run at that step, naming the caller's setting"""
    with pytest.raises(ValueError, match=r"the loss became nan at step \d+: .* lower factor 1000000.0"):
        train_task("copy", steps=20, factor=1e6, progress=False, n_train=64, n_valid=8)
    torch.manual_seed(0)
    gpt, ids = GPT(20, max_len=16, d_model=16, num_heads=2, d_ff=32, num_layers=1), torch.randint(0, 20, (300,))
    with pytest.raises(ValueError, match=r"the loss became nan at step \d+: .* lower lr 1000000.0"):
        train_lm(gpt, ids, steps=30, context=8, lr=1e6)
    with pytest.raises(ValueError, match="lr must be > 0, got -1"):
        train_lm(gpt, ids, steps=3, context=8, lr=-1)


def test_the_callers_names_for_a_bad_config_a_long_text_and_too_few_pairs(tmp_path):
    """A checkpoint's config that cannot build a model did not name the file; a text longer than the model's position
    table was named `src`, which the caller of translate never passed; train_task(n_train=3) spoke of batch_size"""
    import dataclasses

    from transformer_nb.decoding import beam_translate, translate
    path = tmp_path / "m.pt"
    save_model(path, small(), dataclasses.asdict(small().config), TASK.vocab)
    ckpt = torch.load(path, weights_only=True)
    ckpt["config"] = {**ckpt["config"], "d_model": -4}
    torch.save(ckpt, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=r"bad.pt holds a configuration this version cannot build: d_model"):
        load_model(tmp_path / "bad.pt")
    for decode in (translate, beam_translate):
        with pytest.raises(ValueError, match=r"texts\[1\] '1{20}\.\.\.' is 40 tokens long; the model reads at most 32"):
            decode(small(), TASK.vocab, ["12", "1" * 40])
    with pytest.raises(ValueError, match="n_train must be >= 64, got 3"):
        train_task("copy", n_train=3, steps=2, progress=False)


def test_every_module_names_a_tensor_on_another_device():
    """A layer used on its own (attention, feed-forward, a layer of the stack) with an input on another device than
    its weights ended in torch's 'Tensor on device cpu is not on the expected device meta!'; the door of every
    CheckedModule now names the argument, by its name in forward's signature"""
    from transformer_nb.ffn import PositionwiseFeedForward
    from transformer_nb.layers import EncoderLayer
    from transformer_nb.multihead import MultiHeadAttention
    x, away = torch.randn(2, 3, 16), torch.randn(2, 3, 16, device="meta")
    cases = [(lambda: MultiHeadAttention(16, 2)(x, away, x), "key is on meta"),
             (lambda: MultiHeadAttention(16, 2)(x, x, value=away), "value is on meta"),
             (lambda: PositionwiseFeedForward(16, 32)(away), "x is on meta"),
             (lambda: EncoderLayer(16, 2, 32)(away), "x is on meta")]
    for call, words in cases:
        with pytest.raises(ValueError, match=f"{words}, but the model is on cpu: move it with"):
            call()
    assert MultiHeadAttention(16, 2)(x, x, x)[0].shape == x.shape      # the same device: nothing to say


# ---------------------------------------------------------------- a second reviewer's reports: the later chapters
def tiny_gpt(**kw):
    torch.manual_seed(0)
    return GPT(10, d_model=16, num_heads=4, d_ff=32, num_layers=2, max_len=16, **kw).eval()


def test_converters_refuse_what_they_would_have_computed_wrongly():
    """from_transformers dropped an untied GPT-2 lm_head and ignored scale_attn_weights=False (logits 9.4 and 1.1
    apart); to_transformers of a GPT-2-like GPT with n_kv_heads failed inside load_state_dict"""
    transformers = pytest.importorskip("transformers")
    from transformer_nb.modern import from_transformers, to_transformers
    base = dict(vocab_size=10, n_positions=16, n_embd=16, n_layer=1, n_head=4)
    for kw, words in [(dict(tie_word_embeddings=False), "untied input and output embeddings"),
                      (dict(scale_attn_weights=False), "scale_attn_weights=False")]:
        theirs = transformers.GPT2LMHeadModel(transformers.GPT2Config(**base, **kw)).eval()
        with pytest.raises(ValueError, match=words):
            from_transformers(theirs)
    with pytest.raises(ValueError, match="no counterpart in transformers.*n_kv_heads=2"):
        to_transformers(tiny_gpt(positions="learned", n_kv_heads=2))


def test_generate_checks_eos_pad_and_its_switches():
    "pad=99 was fed back into the model (IndexError from torch.embedding); pad=2.7 wrote 2; greedy='no' was true"
    from transformer_nb.gpt import generate
    m, prompt = tiny_gpt(), torch.tensor([[1, 2, 3], [4, 5, 6]])
    for kw, words in [(dict(eos=3, pad=99), "pad must be a token id below"), (dict(eos=-1), "eos must be"),
                      (dict(eos=3, pad=2.7), "pad must be an int"), (dict(greedy="no"), "greedy must be a bool"),
                      (dict(use_cache="no"), "use_cache must be a bool")]:
        with pytest.raises((ValueError, TypeError), match=words):
            generate(m, prompt, 4, **{"greedy": True, **kw})
    out = generate(m, prompt, 4, greedy=True, eos=3, pad=0)
    assert out.shape[0] == 2 and 3 < out.shape[1] <= 7


def test_a_temperature_float32_cannot_hold_is_refused():
    "temperature=1e-50 rounds to 0 in float32: filter_logits returned NaN and sampling failed inside torch"
    from transformer_nb.gpt import filter_logits
    with pytest.raises(ValueError, match="temperature must be a finite number > 0 that float32 holds"):
        filter_logits(torch.tensor([1.0, 2.0, 3.0]), temperature=1e-50)
    assert filter_logits(torch.tensor([1.0, 2.0, 3.0]), temperature=1e-30).isfinite().any()


def test_logit_attribution_of_rms_and_norm_free_models_sums_to_the_logit_difference():
    "RMSNorm: AttributeError 'bias'; no norm (the induction chapter's models): AttributeError 'eps'"
    from transformer_nb.inside import logit_attribution, run_with_cache
    ids = torch.randint(0, 10, (2, 6), generator=torch.Generator().manual_seed(1))
    for norm in ("rms", "none", "layer"):
        m = tiny_gpt(norm=norm)
        logits, cache = run_with_cache(m, ids)
        parts = logit_attribution(m, cache, 5, 1, 2)
        total = sum(parts.values())
        torch.testing.assert_close(total, logits[:, 5, 1] - logits[:, 5, 2], atol=1e-5, rtol=1e-5)


def test_head_matrices_checks_its_head_and_reads_the_heads_group():
    "head 4 of 4 heads gave zero matrices; with n_kv_heads=2, head 1 read group 1's keys (its group is 0)"
    from transformer_nb.induction import head_matrices
    with pytest.raises(ValueError, match="head must be in 0..3, got 4"):
        head_matrices(tiny_gpt(), 0, 4)
    with pytest.raises(ValueError, match="layer must be in 0..1, got 2"):
        head_matrices(tiny_gpt(), 2, 0)
    m = tiny_gpt(n_kv_heads=2)
    mha, d_k = m.stack.layers[0].self_attn, 4
    qk, _ = head_matrices(m, 0, 1)
    W_q = mha.W_q.weight.detach()[d_k:2 * d_k]
    W_k = mha.W_k.weight.detach()[:d_k]                    # group 0 holds heads 0 and 1
    gain = m.stack.layers[0].norm1.weight.detach()
    torch.testing.assert_close(qk, (W_q * gain).T @ (W_k * gain))
    head_matrices(m, 0, 3)                                  # group 1: no longer a shape error


def test_the_smaller_reports_of_the_later_chapters():
    from transformer_nb.induction import attention_only, train_induction
    from transformer_nb.inside import patching_study
    from transformer_nb.numbers import ablation_groups
    from transformer_nb.plotting import show_attention
    from transformer_nb.pronouns import make_pronoun_task
    for kw, words in [(dict(warmup=0), "warmup must be >= 1"), (dict(cooldown=0), "cooldown must be >= 1"),
                      (dict(lr=-1.0), "lr must be > 0"), (dict(stop=-1), "stop must be >= 0")]:
        with pytest.raises(ValueError, match=words):
            train_induction(attention_only(2, vocab_size=16, d_model=16, num_heads=2, max_len=16), steps=2, **kw)
    with pytest.raises(ValueError, match=r"the loss became nan at step \d+: .* lower lr"):
        train_induction(attention_only(2, vocab_size=16, d_model=16, num_heads=2, max_len=16), steps=40,
                        every=5, batch_size=8, warmup=1, cooldown=1, lr=1e6)
    m, x = tiny_gpt(), torch.randint(0, 10, (2, 6))
    with pytest.raises(TypeError, match=r"clean must be a tuple of the model's inputs, such as \(ids,\), got Tensor"):
        patching_study(m, x, x, lambda logits: logits[:, -1, 0].mean())
    for held_out in (-0.5, 2, float("nan")):
        with pytest.raises(ValueError, match=r"held_out must be in \(0, 1\)"):
            make_pronoun_task(held_out=held_out)
    for k, words in [(0, "k must be >= 1"), (9, "k must be at most the 8 heads")]:
        with pytest.raises(ValueError, match=words):
            ablation_groups(torch.rand(2, 4), k=k)
    import matplotlib
    matplotlib.use("Agg")
    w = torch.softmax(torch.randn(1, 4, 4), -1)
    show_attention(w, log=True)                              # log=True always failed: vmin 0 on a log scale
    with pytest.raises(ValueError, match="vmin must be > 0 on a log scale"):
        show_attention(w, log=True, vmin=0.0)


def test_the_reports_left_from_the_second_review():
    "Each of these returned NaN, divided by zero, truncated, broadcast or read the wrong row before"
    from transformer_nb.data import Vocab
    from transformer_nb.gpt import (
        bits_per_char,
        induction_scores,
        previous_token_scores,
    )
    from transformer_nb.induction import attention_only, train_induction
    from transformer_nb.inside import (
        lm_lens,
        patch_head,
        patch_position,
        patching_study,
        run_with_cache,
    )
    from transformer_nb.masking import pad_batch, target_mask
    from transformer_nb.numbers import held_out_numbers, source_words
    from transformer_nb.plotting import show_heatmaps
    from transformer_nb.pronouns import referent_preference, words
    m, ids = tiny_gpt(), torch.randint(0, 10, (40,))
    for few in (ids[:1], ids[:0]):                             # ZeroDivisionError
        with pytest.raises(ValueError, match="ids must hold 2 tokens or more"):
            bits_per_char(m, few, 16)                         # a context the model holds
    with pytest.raises(ValueError, match=r"ids must have T >= 2, got shape \(1, 1\)"):
        previous_token_scores(m, ids[None, :1])                # NaN scores
    with pytest.raises(ValueError, match="length must be >= 2, got 1"):
        induction_scores(m, torch.arange(10), length=1)        # NaN scores
    with pytest.raises(ValueError, match="windows must be >= 1, got 0"):
        lm_lens(m, ids, 8, windows=0)                          # "ids must hold over context=8"
    clean, more = torch.randint(0, 10, (2, 6)), torch.randint(0, 10, (3, 6))
    _, cache = run_with_cache(m, clean)
    for patch, place in [(patch_head(cache, "decoder.0.self_attn", 0, pos=1), "decoder.0.self_attn"),
                         (patch_position(cache, "decoder.0.resid_pre", 1), "decoder.0.resid_pre")]:
        with pytest.raises(ValueError, match=f"the run patched at '{place}' must have the clean run's shape"):
            run_with_cache(m, more, patches=patch)             # the third row left unpatched
    other = clean.clone(); other[:, 0] = (other[:, 0] + 1) % 10
    for metric in (lambda logits: logits[:, -1, 0], lambda logits: logits.mean() * float("nan")):
        with pytest.raises(ValueError, match="metric must return one finite number"):
            patching_study(m, (clean,), (other,), metric)      # a vector: float() failed; NaN: NaN shares
    with pytest.raises(ValueError, match=r"model.max_len must be >= 16 to hold a repeat, got 10"):
        train_induction(attention_only(2, vocab_size=16, d_model=16, num_heads=2, max_len=10), steps=2)
    with pytest.raises(ValueError, match=r"share must be in \[0, 1\), got 2"):
        held_out_numbers(share=2)                              # "Sample larger than population"
    with pytest.raises(ValueError, match="text '²' is not a number"):
        source_words("²")                                      # int("²"): "invalid literal"
    with pytest.raises(ValueError, match=r"sources must hold one sentence per row of weights \(B=3\), got 1"):
        referent_preference(torch.rand(2, 3, 4, 8), [["the", "cat"]])  # broadcast one sentence over three
    v = Vocab(["the", "cat"])
    assert words(torch.tensor([1, 4, -1, 5, 2, 4]), v) == ["the", "<unk>", "cat"]   # -1 read the last token
    with pytest.raises(TypeError, match="bos must be a bool, got int 2"):
        v.encode(["cat"], bos=2)                               # two <s> tokens
    with pytest.raises(TypeError, match=r"seqs\[0\] must hold integer token ids"):
        pad_batch([[1.5, 2.0]], 0)                             # truncated to [1, 2]
    with pytest.raises(ValueError, match=r"tgt must hold at least one position, got shape \(2, 0\)"):
        target_mask(torch.zeros(2, 0, dtype=torch.long), 0)   # the message said ids
    import matplotlib
    matplotlib.use("Agg")
    for kw, words_ in [(dict(xticks="abc"), r"xticks must have one label per column of a matrix \(4\), got 3"),
                       (dict(col_titles=["h0"]), r"col_titles must have one label per column of panels \(2\)")]:
        with pytest.raises(ValueError, match=words_):
            show_heatmaps(torch.rand(1, 2, 4, 4), **kw)        # IndexError, or matplotlib's FixedLocator


def test_a_process_sum_of_a_plain_number_is_refused_by_both_kinds_of_processes():
    """procs.sum(int(...)) returned the int with one process and ended in "'int' object has no attribute 'clone'"
    under DataParallel (a learner's review, grading mean_loss_share): both now say what they need"""
    from transformer_nb.training import SingleProcess
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got int"):
        SingleProcess().sum(3)
    assert SingleProcess().sum(torch.tensor(3)).item() == 3


def test_every_public_function_that_takes_a_seed_checks_it():
    """A seed torch's generators cannot take (2**64) failed inside torch ('Overflow when unpacking long long'), a
    float inside torch or, in the functions that seed Python's `random`, was taken silently. Every public function
    with a `seed` parameter is listed here, and each refuses both, naming the argument, before any work."""
    import inspect
    import pkgutil
    from importlib import import_module

    import torch.nn as nn

    import transformer_nb
    from transformer_nb import attention, core, data, gpt, induction, numbers, pronouns
    from transformer_nb.distributed import shard_stream
    pairs, vocab = TASK.train[:8], TASK.vocab
    lm = GPT(12, d_model=8, num_heads=2, d_ff=16, num_layers=2, max_len=32)
    calls = {
        "attention.softmax_saturation": lambda s: attention.softmax_saturation(4, seed=s),
        "core.compare_modules": lambda s: core.compare_modules(nn.Linear(2, 2), nn.Linear(2, 2), torch.ones(1, 2),
                                                                seed=s),
        # these two seed Python's `random`, which takes any int: only ints >= 0, below
        "data.digit_pairs": None,
        "data.date_pairs": None,
        "data.make_task": lambda s: data.make_task("copy", n_train=8, n_valid=8, seed=s),
        "data.batch_orders": lambda s: next(data.batch_orders(8, 2, s)),
        "data.batch_stream": lambda s: next(data.batch_stream(pairs, vocab, 2, seed=s)),
        "distributed.shard_stream": lambda s: next(shard_stream(pairs, vocab, 2, 0, 1, s)),
        # train_replica runs under torchrun: its seed goes to train_task, below
        "distributed.train_replica": None,
        "gpt.train_lm": lambda s: gpt.train_lm(lm, torch.arange(40) % 12, steps=1, context=8, seed=s),
        "gpt.char_lm": lambda s: gpt.char_lm(gpt.CharText("abc", torch.arange(90) % 3, torch.arange(90) % 3), seed=s),
        "gpt.generate": lambda s: gpt.generate(lm, torch.tensor([1]), 2, seed=s),
        "gpt.sampler": lambda s: gpt.sampler(seed=s),
        "gpt.induction_scores": lambda s: gpt.induction_scores(lm, torch.arange(12), length=4, seed=s),
        "induction.attention_only": lambda s: induction.attention_only(seed=s),
        "induction.eval_batch": lambda s: induction.eval_batch(lm, seed=s),
        "induction.train_induction": lambda s: induction.train_induction(lm, steps=1, seed=s),
        "induction.composition": lambda s: induction.composition(lm, seed=s),
        "induction.k_composition": lambda s: induction.k_composition(lm, seed=s),
        "numbers.held_out_numbers": lambda s: numbers.held_out_numbers(s),
        "numbers.make_number_task": lambda s: numbers.make_number_task("de", s),
        "numbers.train_numbers": lambda s: numbers.train_numbers("de", s),
        "pronouns.make_pronoun_task": lambda s: pronouns.make_pronoun_task(seed=s),
        "pronouns.train_pronoun_model": lambda s: pronouns.train_pronoun_model(seed=s),
        "training.train_task": lambda s: train_task("copy", steps=1, seed=s, progress=False),
        "core.check_seed": core.check_seed,
    }
    found = set()
    for m in pkgutil.iter_modules(transformer_nb.__path__):
        if m.name.startswith("_") or m.ispkg: continue
        mod = import_module(f"transformer_nb.{m.name}")
        for name in getattr(mod, "__all__", []):
            fn = getattr(mod, name)
            try: params = inspect.signature(fn).parameters if callable(fn) else {}
            except ValueError: params = {}           # a built-in type (an exception class)
            if "seed" in params: found.add(f"{m.name}.{name}")
    assert found == set(calls), found ^ set(calls)
    for call in calls.values():
        if call is None: continue
        for seed, error, words in ((2**64, ValueError, "seed must be < 2\\*\\*63, got 18446744073709551616"),
                                   (1.5, TypeError, "seed must be an int, got float 1.5")):
            with pytest.raises(error, match=words): call(seed)
    for pairs_of in (data.digit_pairs, data.date_pairs):
        with pytest.raises(TypeError, match="seed must be an int, got float 1.5"): pairs_of(4, 1.5)
        with pytest.raises(ValueError, match="seed must be >= 0, got -1"): pairs_of(4, -1)
    with pytest.raises(ValueError, match="split must be < 2\\*\\*63"): pronouns.train_pronoun_model(split=2**64)
