"""The model compiles and exports (issue 13): `torch.compile(fullgraph=True)` of a training step equals eager,
`torch.export` of inference, no graph breaks under the default compile, no recompilation over steps; the cached
decoding step compiles too (issue 17).

The compiled tests use the `aot_eager` backend: it runs what can fail on the model's code (Dynamo's trace of the
whole forward with `fullgraph=True`, and AOTAutograd's trace of the backward) without inductor's C++ code
generation, which takes minutes on a small CPU and belongs to torch. One compiled module serves every step."""
import hashlib
import os
from pathlib import Path

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from conftest import ROOT
from transformer_nb.masking import padding_mask, target_mask
from transformer_nb.transformer import Transformer

PAD = 0
SIZES = dict(d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32, max_len=32)


def batch(seed, B=3, S=7, T=6):
    "Same shapes every time, different tokens and padding: masks vary, shapes do not"
    g = torch.Generator().manual_seed(seed)
    src, tgt = torch.randint(1, 11, (B, S), generator=g), torch.randint(1, 13, (B, T), generator=g)
    src[seed % B, S - 1 - seed % 3:] = PAD
    tgt[(seed + 1) % B, T - 1 - seed % 2:] = PAD
    return src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD)


def loss_of(model, src, tgt, src_mask, tgt_mask):
    logits = model(src, tgt, src_mask, tgt_mask, src_mask)               # (B, T, V)
    return logits, F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=PAD)


def inductor_cache_dir() -> Path:
    """Inductor's cache for these tests, kept between runs under .build/: one folder per torch build, Python and
    kernels settings (tools/kernels.sh), so a cache written by another torch or another instruction set is never
    read. Inductor keys each entry on the graph and its own configuration; a run that finds its graph there skips
    the C++ compile (about 25 s of CPU), not the trace: Dynamo still traces the model's code every run, and the
    compiled module is still compared with eager. TNB_INDUCTOR_CACHE=0: a fresh cache of this run's own."""
    import sys
    key = "|".join([torch.__version__, torch.version.git_version, sys.version, os.uname().machine,
                    *(f"{k}={os.environ.get(k, '')}" for k in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS",
                                                                "ONEDNN_MAX_CPU_ISA"))])
    return ROOT / ".build" / "inductor" / hashlib.sha1(key.encode()).hexdigest()[:16]


