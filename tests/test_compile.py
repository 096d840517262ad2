"""The model compiles and exports (issue 13): `torch.compile(fullgraph=True)` of a training step equals eager,
`torch.export` of inference, no graph breaks under the default compile, no recompilation over steps; the cached
decoding step compiles too (issue 17).

The compiled tests use the `aot_eager` backend: it runs what can fail on the model's code (Dynamo's trace of the
whole forward with `fullgraph=True`, and AOTAutograd's trace of the backward) without inductor's C++ code
generation, which takes minutes on a small CPU and belongs to torch. One compiled module serves every step."""
import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from transformer_nb.transformer import Transformer
from transformer_nb.masking import padding_mask, target_mask

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
        assert compiled.layers[0].kv.shape[3] == 32                                       # grown at 4, 8 and 16
    finally:
        model.train(was_training)
