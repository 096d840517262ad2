"""Checkpoints (chapter 9a): a model saved and loaded computes the same outputs, the vocabulary's tokens (characters,
words or pieces) come back with their ids, the training state comes back as it was given, and another format or a
configuration this version cannot build is refused; so is a configuration that differs from the model, even in a
choice that owns no weight. CheckpointAverage refuses a `keep` below 1."""
import os
from dataclasses import asdict

import pytest
import torch

from transformer_nb.checkpoints import (
    CHECKPOINT_FORMAT,
    CheckpointAverage,
    load_checkpoint,
    load_model,
    save_model,
)
from transformer_nb.data import Vocab, make_batch, make_task
from transformer_nb.decoding import translate
from transformer_nb.transformer import Transformer, TransformerConfig

SMALL = dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, dropout=0.0,
             max_len=64)


def small_model(vocab: Vocab) -> Transformer:
    torch.manual_seed(0)
    return Transformer(len(vocab), len(vocab), **SMALL)


def test_save_load_round_trip(tmp_path):
    "An untrained model over the dates vocabulary: same logits, same translations, same vocabulary and metadata"
    task = make_task("dates", n_train=10, n_valid=20)
    m = small_model(task.vocab).eval()
    path = tmp_path / "m.pt"
    save_model(path, m, m.config, task.vocab, task="dates", accuracy=0.5)
    m2, v2, meta = load_model(path)
    assert meta == {"task": "dates", "accuracy": 0.5} and v2.itos == task.vocab.itos and not m2.training
    assert m2.config == m.config and isinstance(m2.config, TransformerConfig)
    b = make_batch(task.valid, task.vocab)
    with torch.no_grad():
        assert torch.equal(m2(b.src, b.tgt_in, b.src_mask, b.tgt_mask, b.src_mask),
                           m(b.src, b.tgt_in, b.src_mask, b.tgt_mask, b.src_mask))
    srcs = [s for s, _ in task.valid]
    assert translate(m2, v2, srcs) == translate(m, task.vocab, srcs)
    torch.save({"weights": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a transformer_nb checkpoint"): load_model(tmp_path / "other.pt")


def test_training_state_comes_back_as_given(tmp_path):
    "training= is stored as it is and load_checkpoint returns it; without it, None"
    vocab = Vocab("0123456789")
    m = small_model(vocab)
    state = dict(step=3, optimizer={"lr": 0.5}, rng=[torch.get_rng_state()])
    save_model(tmp_path / "t.pt", m, m.config, vocab, training=state)
    back = load_checkpoint(tmp_path / "t.pt")["training"]
    assert back["step"] == 3 and back["optimizer"] == {"lr": 0.5} and torch.equal(back["rng"][0], state["rng"][0])
    save_model(tmp_path / "n.pt", m, m.config, vocab)
    assert load_checkpoint(tmp_path / "n.pt")["training"] is None
    assert "training" not in torch.load(tmp_path / "n.pt", weights_only=True)


FULL_DISK = """import resource, signal, sys, torch
from transformer_nb.checkpoints import write_checkpoint
path = sys.argv[1]
write_checkpoint(path, {"format": "x", "w": torch.zeros(10)})               # the run that a new save replaces
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)        # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try: write_checkpoint(path, {"format": "x", "w": torch.zeros(100_000)})
except OSError as e: print(type(e).__name__, e)
"""


@pytest.mark.skipif(not hasattr(os, "setsid"), reason="RLIMIT_FSIZE is POSIX")
def test_a_write_that_fails_leaves_the_old_file_whole_and_says_why(tmp_path):
    """torch.save wrote in place: a full disk left a truncated file where the old checkpoint was (a resumed run was
    lost), and the error was torch's '[enforce fail at inline_container.cc:672] . unexpected pos ...'. Now the bytes
    go to a file beside it, which replaces it only once written: the old file is whole, nothing else is left behind,
    and the error is the OS's"""
    import subprocess
    import sys
    path = tmp_path / "run.pt"
    r = subprocess.run([sys.executable, "-c", FULL_DISK, str(path)], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == f"OSError cannot write {path}: File too large", (r.stdout, r.stderr)
    assert [p.name for p in tmp_path.iterdir()] == ["run.pt"]
    assert torch.load(path, weights_only=True)["w"].shape == (10,)


def test_a_file_that_cannot_be_replaced_is_refused_before_writing(tmp_path):
    "A checkpoint this user may not write (read-only; immutable, for root) is refused, with the OS's reason, and kept"
    import subprocess
    vocab = Vocab("0123456789")
    m = small_model(vocab)
    path = tmp_path / "old.pt"; path.write_bytes(b"an older run"); path.chmod(0o444)
    if os.access(path, os.W_OK): subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if os.access(path, os.W_OK): pytest.skip("no way here to make a file this user cannot write")
    try:
        with pytest.raises(PermissionError, match=f"cannot replace {path}: (Permission denied|Operation not permitted)"):
            save_model(path, m, m.config, vocab)
    finally: subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    assert path.read_bytes() == b"an older run"
    with pytest.raises(FileExistsError, match="is not a regular file"): save_model("/dev/null", m, m.config, vocab)


def test_checkpoint_of_another_format_or_an_unknown_config_is_refused(tmp_path):
    "Only the current format loads (0.1.0 has no other released); a config this version cannot build is named"
    torch.manual_seed(0)
    kwargs = dict(src_vocab=14, tgt_vocab=14, **SMALL)
    save_model(tmp_path / "m.pt", Transformer(**kwargs), kwargs, Vocab("0123456789"), task="copy")
    ckpt = torch.load(tmp_path / "m.pt", weights_only=False)
    assert ckpt["format"] == CHECKPOINT_FORMAT
    torch.save({**ckpt, "format": "transformer_nb.checkpoint/1"}, tmp_path / "old.pt")
    with pytest.raises(ValueError, match=rf"old.pt is not a transformer_nb checkpoint \(no 'format': '{CHECKPOINT_FORMAT}'\)"):
        load_model(tmp_path / "old.pt")
    torch.save({**ckpt, "config": {**ckpt["config"], "n_layers": 2}}, tmp_path / "odd.pt")
    with pytest.raises(ValueError, match="odd.pt holds a configuration this version "
                                         "cannot build: unknown"):
        load_model(tmp_path / "odd.pt")


def test_a_vocabulary_of_words_survives_a_checkpoint(tmp_path):
    "save_model keeps the tokens themselves (words, pieces or characters), so load_model rebuilds the same Vocab"
    vocab = Vocab(["ninety", "seven", "sieben", "und", "neunzig", "a"])
    m = small_model(vocab)
    save_model(tmp_path / "w.pt", m, m.config, vocab)
    _, back, _ = load_model(tmp_path / "w.pt")
    assert back.itos == vocab.itos and back.stoi["neunzig"] == vocab.stoi["neunzig"]
    chars = Vocab("0123456789-")
    mc = small_model(chars)
    save_model(tmp_path / "c.pt", mc, mc.config, chars)
    assert load_model(tmp_path / "c.pt")[1].itos == chars.itos


@pytest.mark.parametrize("field, value", [("activation", "gelu"), ("share_embeddings", True), ("max_len", 4),
                                          ("dropout", 0.1)])
def test_a_config_that_differs_in_a_choice_that_owns_no_weight_is_refused(tmp_path, field, value):
    """These choices leave every weight's shape alone, so the shape check let them through: the file loaded without
    complaint into a model that computes other outputs (or, for max_len, fails at its first forward)"""
    vocab = Vocab("0123456789")
    m = small_model(vocab).eval()
    with pytest.raises(ValueError, match=f"config does not match the model: its {field} is {value!r}, the model's is "):
        save_model(tmp_path / "m.pt", m, {**asdict(m.config), field: value}, vocab)
    assert not (tmp_path / "m.pt").exists()
    # a choice that owns weights is still named by its weights
    with pytest.raises(ValueError, match="weights differ, e.g. src_embed.positions.pos.weight is missing"):
        save_model(tmp_path / "m.pt", m, {**asdict(m.config), "positions": "learned"}, vocab)


@pytest.mark.parametrize("keep, error, words", [(0, ValueError, "keep must be >= 1, got 0"),
                                                (-1, ValueError, "keep must be >= 1, got -1"),
                                                (2.0, TypeError, "keep must be an int, got float 2.0")])
def test_checkpoint_average_refuses_a_keep_below_one(keep, error, words):
    """keep=0 used to keep every checkpoint (del xs[:-0] deletes nothing), keep=-1 none, so that apply() said "call
    add() first" after three adds"""
    with pytest.raises(error, match=words):
        CheckpointAverage(keep=keep)
    avg, lin = CheckpointAverage(keep=2), torch.nn.Linear(2, 1)
    for i in range(3):
        with torch.no_grad(): lin.weight.fill_(float(i))
        avg.add(lin)
    assert avg.count == 2 and avg.apply(lin).weight.flatten().tolist() == [1.5, 1.5]


def test_a_checkpoint_cut_short_is_not_said_to_be_another_program_s(tmp_path):
    """A checkpoint cut short (a copy interrupted, a full disk) is no longer a zip archive; the refusal said 'torch.save
    did not write it', which is false for such a file. It now names both causes (review of chapters 13-98, item 11)"""
    torch.manual_seed(0)
    kwargs = dict(src_vocab=14, tgt_vocab=14, **SMALL)
    save_model(tmp_path / "m.pt", Transformer(**kwargs), kwargs, Vocab("0123456789"), task="copy")
    data = (tmp_path / "m.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut.pt is not a transformer_nb checkpoint: it is not a file torch.save "
                                         r"wrote, or one cut short \(torch.load failed: \w+\)"):
        load_model(tmp_path / "cut.pt")
