"""Bad input fails loudly at the boundary: a ValueError/TypeError naming the argument, what it got and what it
needs (issue 4's list), across the package's public modules -- never a NaN or a stack trace from inside torch."""
import pytest
import torch

from transformer_nb.attention import scaled_dot_product_attention
from transformer_nb.embeddings import Embeddings, sinusoidal_encoding
from transformer_nb.ffn import PositionwiseFeedForward
from transformer_nb.layers import Decoder, DecoderLayer, EncoderLayer
from transformer_nb.masking import causal_mask, pad_batch, padding_mask, target_mask
from transformer_nb.multihead import MultiHeadAttention
from transformer_nb.norms import LayerNorm, SublayerConnection
from transformer_nb.transformer import Transformer

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
    "zero encoder layers": (lambda: Transformer(5, 5, d_model=16, num_heads=4, num_encoder_layers=0), ValueError, ["num_encoder_layers must be >= 1", "0"]),
    "negative decoder layers": (lambda: Decoder(16, 4, 32, num_layers=-1), ValueError, ["num_layers must be >= 1"]),
    "float heads": (lambda: MultiHeadAttention(16, 4.0), TypeError, ["num_heads must be an int", "float"]),
    # misc
    "causal T": (lambda: causal_mask(0), ValueError, ["T must be >= 1"]),
    "positions kind": (lambda: Embeddings(10, 16, positions="bogus"), ValueError, ['"sinusoidal" or "learned"', "bogus"]),
}


def check_error(name, call, err, words):
    "call() raises err (a ValueError or TypeError), and its message holds each of words"
    with pytest.raises((ValueError, TypeError)) as e:
        call()
    assert e.type is err, f"{name}: expected {err.__name__}, got {e.type.__name__}: {e.value}"
    for w in words:
        assert w in str(e.value), f"{name}: {w!r} not in the message {str(e.value)!r}"


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_a_clear_error(name):
    check_error(name, *CASES[name])


def test_no_nan_from_an_all_padding_sequence():
    "A sequence that is entirely padding gives finite outputs (fully masked rows attend to nothing and output 0)."
    src = pad_batch([[1, 2, 3], [0]], 0)
    m = padding_mask(src, 0)
    out = MODEL(src, TGT, src_mask=m, tgt_mask=target_mask(TGT, 0), memory_mask=m)
    assert torch.isfinite(out).all()


# Issue 15: errors at the public entry point name what the caller passed; devices and dtypes agree; id dtypes
SM, TM = padding_mask(SRC, 0), target_mask(TGT, 0)
META = torch.ones(2, 1, 1, 4, dtype=torch.bool, device="meta")            # a mask on another device than the scores
ENTRY_CASES = {
    "src range": (lambda: MODEL(SRC + 20, TGT), ValueError, ["src must lie in [0, vocab_size=11)", "26"]),
    "tgt range": (lambda: MODEL(SRC, TGT - 1), ValueError, ["tgt must lie in [0, vocab_size=13)", "-1"]),
    "encode src": (lambda: MODEL.encode(SRC.float()), TypeError, ["src must hold integer token ids"]),
    "decode tgt": (lambda: MODEL.decode(TGT[:, :, None], MODEL.encode(SRC)), ValueError, ["tgt must have 2 dimensions"]),
    "src_mask shape": (lambda: MODEL(SRC, TGT, src_mask=torch.ones(2, 1, 1, 5, dtype=torch.bool)), ValueError,
                       ["src_mask of shape (2, 1, 1, 5) does not broadcast", "(2, 4, 4, 4)"]),
    "tgt_mask dtype": (lambda: MODEL(SRC, TGT, SM, TM.float(), SM), TypeError, ["tgt_mask must have dtype torch.bool"]),
    "memory_mask shape": (lambda: MODEL(SRC, TGT, SM, TM, TM), ValueError, ["memory_mask of shape (2, 1, 3, 3)", "(2, 4, 3, 4)"]),
    "mask device": (lambda: MODEL(SRC, TGT, src_mask=META), ValueError, ["src_mask is on meta", "scores are on cpu"]),
    "memory_mask device": (lambda: MODEL(SRC, TGT, SM, TM, META), ValueError, ["memory_mask is on meta"]),
    "src device": (lambda: MODEL(SRC.to("meta"), TGT), ValueError,
                   ["src is on meta, but the model is on cpu", "src.to('cpu')"]),
    "memory device": (lambda: MODEL.decode(TGT, MODEL.encode(SRC).to("meta")), ValueError, ["memory is on meta"]),
    "embeddings ids device": (lambda: Embeddings(11, 16)(SRC.to("meta")), ValueError,
                              ["ids is on meta, but the model is on cpu"]),
    "mha mask device": (lambda: MultiHeadAttention(16, 4)(X, X, X, mask=META[:, :, :, :3]), ValueError, ["mask is on meta"]),
    "memory dtype": (lambda: MODEL.decode(TGT, MODEL.encode(SRC).half()), TypeError, ["memory has dtype torch.float16", "float32"]),
    "mha half input": (lambda: MultiHeadAttention(16, 4)(X.half(), X.half(), X.half()), TypeError,
                       ["query has dtype torch.float16", "torch.float32"]),
    "ids uint8": (lambda: MODEL(SRC.to(torch.uint8), TGT), TypeError, ["src must hold token ids as torch.long or torch.int32", "uint8"]),
    "ids int16": (lambda: MODEL(SRC, TGT.to(torch.int16)), TypeError, ["tgt must hold token ids", "int16"]),
    "ids bool": (lambda: MODEL(SRC.bool(), TGT), TypeError, ["src must hold integer token ids", "bool"]),
    "ids float": (lambda: MODEL(SRC, TGT.double()), TypeError, ["tgt must hold integer token ids", "float64"]),
}