@pytest.fixture(scope="module", autouse=True)
def private_inductor_cache(tmp_path_factory):
    """Compile into a cache of this project's own (inductor_cache_dir): inductor's shared one under /tmp, written by
    other runs (other code, other kernels settings), once gave NaN outputs here that a fresh cache did not"""
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    fresh = os.environ.get("TNB_INDUCTOR_CACHE") == "0"
    path = tmp_path_factory.mktemp("inductor") if fresh else inductor_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    if old is None: os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else: os.environ["TORCHINDUCTOR_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Transformer(11, 13, dropout=0.0, **SIZES)


@pytest.fixture(scope="module")
def compiled(model):
    torch._dynamo.reset()
    return torch.compile(model, fullgraph=True, backend="aot_eager")


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_compiled_training_step_equals_eager_without_recompiling(model, compiled):
    model.train()
    torch._dynamo.utils.counters.clear()
    for step in range(4):
        src, tgt, sm, tm = batch(step)
        model.zero_grad()
        logits, loss = loss_of(model, src, tgt, sm, tm)
        loss.backward()
        eager = grads(model)
        model.zero_grad()
        # after the first step, any recompilation is an error
        with torch._dynamo.config.patch(error_on_recompile=step > 0):
            c_logits, c_loss = loss_of(compiled, src, tgt, sm, tm)
        c_loss.backward()
        torch.testing.assert_close(c_logits, logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(c_loss, loss, atol=1e-5, rtol=0)
        c_grads = grads(model)
        assert c_grads.keys() == eager.keys() and len(eager) == len(list(model.parameters()))
        for n in eager: torch.testing.assert_close(c_grads[n], eager[n], atol=1e-5, rtol=0, msg=n)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1    # one graph for all four steps


def test_default_compile_has_no_graph_breaks():
    torch.manual_seed(0)
    m = Transformer(11, 13, dropout=0.1, **SIZES)                        # dropout on: the training path
    src, tgt, sm, tm = batch(0)
    for mode in (m.train, m.eval):
        mode()
        explained = torch._dynamo.explain(m)(src, tgt, sm, tm, sm)
        assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]


def test_compiled_inference_encode_decode(model):
    model.eval()
    src, tgt, sm, tm = batch(5)
    encode = torch.compile(model.encode, fullgraph=True, backend="aot_eager")
    decode = torch.compile(model.decode, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        memory = encode(src, sm)
        torch.testing.assert_close(memory, model.encode(src, sm), atol=1e-5, rtol=0)
        torch.testing.assert_close(decode(tgt, memory, tm, sm), model.decode(tgt, memory, tm, sm),
                                   atol=1e-5, rtol=0)


class Encode(torch.nn.Module):
    def __init__(self, m): super().__init__(); self.m = m
    def forward(self, src, src_mask): return self.m.encode(src, src_mask)


class Decode(torch.nn.Module):
    def __init__(self, m): super().__init__(); self.m = m
    def forward(self, tgt, memory, tgt_mask, memory_mask): return self.m.decode(tgt, memory, tgt_mask, memory_mask)


def test_export_inference(model):
    model.eval()
    src, tgt, sm, tm = batch(1)
    with torch.no_grad():
        exported = torch.export.export(model, (src, tgt, sm, tm, sm))
        src, tgt, sm, tm = batch(2)                                       # other tokens, other padding
        torch.testing.assert_close(exported.module()(src, tgt, sm, tm, sm), model(src, tgt, sm, tm, sm),
                                   atol=1e-5, rtol=0)
        memory = model.encode(src, sm)
        enc = torch.export.export(Encode(model), (src, sm)).module()
        dec = torch.export.export(Decode(model), (tgt, memory, tm, sm)).module()
        torch.testing.assert_close(enc(src, sm), memory, atol=1e-5, rtol=0)
        torch.testing.assert_close(dec(tgt, memory, tm, sm), model.decode(tgt, memory, tm, sm), atol=1e-5, rtol=0)


def test_eager_checks_still_fire(model):
    src, tgt, sm, tm = batch(0)
    with pytest.raises(ValueError, match="vocab_size"):
        model(src + 100, tgt, sm, tm, sm)


def test_compiled_cached_decoding_equals_eager(model):
    """The cached decoding step compiles as one graph (fullgraph=True) with the cache's sizes symbolic, gives eager's
    logits step after step, and stops compiling once it has seen an empty, a partly filled, a full and a growing
    cache: the cache doubles twice more without a recompilation."""
    from transformer_nb.decoding import KVCache, decode_step
    was_training = model.training
    model.eval()
    src, _, sm, _ = batch(3)
    torch._dynamo.reset()
    step = torch.compile(decode_step, fullgraph=True, dynamic=True, backend="aot_eager")
    try:
        with torch.no_grad():
            memory = model.encode(src, sm)
            eager, compiled = (KVCache(model, memory, sm, capacity=4) for _ in range(2))
            token = torch.ones(src.shape[0], dtype=torch.long)                   # <s> is 1 here
            for t in range(20):
                logits = decode_step(model, eager, token)                          # (B, V)
                # positions 0-4: first use, partly filled, full (3), grown (4); after them, none
                with torch._dynamo.config.patch(error_on_recompile=t > 4):
                    torch.testing.assert_close(step(model, compiled, token), logits, atol=1e-5, rtol=0)
                token = logits.argmax(-1)
        assert compiled.layers[0].keys.shape[2] == 32                                      # grown at 4, 8 and 16
    finally:
        model.train(was_training)


# ---------------------------------------------------------------- issue 31: checks safe under dynamic shapes

def shaped(B, S, T, seed=0):
    "A batch of given sizes, the last source and target positions of row 0 padded"
    g = torch.Generator().manual_seed(seed)
    src, tgt = torch.randint(1, 11, (B, S), generator=g), torch.randint(1, 13, (B, T), generator=g)
    src[0, -2:] = PAD; tgt[0, -1:] = PAD
    return src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD)


def test_inductor_dynamic_shapes_and_mask_combinations():
    """fullgraph compile with inductor, shapes changing between calls, and the first call passing one tensor as both
    src_mask and memory_mask (as train() does) before calls with separate ones: equal to eager every time. (The checks
    once compared symbolic sizes with `a in (1, b)`, which Dynamo answered wrongly after such a first call.)"""
    torch.manual_seed(0)
    m = Transformer(11, 13, dropout=0.0, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                    d_ff=16, max_len=16).eval()
    torch._dynamo.reset()
    c = torch.compile(m, fullgraph=True, dynamic=True, backend="inductor")
    with torch.no_grad():
        for i, (B, S, T, same) in enumerate([(3, 7, 6, True), (2, 9, 5, False)]):
            src, tgt, sm, tm = shaped(B, S, T, seed=i)
            mm = sm if same else padding_mask(src, PAD)
            torch.testing.assert_close(c(src, tgt, sm, tm, mm), m(src, tgt, sm, tm, mm), atol=1e-5, rtol=0)


def test_export_with_dynamic_batch_and_lengths(model):
    "torch.export with symbolic B, S and T: the exported program runs other sizes and equals eager"
    model.eval()
    B, S, T = (torch.export.Dim(n, min=2, max=30) for n in ("B", "S", "T"))
    shapes = ({0: B, 1: S}, {0: B, 1: T}, {0: B, 3: S}, {0: B, 2: T, 3: T}, {0: B, 3: S})
    with torch.no_grad():
        exported = torch.export.export(model, shaped(3, 7, 6) + (shaped(3, 7, 6)[2],), dynamic_shapes=shapes)
        for sizes in [(2, 9, 5), (4, 5, 8)]:
            src, tgt, sm, tm = shaped(*sizes, seed=1)
            torch.testing.assert_close(exported.module()(src, tgt, sm, tm, sm), model(src, tgt, sm, tm, sm),
                                       atol=1e-5, rtol=0)


def test_torchscript_what_the_docs_say():
    """Chapter "Fast path": torch.jit.script refuses the package's modules; torch.jit.trace records one run, which
    serves other sizes, but freezes the branches taken while tracing: traced with the exact causal mask, the fast path
    asked the kernel for `is_causal=True`, and the traced module then ignores another mask."""
    from transformer_nb.masking import causal_mask
    from transformer_nb.norms import LayerNorm
    torch.manual_seed(0)
    m = Transformer(11, 13, dropout=0.0, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                    d_ff=16, max_len=16).eval()
    # TorchScript refuses each module with an error type of its own; the Transformer first for its `**`
    # arguments (log_shapes), as the chapter's cell pins (a second try in one process gets another message)
    with pytest.raises(Exception, match="variable number of arguments"): torch.jit.script(m)  # noqa: B017
    with pytest.raises(Exception): torch.jit.script(LayerNorm(8))  # noqa: B017
    src, tgt, sm, tm = shaped(3, 7, 6)
    other = torch.rand(3, 1, 6, 6, generator=torch.Generator().manual_seed(0)) > 0.3
    with torch.no_grad(), pytest.warns(torch.jit.TracerWarning):
        traced = torch.jit.trace(m, (src, tgt, sm, tm, sm))                 # a padded target: not causal
        frozen = torch.jit.trace(m, (src, tgt, sm, causal_mask(6), sm))
    with torch.no_grad():
        src, tgt, sm, tm = shaped(2, 9, 5, seed=1)
        torch.testing.assert_close(traced(src, tgt, sm, tm, sm), m(src, tgt, sm, tm, sm), atol=1e-5, rtol=0)
        src, tgt, sm, _ = shaped(3, 7, 6, seed=2)
        assert (frozen(src, tgt, sm, other, sm) - m(src, tgt, sm, other, sm)).abs().max() > 1e-2
        # what it computes instead is causal attention, whatever mask it is given
        torch.testing.assert_close(frozen(src, tgt, sm, other, sm), m(src, tgt, sm, causal_mask(6), sm),
                                   atol=1e-6, rtol=0)


def test_no_value_is_read_off_the_device():
    """On the meta device any read of a tensor's values (int(ids.min()), torch.equal, .item()) raises: the model's
    forward, encode and decode, fast and readable path, with and without a cache, read none, so on a GPU they never
    wait for it. (On a CPU the ids' range and the causal mask are checked; there reading costs no wait.)"""
    from transformer_nb.layers import LayerCache
    torch.manual_seed(0)
    m = Transformer(11, 13, dropout=0.0, **SIZES).to("meta").eval()
    src, tgt, sm, tm = (t.to("meta") for t in batch(0))
    for need_weights in (False, True):
        out = m(src, tgt, sm, tm, sm, need_weights=need_weights)
        assert (out[0] if need_weights else out).shape == (3, 6, 13)
    memory = m.encode(src, sm)
    cache = [LayerCache() for _ in m.decoder.layers]
    for t in range(3): assert m.decode(tgt[:, t:t + 1], memory, None, sm, cache=cache).shape == (3, 1, 13)


def test_each_input_is_checked_once(monkeypatch):
    """Checks once, at the entry the caller uses: the model's forward checks each mask once, and none of the layers,
    attentions, FFNs, norms and embeddings inside checks its inputs again; a layer or stack called directly checks."""
    import transformer_nb.embeddings as emb
    import transformer_nb.ffn as ffn
    import transformer_nb.layers as layers
    import transformer_nb.multihead as mh
    import transformer_nb.norms as norms
    import transformer_nb.transformer as tr
    calls = []
    def counting(module, name):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, **kw: calls.append(f"{module.__name__}.{name}") or real(*a, **kw))
    for module, name in [(tr, "check_mask"), (layers, "check_mask"), (mh, "check_mask"), (layers, "_check_seq"),
                         (mh, "check_tensor"), (ffn, "check_tensor"), (norms, "check_tensor"),
                         (emb, "check_token_ids"), (tr, "check_token_ids")]:
        counting(module, name)
    torch.manual_seed(0)
    m = Transformer(11, 13, dropout=0.0, **SIZES).eval()
    src, tgt, sm, tm = batch(0)
    with torch.no_grad(): m(src, tgt, sm, tm, sm)
    assert sorted(calls) == sorted(["transformer_nb.transformer.check_mask"] * 3
                                   + ["transformer_nb.transformer.check_token_ids"] * 2), calls
    calls.clear()
    # a stack called directly is the door: it checks once, its layers not again
    from transformer_nb.layers import Encoder, EncoderLayer
    x = torch.randn(3, 7, 16)
    Encoder(16, 2, 32, 2)(x, sm)
    assert sorted(calls) == ["transformer_nb.layers._check_seq", "transformer_nb.layers.check_mask"], calls
    layer = EncoderLayer(16, 2, 32)
    with pytest.raises(ValueError, match="src_mask of shape"): layer(x, torch.ones(1, 1, 7, 6, dtype=torch.bool))


