"""Checks at the door (issue 39): what a caller passes is checked once, where it enters the package; nothing inside
checks again. Every check function of the package is replaced by a counter, in every module that imported it, and
the counts of a training step, of a forward pass with weights and of cached decoding are pinned: they do not grow
with the number of layers or of decoded tokens, so a check re-introduced inside a layer, an attention or a decoding
step fails here."""
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import transformer_nb
from transformer_nb.core import Dropout, dropout, inside
from transformer_nb.decoding import KVCache, beam_search, decode_step, greedy_search
from transformer_nb.gpt import GPT, generate, train_lm
from transformer_nb.layers import EncoderLayer
from transformer_nb.masking import padding_mask, target_mask
from transformer_nb.multihead import MultiHeadAttention
from transformer_nb.transformer import Transformer

MODULES = ["core", "attention", "embeddings", "multihead", "ffn", "norms", "layers", "transformer", "decoding", "gpt"]


def is_check(name, value):
    "Every check function: public `check_*` and private `_check_*` (not the door's own `outside`/`inside`)"
    return callable(value) and not isinstance(value, type) and name.startswith(("check_", "_check_"))


@pytest.fixture
def counts(monkeypatch):
    "A Counter of the check calls, by check name, while the test runs"
    calls = Counter()
    for modname in MODULES:
        mod = getattr(__import__(f"transformer_nb.{modname}"), modname)
        for name, real in list(vars(mod).items()):
            if not is_check(name, real): continue
            def counting(*a, _real=real, _name=name, **kw):
                calls[_name] += 1
                return _real(*a, **kw)
            monkeypatch.setattr(mod, name, counting)
    return calls


def model(layers, dropout=0.1, seed=0):
    torch.manual_seed(seed)
    return Transformer(11, 13, d_model=16, num_heads=2, num_encoder_layers=layers, num_decoder_layers=layers,
                       d_ff=32, dropout=dropout, max_len=32)


def data(seed=0, B=3, S=7, T=6):
    g = torch.Generator().manual_seed(seed)
    src, tgt = torch.randint(1, 11, (B, S), generator=g), torch.randint(1, 13, (B, T), generator=g)
    src[0, -2:] = 0; tgt[1, -1:] = 0
    return src, tgt, padding_mask(src, 0), target_mask(tgt, 0)


# the model's door: src and tgt (tensor, ids: tensor + nonempty each, device), three masks (each with its heads),
# need_weights, and the devices of the parameters
FORWARD = {"check_tensor": 4, "check_token_ids": 2, "check_nonempty": 2, "check_mask": 3, "check_heads_mask": 3,
           "check_device": 2, "check_bool": 1, "_check_devices": 1}


@pytest.mark.parametrize("layers", [1, 3])
def test_training_step_with_dropout(counts, layers):
    m = model(layers).train()
    src, tgt, sm, tm = data()
    counts.clear()                                       # what building the model checked
    logits = m(src, tgt, sm, tm, sm)
    F.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()
    assert dict(counts) == FORWARD


@pytest.mark.parametrize("layers", [1, 3])
def test_forward_with_weights(counts, layers):
    src, tgt, sm, tm = data()
    m = model(layers).eval()
    counts.clear()
    with torch.no_grad(): _, attn = m(src, tgt, sm, tm, sm, need_weights=True)
    assert attn.encoder.shape[0] == layers
    assert dict(counts) == FORWARD


@pytest.mark.parametrize("layers,max_len", [(1, 2), (3, 2), (3, 9)])
def test_cached_greedy_decoding(counts, layers, max_len):
    "greedy_search checks its arguments and the model checks src at encode, once; the steps check nothing"
    src, _, sm, _ = data()
    m = model(layers, 0.0)
    counts.clear()
    ids, _ = greedy_search(m, src, sm, max_len=max_len, eos=None)
    assert ids.shape == (3, max_len)
    assert dict(counts) == {"check_tensor": 3, "check_nonempty": 2, "check_mask": 2, "check_int": 4,
                            "check_token_ids": 1, "_check_model": 1, "_check_room": 1, "_check_source": 1,
                            "_check_tokens": 1, "check_bool": 2, "check_device": 1, "check_heads_mask": 1}


def test_a_decoding_step(counts):
    """decode_step called by a user is a door: one check of its token (the memory and its mask were checked once,
    where the cache was built); inside a decoding loop, none"""
    m = model(2, 0.0).eval()
    src, _, sm, _ = data()
    memory = m.encode(src, sm)
    counts.clear()
    cache = KVCache(m, memory, sm)
    assert dict(counts) == {"check_int": 1, "check_tensor": 1, "check_last_dim": 1, "check_nonempty": 1,
                            "check_mask": 1, "_check_model": 1, "_check_memory": 1, "check_device": 1,
                            "check_dtype": 1}
    counts.clear()
    token = torch.ones(3, dtype=torch.long)
    decode_step(m, cache, token)
    assert dict(counts) == {"check_tensor": 2, "check_token_ids": 1, "check_nonempty": 1, "_check_model": 1,
                            "_check_step": 1}
    counts.clear()
    with inside():
        for _ in range(3): decode_step(m, cache, token)
    assert counts == {}