@pytest.mark.parametrize("name", list(ENTRY_CASES))
def test_entry_point_errors_name_the_callers_argument(name):
    check_error(name, *ENTRY_CASES[name])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_every_id_dtype_nn_embedding_accepts_works(dtype):
    want = MODEL(SRC, TGT, SM, TM, SM)
    torch.testing.assert_close(MODEL(SRC.to(dtype), TGT.to(dtype), SM, TM, SM), want)
    memory = MODEL.encode(SRC.to(dtype), SM)
    torch.testing.assert_close(MODEL.decode(TGT.to(dtype), memory, TM, SM), want)


# ---- the decoders, training and checkpoints (issue 15): the message names the argument the caller passed ----
from transformer_nb.checkpoints import load_model, save_model
from transformer_nb.data import Vocab, batch_stream, make_batch, make_task
from transformer_nb.decoding import (
    beam_search,
    beam_translate,
    greedy_search,
    sequence_logprob,
    translate,
)
from transformer_nb.training import train, train_task

V = Vocab("0123456789")
DEC = Transformer(len(V), len(V), d_model=16, num_heads=4, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                  dropout=0.0, max_len=32).eval()
IDS = torch.tensor([[4, 5, 6], [7, 8, 0]])
CONFIG = dict(src_vocab=len(V), tgt_vocab=len(V), d_model=16, num_heads=4, num_encoder_layers=1,
              num_decoder_layers=1, d_ff=32, dropout=0.0, max_len=32)
TASK = make_task("copy", n_train=64, n_valid=4)