# ---------------------------------------------------------------- issue 43: the decoder-only model exports too
@pytest.mark.parametrize("dims", ["B", "T", "B and T"])
def test_export_gpt_with_dynamic_batch_and_length(dims):
    """torch.export of chapter 11c's GPT, called as a user would (grad mode on), with a symbolic batch, length or
    both: the book's own integer check takes the symbolic length (it refused a SymInt), and no layer compares a
    symbolic size (layers._normed did, before its is_compiling() test); the program runs other sizes, equal to eager"""
    from transformer_nb.gpt import GPT
    torch.manual_seed(0)
    m = GPT(11, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=32).eval()
    # up to 1024 rows: a batch whose activations pass layers.RECOMPUTE_MIN_BYTES lies within the range
    B, T = torch.export.Dim("B", min=2, max=1024), torch.export.Dim("T", min=2, max=32)
    shape = {"B": {0: B}, "T": {1: T}, "B and T": {0: B, 1: T}}[dims]
    exported = torch.export.export(m, (torch.randint(0, 11, (3, 9)),), dynamic_shapes={"ids": shape})
    for b, t in [(2, 9), (5, 9), (3, 4), (4, 17)]:
        if ("B" not in dims and b != 3) or ("T" not in dims and t != 9): continue
        ids = torch.randint(0, 11, (b, t))
        torch.testing.assert_close(exported.module()(ids), m(ids), atol=1e-5, rtol=0)