def test_generation(counts):
    torch.manual_seed(0)
    g = GPT(20, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=24).eval()
    prompt = torch.randint(0, 20, (2, 4))
    counts.clear()
    generate(g, prompt, 3, greedy=True)
    few = dict(counts); counts.clear()
    generate(g, prompt, 12, greedy=True)
    assert dict(counts) == few


@pytest.mark.parametrize("max_len", [2, 6])
def test_beam_search(counts, max_len):
    """beam_search checks its arguments, and the model src at encode, once; the cache it builds from the model's own
    memory is inside the door (before: built outside it, KVCache checked that memory again)"""
    m = model(2, 0.0)
    counts.clear()
    beam_search(m, torch.tensor([4, 5, 6]), beam_size=2, max_len=max_len)
    assert dict(counts) == {"check_tensor": 3, "check_nonempty": 2, "check_mask": 1, "check_int": 5,
                            "check_token_ids": 1, "_check_model": 1, "_check_room": 1, "_check_source": 1,
                            "_check_tokens": 1, "check_bool": 1, "check_device": 1, "check_heads_mask": 1,
                            "check_real": 1}


@pytest.mark.parametrize("steps", [2, 5])
def test_training_a_language_model(counts, steps):
    """train_lm checks its arguments once; its steps (lm_batch, the forward pass) check nothing, only each step's
    loss (before: lm_batch's windows and the model's ids again at every step)"""
    torch.manual_seed(0)
    g = GPT(12, d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=16)
    counts.clear()
    train_lm(g, torch.arange(200) % 12, steps=steps, context=8, batch_size=2)
    assert dict(counts) == {"_check_context": 1, "_check_windows": 1, "check_int": 5, "check_nonempty": 1,
                            "check_real": 1, "check_seed": 1, "check_tensor": 2, "check_token_ids": 1,
                            "check_loss": steps}


@pytest.mark.parametrize("layers", [1, 3])
def test_a_gpt_forward(counts, layers):
    "A GPT checks its ids once (before: check_tensor twice, in GPT's door and again in the embedding's)"
    g = GPT(12, d_model=8, num_heads=2, d_ff=16, num_layers=layers, max_len=16)
    counts.clear()
    g(torch.randint(0, 12, (2, 6)))
    assert dict(counts) == {"_check_devices": 1, "check_bool": 1, "check_device": 1, "check_int": 1,
                            "check_nonempty": 1, "check_tensor": 2, "check_token_ids": 1}


def test_dropout_checks_p_once(counts):
    "dropout and a Dropout called by a user check p once (before: twice, again in drop_mask)"
    x = torch.randn(4, 8)
    dropout(x, 0.1, True)
    assert dict(counts) == {"check_real": 1}
    counts.clear()
    Dropout(0.1)(x)
    assert dict(counts) == {"check_real": 1}


def test_a_part_called_directly_checks_once():
    "A layer or an attention called by a user is itself the door: it checks what it was given, its parts do not"
    layer = EncoderLayer(16, 2, 32)
    x = torch.randn(3, 7, 16)
    with pytest.raises(ValueError, match="src_mask of shape"): layer(x, torch.ones(1, 1, 7, 6, dtype=torch.bool))
    mha = MultiHeadAttention(16, 2)
    with pytest.raises(ValueError, match="last dimension d_model=16"): mha(x, x[..., :8], x)
    with pytest.raises(ValueError, match="mask of shape"): mha(x, x, x, mask=torch.ones(7, 5, dtype=torch.bool))
    # a failed check leaves the door open: the next call checks again
    with pytest.raises(ValueError, match="mask of shape"): mha(x, x, x, mask=torch.ones(7, 5, dtype=torch.bool))
    assert transformer_nb.core.outside()


def test_the_door_is_per_thread():
    """A call under way in one thread does not open the door for another: a second thread's call checks its own
    inputs (before: one flag for every thread, and a mask refused alone was accepted, broadcast the wrong way, while
    another thread was inside a module)"""
    import threading

    from transformer_nb.core import outside
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 4, 8)
    bad = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)[:, None, :]     # (B, 1, S): reads as (H, T, S)
    with pytest.raises(ValueError, match="would read as"): mha(x, x, x, bad)
    a_in, b_done, res = threading.Event(), threading.Event(), {}
    def hold(*_):                                       # thread A waits inside the module until B is done
        if threading.current_thread().name == "A": a_in.set(); b_done.wait(30)
    mha.W_o.register_forward_hook(hold)
    a = threading.Thread(target=lambda: mha(x, x, x), name="A"); a.start()
    assert a_in.wait(30)
    def b():
        try: res["out"] = mha(x, x, x, bad)
        except ValueError as e: res["error"] = str(e)
        finally: b_done.set()
    t = threading.Thread(target=b, name="B"); t.start(); t.join(30); a.join(30)
    assert "would read as (H, T, S)" in res.get("error", ""), res
    assert outside()