DECODING_CASES = {
    "greedy src float": (lambda: greedy_search(DEC, IDS.float()), TypeError, ["src", "integer token ids"]),
    "greedy src 1-d": (lambda: greedy_search(DEC, IDS[0]), ValueError, ["src must have 2 dimensions"]),
    "greedy src empty": (lambda: greedy_search(DEC, IDS[:, :0]), ValueError, ["src must hold at least one position"]),
    "greedy src_mask shape": (lambda: greedy_search(DEC, IDS, torch.ones(2, 3, dtype=torch.bool)), ValueError,
                              ["src_mask", "does not broadcast", "(2, 3)"]),
    "greedy src_mask dtype": (lambda: greedy_search(DEC, IDS, padding_mask(IDS, 0).float()), TypeError,
                              ["src_mask", "torch.bool"]),
    "greedy max_len 0": (lambda: greedy_search(DEC, IDS, max_len=0), ValueError, ["max_len must be >= 1", "0"]),
    "greedy max_len -3": (lambda: greedy_search(DEC, IDS, max_len=-3), ValueError, ["max_len must be >= 1", "-3"]),
    "greedy bos too big": (lambda: greedy_search(DEC, IDS, bos=99), ValueError, ["bos", "99", "vocabulary size 14"]),
    "greedy eos negative": (lambda: greedy_search(DEC, IDS, eos=-1), ValueError, ["eos must be >= 0", "-1"]),
    "greedy model is not one": (lambda: greedy_search("model", IDS), TypeError, ["model must be a Transformer", "str"]),
    "beam size 0": (lambda: beam_search(DEC, IDS[0], beam_size=0), ValueError, ["beam_size must be >= 1", "0"]),
    "beam size float": (lambda: beam_search(DEC, IDS[0], beam_size=2.0), TypeError, ["beam_size must be an int"]),
    "beam max_len 0": (lambda: beam_search(DEC, IDS[0], max_len=0), ValueError, ["max_len must be >= 1"]),
    "beam alpha negative": (lambda: beam_search(DEC, IDS[0], alpha=-1), ValueError, ["alpha must be >= 0", "-1"]),
    "beam alpha str": (lambda: beam_search(DEC, IDS[0], alpha="0.6"), TypeError, ["alpha must be a number >= 0", "str"]),
    "beam src 2-d": (lambda: beam_search(DEC, IDS), ValueError, ["src must have 1 dimensions"]),
    "beam eos too big": (lambda: beam_search(DEC, IDS[0], eos=14), ValueError, ["eos", "14"]),
    "logprob src float": (lambda: sequence_logprob(DEC, IDS[0].float(), [4]), TypeError, ["src"]),
    "translate a bare string": (lambda: translate(DEC, V, "123"), TypeError, ["texts must be a list of strings", "'123'"]),
    "translate an empty text": (lambda: translate(DEC, V, ["12", ""]), ValueError, ["texts[1] is empty"]),
    "translate a number": (lambda: translate(DEC, V, ["12", 3]), TypeError, ["texts[1] must be a string", "int"]),
    "translate max_len 0": (lambda: translate(DEC, V, ["12"], max_len=0), ValueError, ["max_len must be >= 1"]),
    "translate batch_size 0": (lambda: translate(DEC, V, ["12"], batch_size=0), ValueError, ["batch_size must be >= 1"]),
    "beam_translate beam 0": (lambda: beam_translate(DEC, V, ["12"], beam_size=0), ValueError, ["beam_size must be >= 1"]),
    "beam_translate max_len -1": (lambda: beam_translate(DEC, V, ["12"], max_len=-1), ValueError, ["max_len must be >= 1"]),
    "translate a Trained": (lambda: translate(TASK, V, ["12"]), TypeError, ["model must be a Transformer", "Task"]),
    # training
    "train steps 0": (lambda: train(DEC, batch_stream(TASK.train, V, 8), steps=0), ValueError, ["steps must be >= 1", "0"]),
    "train warmup 0": (lambda: train(DEC, batch_stream(TASK.train, V, 8), 5, warmup=0), ValueError, ["warmup must be >= 1"]),
    "train factor 0": (lambda: train(DEC, batch_stream(TASK.train, V, 8), 5, factor=0), ValueError, ["factor must be > 0, got 0"]),
    "train average 0": (lambda: train(DEC, batch_stream(TASK.train, V, 8), 5, average=0), ValueError, ["average must be >= 1"]),
    "train not iterable": (lambda: train(DEC, 3, 5), TypeError, ["batches must be an iterable of Batch", "int"]),
    "train empty batches": (lambda: train(DEC, [], 5, progress=False), ValueError, ["batches is empty"]),
    "train pairs, not batches": (lambda: train(DEC, TASK.train, 5, progress=False), TypeError,
                                 ["batches must yield Batch objects", "tuple"]),
    "train iterator runs out": (lambda: train(DEC, iter([make_batch(TASK.train[:8], V)] * 3), 5, progress=False),
                                ValueError, ["batches ran out after 3 of 5 steps", "DataLoader"]),
    "train_task steps 0": (lambda: train_task("copy", steps=0), ValueError, ["steps must be >= 1"]),
    "train_task unknown task": (lambda: train_task("sort"), ValueError, ["name must be one of", "'sort'"]),
    # checkpoints
    "save config mismatch": (lambda: save_model("/tmp/never.pt", DEC, {**CONFIG, "d_ff": 64}, V), ValueError,
                             ["config does not match the model", "6 weights differ", "in Transformer(**config)"]),
    "save vocab mismatch": (lambda: save_model("/tmp/never.pt", DEC, CONFIG, Vocab("01")), ValueError,
                            ["vocab has 6 tokens", "14"]),
    "save config not a dict": (lambda: save_model("/tmp/never.pt", DEC, [1], V), TypeError, ["config must be a dict"]),
}


@pytest.mark.parametrize("name", list(DECODING_CASES))
def test_decoders_training_and_checkpoints_name_the_argument(name):
    check_error(name, *DECODING_CASES[name])


def test_load_model_on_files_that_are_not_checkpoints(tmp_path):
    "One line, a ValueError naming the file; not an IndexError from the unpickler"
    text = tmp_path / "notes.txt"; text.write_text("not a model")
    empty = tmp_path / "empty.pt"; empty.write_bytes(b"")
    other = tmp_path / "other.pt"; torch.save({"weights": 1}, other)
    for path in (text, empty, other):
        with pytest.raises(ValueError, match="is not a transformer_nb checkpoint") as e: load_model(path)
        assert str(path) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(IsADirectoryError, match="is a directory"): load_model(tmp_path)
    with pytest.raises(FileNotFoundError): load_model(tmp_path / "missing.pt")


def test_old_checkpoint_whose_weights_do_not_fit_gets_a_clear_error(tmp_path):
    path = tmp_path / "old.pt"
    save_model(path, DEC, CONFIG, V)
    ckpt = torch.load(path, weights_only=True)
    ckpt["state_dict"] = {"old_" + k: v for k, v in ckpt["state_dict"].items()}      # names of another version
    torch.save(ckpt, path)
    with pytest.raises(ValueError, match="saved by another version") as e: load_model(path)
    assert "\n" not in str(e.value)



def test_need_weights_must_be_a_bool():
    "A string such as 'yes' passed as true before (a newcomer's review)"
    from transformer_nb.gpt import GPT
    ids = torch.ones(1, 3, dtype=torch.long)
    for call in (lambda: Transformer(5, 5, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                     d_ff=16)(ids, ids, need_weights="yes"),
                 lambda: GPT(5, d_model=8, num_heads=2, num_layers=1, d_ff=16)(ids, need_weights=1)):
        with pytest.raises(TypeError, match="need_weights must be a bool, got"): call()


def test_ids_on_another_device_than_the_model():
    "A language model's ids on another device get one line naming them, not an error from inside the embedding"
    from transformer_nb.gpt import GPT
    ids = torch.ones(1, 3, dtype=torch.long, device="meta")
    with pytest.raises(ValueError, match=r"ids is on meta, but the model is on cpu: move it with ids.to\('cpu'\)"):
        GPT(5, d_model=8, num_heads=2, num_layers=1, d_ff=16)(ids)


def test_label_smoothing_eps_that_is_not_a_number():
    "A string compared with 0 failed inside Python's comparison before; now one TypeError naming eps"
    from transformer_nb.training import LabelSmoothingLoss, smoothed_targets
    with pytest.raises(TypeError, match=r"eps must be a number in \[0, 1\), got str '0.1'"):
        LabelSmoothingLoss(eps="0.1")
    with pytest.raises(ValueError, match=r"eps must be in \[0, 1\), got 1.0"):
        smoothed_targets(torch.tensor([1, 2]), 5, eps=1.0)


def test_generate_names_a_prompt_on_another_device():
    "generate runs the model inside the door: it checks the prompt's device itself, by the caller's name"
    from transformer_nb.gpt import GPT, generate
    model = GPT(5, d_model=8, num_heads=2, num_layers=1, d_ff=16)
    prompt = torch.ones(1, 3, dtype=torch.long, device="meta")
    with pytest.raises(ValueError, match=r"prompt is on meta, but the model is on cpu: move it with prompt.to\('cpu'\)"):
        generate(model, prompt, 2)


def test_core_helpers_name_what_is_wrong():
    "dropout's p, compare_modules' cut-off outputs and missing gradients, a device torch names but cannot use"
    from transformer_nb.core import check_device_name, compare_modules, dropout
    from transformer_nb.plotting import smooth
    for p in (1.5, -0.5, float("nan")):
        with pytest.raises(ValueError, match=r"p must be .*in \[0, 1\]"): dropout(torch.ones(6), p)
    assert torch.equal(dropout(torch.ones(6), 1.0), torch.zeros(6))  # F.dropout's p = 1: all dropped
    lin = torch.nn.Linear(4, 3)
    with pytest.raises(ValueError, match="ours' output 0 does not require grad"):
        compare_modules(lambda x: lin(x).detach(), lin, torch.randn(2, 4))
    with pytest.raises(ValueError, match="grad input 0: theirs has one, ours none"):
        compare_modules(lambda x: lin(x.detach()), lin, torch.randn(2, 4))
    with pytest.raises(ValueError, match="device is 'mps', but torch cannot put a tensor there"):
        check_device_name("mps")
    for k in (0, -1, 2.5):
        with pytest.raises((ValueError, TypeError), match="k must be"): smooth([1.0, 2.0], k=k)
