"""The fast path (need_weights=False, chapter "Fast path"): the same outputs and gradients as the readable path within 1e-5 for self- and
cross-attention, every mask kind, both norm placements and whole models; dropout's mask; the harness that
measures them (the benchmark's machinery is tested in tests/test_bench.py and tests/test_benchmark.py)."""
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import all_close, small_gpt
from conftest import pad_mask as pad
from transformer_nb.attention import fused_attention as attention
from transformer_nb.attention import is_causal
from transformer_nb.book import measure
from transformer_nb.core import (
    Dropout,
    compare_modules,
    drop_mask,
    dropout,
    recompute_saved,
    saved_for_backward,
    torch_dropout_masks,
)
from transformer_nb.layers import RECOMPUTE_MIN_BYTES, DecoderLayer, EncoderLayer
from transformer_nb.masking import causal_mask
from transformer_nb.multihead import MultiHeadAttention, fused_projection
from transformer_nb.transformer import Transformer, TransformerConfig

ROOT = Path(__file__).resolve().parents[1]
B, T, S, D, H = 3, 11, 13, 64, 8          # distinct sizes, so that a swapped axis fails
TOL = 1e-5


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def make_mask(kind, n):
    "A mask for T queries over n keys"
    if kind == "none": return None
    if kind == "padding": return pad([n, n - 4, 2], n)
    if kind == "causal": return causal_mask(T)
    if kind == "causal+padding": return causal_mask(T) & pad([T, T - 3, 4], T)
    if kind == "random per head": return torch.rand(B, H, T, n, generator=_gen(7)) > 0.4
    if kind == "queries that see nothing":
        m = torch.rand(B, 1, T, n, generator=_gen(8)) > 0.3
        m[0, 0, 2] = False; m[2, 0, 5:] = False
        return m
    raise ValueError(kind)


def assert_paths_equal(fn, module, *inputs):
    "fn(need_weights, *inputs): the readable and the fast path agree, output and every gradient (compare_modules)"
    diffs = compare_modules(lambda *xs: fn(True, *xs), lambda *xs: fn(False, *xs), *inputs, seed=99,
                            params=[(n, p, p) for n, p in module.named_parameters()])
    assert len(diffs) == 1 + len(inputs) + len(list(module.parameters()))
    assert all_close(diffs, TOL), diffs


MASKS_SELF = ["none", "causal", "causal+padding", "padding", "random per head", "queries that see nothing"]
MASKS_CROSS = ["none", "padding", "random per head", "queries that see nothing"]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", MASKS_SELF)
def test_self_attention_paths_agree(kind, bias):
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, bias=bias)
    mask = make_mask(kind, T)
    x = torch.randn(B, T, D, generator=_gen(1))
    assert_paths_equal(lambda nw, x: mha(x, x, x, mask, need_weights=nw)[0], mha, x)


@pytest.mark.parametrize("kind", MASKS_CROSS)
def test_cross_attention_paths_agree(kind):
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H)
    mask = make_mask(kind, S)
    y, mem = torch.randn(B, T, D, generator=_gen(2)), torch.randn(B, S, D, generator=_gen(3))
    assert_paths_equal(lambda nw, y, m: mha(y, m, m, mask, need_weights=nw)[0], mha, y, mem)


def test_distinct_key_and_value_tensors_agree():
    "Keys and values from different tensors: no fusion is possible, and none is attempted."
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H)
    q, k, v = (torch.randn(B, n, D, generator=_gen(i)) for i, n in enumerate((T, S, S)))
    assert_paths_equal(lambda nw, q, k, v: mha(q, k, v, make_mask("padding", S), need_weights=nw)[0], mha, q, k, v)


@pytest.mark.parametrize("norm_first", [True, False])
def test_encoder_layer_paths_agree(norm_first):
    torch.manual_seed(0)
    layer = EncoderLayer(D, H, 96, dropout=0.0, norm_first=norm_first)
    x = torch.randn(B, S, D, generator=_gen(4))
    assert_paths_equal(lambda nw, x: layer(x, make_mask("padding", S), need_weights=nw)[0], layer, x)


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_layer_paths_agree(norm_first):
    torch.manual_seed(0)
    layer = DecoderLayer(D, H, 96, dropout=0.0, norm_first=norm_first)
    y, mem = torch.randn(B, T, D, generator=_gen(5)), torch.randn(B, S, D, generator=_gen(6))
    tgt, src = make_mask("causal+padding", T), make_mask("padding", S)
    assert_paths_equal(lambda nw, y, m: layer(y, m, tgt, src, need_weights=nw)[0], layer, y, mem)


@pytest.mark.parametrize("norm_first", [True, False])
def test_whole_model_paths_agree(norm_first):
    """Transformer(...)(src, tgt) takes the fast path; with need_weights=True the readable one: same logits, and
    the same gradient of a training loss (mean cross-entropy) for every parameter."""
    torch.manual_seed(0)
    model = Transformer(40, 50, D, H, 2, 2, 96, dropout=0.0, norm_first=norm_first).train()
    src, tgt = torch.randint(1, 40, (B, S), generator=_gen(7)), torch.randint(1, 50, (B, T), generator=_gen(8))
    sm, tm = make_mask("padding", S), make_mask("causal+padding", T)
    results = []
    for readable in (True, False):
        model.zero_grad()
        out = model(src, tgt, sm, tm, sm, need_weights=readable)
        logits = out[0] if readable else out
        gold = torch.randint(0, 50, (B * T,), generator=_gen(9))
        nn.functional.cross_entropy(logits.flatten(0, 1), gold).backward()
        results.append([logits.detach()] + [p.grad.clone() for p in model.parameters()])
    for a, b in zip(*results): torch.testing.assert_close(b, a, atol=TOL, rtol=0)


def test_fast_path_returns_no_weights_and_same_shapes():
    mha = MultiHeadAttention(D, H)
    x = torch.randn(B, T, D)
    out, w = mha(x, x, x, need_weights=False)
    assert w is None and out.shape == (B, T, D)
    layer = DecoderLayer(D, H, 96)
    y, ws, wc = layer(x, torch.randn(B, S, D), need_weights=False)
    assert ws is None and wc is None and y.shape == (B, T, D)


def test_fast_path_keeps_less_for_backward():
    "Nothing the backward pass does not need: the fast path saves fewer bytes than the readable one."
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H)
    x = torch.randn(B, 64, D, requires_grad=True)
    saved = lambda nw: saved_for_backward(lambda: mha(x, x, x, causal_mask(64), need_weights=nw))
    assert saved(False) < 0.8 * saved(True)


def _norm_then_linear(recompute, x, norm, lin, grad_of=None, create_graph=False):
    "Gradients of lin(norm(x)).tanh().sum(), the norm's output kept or computed again"
    h = norm(x)
    if recompute:
        with recompute_saved(h, lambda: norm(x)): y = lin(h.view(-1, h.shape[-1])).tanh().sum()
    else: y = lin(h.view(-1, h.shape[-1])).tanh().sum()
    return torch.autograd.grad(y, grad_of or (x, norm.weight, norm.bias, lin.weight), create_graph=create_graph)


def test_recompute_saved_keeps_less_and_gives_the_same_gradients():
    torch.manual_seed(0)
    norm, lin = nn.LayerNorm(D), nn.Linear(D, D)
    x = torch.randn(B, 128, D, requires_grad=True)
    grads = {r: _norm_then_linear(r, x, norm, lin) for r in (False, True)}
    for a, b in zip(grads[False], grads[True]): assert torch.equal(a, b)
    kept, recomputed = (saved_for_backward(lambda r=r: _norm_then_linear(r, x, norm, lin)) for r in (False, True))
    # the view of h that the linear layer keeps is not kept: one (B, T, D) tensor less
    assert kept - recomputed == B * 128 * D * 4 / 2**20


def test_recompute_saved_second_order_gradients_and_checkpointing():
    "create_graph=True rebuilds the norm's graph; under activation checkpointing the hooks compose"
    torch.manual_seed(0)
    norm, lin = nn.LayerNorm(D), nn.Linear(D, D)
    x = torch.randn(B, 5, D, requires_grad=True)
    def second(r):
        g, = _norm_then_linear(r, x, norm, lin, grad_of=(x,), create_graph=True)
        return torch.autograd.grad(g.square().sum(), (x, norm.weight, lin.weight))
    for a, b in zip(second(False), second(True)): assert torch.equal(a, b)
    from torch.utils.checkpoint import checkpoint
    def checkpointed(r):
        def inner(x):
            h = norm(x)
            if not r: return lin(h).tanh()
            with recompute_saved(h, lambda: norm(x)): return lin(h).tanh()
        return torch.autograd.grad(checkpoint(inner, x, use_reentrant=False).sum(), (x, lin.weight))
    for a, b in zip(checkpointed(False), checkpointed(True)): assert torch.equal(a, b)


def test_recompute_saved_of_a_view_with_an_offset():
    "t a view at offset 16 of its storage, fn() a fresh tensor at offset 0: the saved view of t is found by its place in t"
    torch.manual_seed(0)
    x, w = torch.randn(6, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    def grads(r):
        t = (x * 2)[2:]                              # storage offset 16
        if r:
            with recompute_saved(t, lambda: (x * 2)[2:].clone()): y = (t[1:] @ w).tanh().sum()
        else: y = (t[1:] @ w).tanh().sum()
        return torch.autograd.grad(y, (x, w))
    for a, b in zip(grads(False), grads(True)): assert torch.equal(a, b)


def test_recompute_saved_lets_t_go():
    "Autograd keeps the hooks as long as what they packed: they must not hold t, or t stays in memory"
    import gc
    import weakref
    torch.manual_seed(0)
    norm, lin = nn.LayerNorm(D), nn.Linear(D, D)
    x = torch.randn(B, 5, D, requires_grad=True)
    h = norm(x)
    with recompute_saved(h, lambda: norm(x)): y = lin(h).tanh().sum()
    gone = weakref.ref(h); del h; gc.collect()
    assert gone() is None
    y.backward()
    assert x.grad is not None and x.grad.isfinite().all()


def test_recompute_saved_steps_aside_without_gradients():
    h = torch.randn(3, 4, requires_grad=True)
    top = torch._C._autograd._top_saved_tensors_default_hooks
    with recompute_saved(h, lambda: h): assert top(False) is not None
    with torch.no_grad(), recompute_saved(h, lambda: h): assert top(False) is None
    with recompute_saved(h.detach(), lambda: h): assert top(False) is None


def test_pre_ln_layer_under_torch_func_grad():
    "torch.func's transforms wrap tensors that saved-tensor hooks cannot read: the recomputation steps aside"
    from torch.func import functional_call, grad
    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, 32, dropout=0.0)
    x = torch.randn(2, RECOMPUTE_MIN_BYTES // (2 * 16 * 4), 16)     # large enough to recompute
    loss = lambda p: functional_call(layer, p, (x,), {"need_weights": False})[0].square().sum()
    g = grad(loss)(dict(layer.named_parameters()))
    layer(x, need_weights=False)[0].square().sum().backward()
    for k, p in layer.named_parameters(): torch.testing.assert_close(g[k], p.grad)


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("cls", [EncoderLayer, DecoderLayer])
def test_layers_recompute_their_norms_in_pre_ln(cls, norm_first):
    "Pre-LN layers keep x instead of norm(x): the same gradients, bit for bit, and less kept; post-LN has nothing to recompute"
    torch.manual_seed(0)
    layer = cls(D, H, 96, dropout=0.0, norm_first=norm_first)
    L = RECOMPUTE_MIN_BYTES // (B * D * 4) + 1          # just above the size where it starts
    x = torch.randn(B, L, D, requires_grad=True)
    args = (x,) if cls is EncoderLayer else (x, torch.randn(B, S, D))
    grads, kept = {}, {}
    for r in (False, True):
        layer.recompute_norm = r
        run = lambda: layer(*args, need_weights=False)[0].tanh().sum().backward()
        kept[r] = saved_for_backward(run)
        layer.zero_grad(set_to_none=True); x.grad = None
        run()
        grads[r] = [x.grad] + [p.grad for p in layer.parameters()]
        layer.zero_grad(set_to_none=True); x.grad = None
    for a, b in zip(grads[False], grads[True]): assert torch.equal(a, b)
    sublayers = 2 if cls is EncoderLayer else 3
    # one (B, T, D) float tensor less per sublayer in pre-LN
    assert kept[False] - kept[True] == (sublayers * B * L * D * 4 / 2**20 if norm_first else 0)
    assert cls.recompute_norm is True      # the default
    # below RECOMPUTE_MIN_BYTES the layer keeps norm(x): nothing recomputed
    small = torch.randn(B, T, D, requires_grad=True)
    args = (small,) if cls is EncoderLayer else (small, torch.randn(B, S, D))
    assert B * T * D * 4 < RECOMPUTE_MIN_BYTES
    kept_small = []
    for r in (False, True):
        layer.recompute_norm = r
        kept_small.append(saved_for_backward(lambda: layer(*args, need_weights=False)[0].sum().backward()))
    assert kept_small[0] == kept_small[1]


def _norm_layer(norm):
    "A pre-LN layer whose norms are `norm`: an EncoderLayer (LayerNorm) or a decoder-only DecoderLayer"
    if norm == "layer": return EncoderLayer(64, 4, 128, dropout=0.0)
    return DecoderLayer(64, 4, 128, dropout=0.0, cross_attention=False, norm=norm)


def _grads_of_recompute(norm, run, T=128):
    "The parameters' gradients of run(layer, x) with recompute_norm True and False; x is 256 kB at T=128"
    out = {}
    for r in (True, False):
        torch.manual_seed(0)
        layer = _norm_layer(norm)
        layer.recompute_norm = r
        x = torch.randn(8, T, 64)                                   # 8 * 128 * 64 floats = 256 kB
        out[r] = run(layer, x)
    return out


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_recomputed_norm_under_functional_call_gives_the_gradients_of_what_ran(norm):
    """functional_call puts the module's own weights back before backward: the norm is computed again from the
    weights the forward pass read, so the gradients are those of recompute_norm=False (before: 181 off of 544)"""
    from torch.func import functional_call
    def run(layer, x):
        params = {k: (v * 1.5).detach().requires_grad_() for k, v in layer.named_parameters()}
        y = functional_call(layer, params, (x,), {"need_weights": False})[0]
        y.pow(2).sum().backward()
        return {k: v.grad for k, v in params.items()}
    g = _grads_of_recompute(norm, run)
    assert g[True].keys() == g[False].keys()
    for k in g[False]: assert torch.equal(g[True][k], g[False][k]), k


HOOKS = ["removed before backward", "removes itself as it fires", "on every module, removed"]


@pytest.mark.parametrize("how", HOOKS)
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_a_hooked_norm_is_not_recomputed(norm, how):
    """A forward hook that changes the norm's output, gone by the backward pass: the layer keeps what the hooked
    norm returned, and the gradients are those of recompute_norm=False (before: 77 off of 106)"""
    def run(layer, x):
        norms = [m for m in layer.modules() if m is layer.norm1]
        steer = lambda m, i, o: o + 1.0 if m in norms else None
        if how == "on every module, removed":
            handle = nn.modules.module.register_module_forward_hook(steer)
        else:
            def once(m, i, o):
                if how == "removes itself as it fires": handle.remove()
                return steer(m, i, o)
            handle = layer.norm1.register_forward_hook(once)
        y = layer(x, need_weights=False)[0]
        handle.remove()
        y.pow(2).sum().backward()
        return {k: p.grad for k, p in layer.named_parameters()}
    g = _grads_of_recompute(norm, run)
    for k in g[False]: assert torch.equal(g[True][k], g[False][k]), k


def test_a_hooked_norm_keeps_its_output_and_an_unhooked_one_does_not():
    "What autograd keeps: one (8, 128, 64) float tensor less per sublayer without hooks, none less with one"
    torch.manual_seed(0)
    layer = EncoderLayer(64, 4, 128, dropout=0.0)
    x = torch.randn(8, 128, 64)
    kept = {}
    for r in (False, True):
        layer.recompute_norm = r
        kept[r] = saved_for_backward(lambda: layer(x, need_weights=False)[0].sum().backward())
    assert kept[False] - kept[True] == 2 * 8 * 128 * 64 * 4 / 2**20
    layer.norm2.register_forward_pre_hook(lambda m, args: None)
    hooked = saved_for_backward(lambda: layer(x, need_weights=False)[0].sum().backward())
    assert hooked - kept[True] == 8 * 128 * 64 * 4 / 2**20        # norm2's output is kept


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drop_mask_probability(p):
    torch.manual_seed(0)
    n = 10**6
    m = drop_mask((n,), p)
    assert m.dtype == torch.bool and m.shape == (n,)
    sd = (p * (1 - p) / (n / 2)) ** 0.5
    for half in (m[0::2], m[1::2]):                                  # both 32-bit halves of each 64-bit draw
        assert abs(half.float().mean().item() - p) < 5 * sd


def test_drop_mask_bits_are_independent_of_position():
    "Neighbouring elements (the two halves of one 64-bit number) are uncorrelated."
    torch.manual_seed(1)
    m = drop_mask((10**6,), 0.5).float()
    a, b = m[0::2] - 0.5, m[1::2] - 0.5
    assert abs((a * b).mean().item()) < 5 * 0.25 / (len(a) ** 0.5)


def test_dropout_behaviour():
    torch.manual_seed(0)
    x = torch.randn(400, 500, requires_grad=True)
    y = dropout(x, 0.2)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / 0.8)
    assert abs(kept.float().mean().item() - 0.8) < 0.005
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / 0.8)          # gradient flows through the kept ones only
    assert dropout(x, 0.2, training=False) is x and dropout(x, 0.0) is x
    assert (dropout(x, 1.0) == 0).all()
    torch.manual_seed(3); a = dropout(x, 0.3); torch.manual_seed(3); b = dropout(x, 0.3)
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_every_dropout_in_the_model_is_ours():
    model = Transformer(20, 20, 32, 4, 1, 1, 64)
    drops = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert drops and all(type(m) is Dropout for m in drops)
    x = torch.randn(50, 50)
    assert (Dropout(0.3).eval()(x) == x).all()


def test_training_with_dropout_on_the_fast_path_is_finite_and_zero_for_masked_queries():
    "Dropout in attention on a CPU takes our own branch; a query with no key still gets a zero output."
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.3).train()
    x = torch.randn(B, T, D, requires_grad=True)
    mask = torch.ones(B, 1, T, T, dtype=torch.bool); mask[1, 0, 4] = False
    out, _ = mha(x, x, x, mask, need_weights=False)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(out[1, 4], mha.W_o.bias.detach())     # zero attention output, then W_o


def test_is_causal():
    assert is_causal(causal_mask(T), T, T)
    assert is_causal(causal_mask(T)[0, 0], T, T)
    assert not is_causal(causal_mask(T), T, S)
    assert not is_causal(causal_mask(T) & pad([T, 3, 4], T), T, T)
    assert not is_causal(causal_mask(T).expand(2, 1, T, T), T, T)
    assert not is_causal(torch.ones(1, 1, T, T, dtype=torch.bool), T, T)
    assert not is_causal(None, T, T)


def test_attention_matches_chapter_two():
    from transformer_nb.attention import scaled_dot_product_attention
    q, k, v = (torch.randn(B, H, n, 16, generator=_gen(i)) for i, n in enumerate((T, S, S)))
    for mask in (None, make_mask("padding", S), make_mask("queries that see nothing", S)):
        torch.testing.assert_close(attention(q, k, v, mask), scaled_dot_product_attention(q, k, v, mask)[0],
                                   atol=TOL, rtol=0)


def test_fused_projection_equals_separate_linears():
    for bias in (True, False):
        ls = [nn.Linear(D, D, bias=bias) for _ in range(3)]
        x = torch.randn(B, T, D)
        torch.testing.assert_close(fused_projection(x, ls), torch.cat([l(x) for l in ls], -1), atol=TOL, rtol=0)



@pytest.mark.parametrize("fused", [True, False])
def test_eval_after_optimizer_steps_uses_the_new_weights(fused):
    """Evaluate, train a step, evaluate again: the fast path sees the new weights. A guard for any cache of stacked
    weights: fused Adam updates parameters in place without bumping their version counters."""
    torch.manual_seed(0)
    model = Transformer(40, 50, D, H, 2, 2, 96, dropout=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, fused=fused)
    src, tgt = torch.randint(1, 40, (B, S), generator=_gen(7)), torch.randint(1, 50, (B, T), generator=_gen(8))
    sm, tm = make_mask("padding", S), make_mask("causal+padding", T)
    for _ in range(2):
        model.eval()
        with torch.no_grad():
            fast = model(src, tgt, sm, tm, sm)
            readable = model(src, tgt, sm, tm, sm, need_weights=True)[0]
        torch.testing.assert_close(fast, readable, atol=TOL, rtol=0)
        model.train(); opt.zero_grad()
        model(src, tgt, sm, tm, sm).logsumexp(-1).mean().backward(); opt.step()

# chapter 12's measuring harness (the benchmark's own machinery: tests/test_bench.py)

def test_torch_transformer_has_our_weights_and_masks():
    "The benchmark's nn.Transformer computes the same logits as our model, masks converted in the one place."
    torch.manual_seed(0)
    for norm_first in (True, False):
        ours = Transformer(30, 30, 32, 4, 2, 2, 64, dropout=0.0, norm_first=norm_first).eval()
        theirs = measure.TorchTransformer(ours).eval()
        src, tgt = torch.randint(1, 30, (B, S), generator=_gen(1)), torch.randint(1, 30, (B, T), generator=_gen(2))
        sm, tm = make_mask("padding", S), make_mask("causal+padding", T)
        with torch.no_grad():
            torch.testing.assert_close(theirs(src, tgt, sm, tm, sm), ours(src, tgt, sm, tm, sm), atol=1e-4, rtol=0)
            torch.testing.assert_close(theirs(src, tgt, None, causal_mask(T)), ours(src, tgt, None, causal_mask(T)),
                                       atol=1e-4, rtol=0)


def test_torch_transformer_keeps_the_models_activation():
    "A GELU model's nn.Transformer runs GELU too (it ran torch's default ReLU and failed the layer check); SwiGLU, which nn.Transformer lacks, is refused by name"
    model = TransformerConfig(30, 30, d_model=32, num_heads=4, num_encoder_layers=1, num_decoder_layers=1,
                              d_ff=64, dropout=0.0, activation="gelu")
    impls = measure.build(measure.RunConfig(model, seq_len=8, batch_size=2))
    assert impls["torch"][0].transformer.decoder.layers[0].activation is nn.functional.gelu
    src, tgt_in, _, tgt_mask = measure.random_batch(measure.RunConfig(model, 8, 2))
    with torch.no_grad():
        logits = {k: f(src, tgt_in, None, tgt_mask) for k, (m, f) in impls.items()}
    for k in ("fast", "torch"): torch.testing.assert_close(logits[k], logits["readable"], atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="activation='swiglu' has no nn.Transformer counterpart"):
        measure.TorchTransformer(Transformer(30, 30, 32, 4, 1, 1, 64, dropout=0.0, activation="swiglu"))


def test_the_three_implementations_compute_the_same_loss():
    config = measure.small_config(seq_len=8, batch_size=2, vocab=30, dropout=0.0).with_model(d_model=32, d_ff=64)
    impls = measure.build(config)
    src, tgt_in, tgt_out, tgt_mask = measure.random_batch(config)
    with torch.no_grad():
        logits = {k: f(src, tgt_in, None, tgt_mask) for k, (m, f) in impls.items()}
    for k in ("fast", "torch"): torch.testing.assert_close(logits[k], logits["readable"], atol=1e-4, rtol=0)


def test_interleaved_times_in_turn():
    calls = []
    t = measure.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, reps=3, warmup=1)
    assert calls == ["a", "b"] * 4 and set(t) == {"a", "b"}
    assert all(v["min"] <= v["median"] <= v["max"] for v in t.values())


def test_saved_for_backward_counts_what_autograd_keeps():
    w = torch.randn(256, 256, requires_grad=True)
    x = torch.randn(1000, 256)
    def step(): (x @ w).sum().backward()
    assert saved_for_backward(step) == pytest.approx(1000 * 256 * 4 / 2**20)   # x is kept for w's gradient


TINY = measure.small_config(16, batch_size=4, vocab=50).with_model(d_model=32, d_ff=64)


def test_torch_dropout_masks_draw_what_torch_draws():
    x = torch.randn(6, 50)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=_gen(i)) for i in range(3))
    with torch_dropout_masks():
        assert torch_dropout_masks.active
        torch.manual_seed(0); ours = dropout(x, 0.3)
        torch.manual_seed(0); attn = attention(q, k, v, None, 0.5)
    assert not torch_dropout_masks.active
    torch.manual_seed(0); assert torch.equal(ours, nn.functional.dropout(x, 0.3))
    torch.manual_seed(0); assert torch.equal(attn, nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5))
    torch.manual_seed(0); assert not torch.equal(dropout(x, 0.3), ours)   # outside: our own mask


def _products(mha, *args):
    "The out_features of every F.linear that mha(*args, need_weights=False) computes, in order"
    from torch.overrides import TorchFunctionMode
    seen = []
    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is nn.functional.linear: seen.append(args[1].shape[0])
            return func(*args, **(kwargs or {}))
    with Count(): out = mha(*args, need_weights=False)[0]
    return seen, out


def test_fuse_projections_switch():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H)
    x, mem = torch.randn(B, T, D), torch.randn(B, S, D)
    fused = _products(mha, x, x, x), _products(mha, x, mem, mem)
    assert [f[0] for f in fused] == [[3 * D, D], [D, 2 * D, D]]     # K and V of the memory in one product
    mha.fuse_projections = False
    apart = _products(mha, x, x, x), _products(mha, x, mem, mem)
    assert [a[0] for a in apart] == [[D, D, D, D]] * 2             # three products each time, and W_o
    for a, b in zip(fused, apart): torch.testing.assert_close(a[1], b[1], atol=TOL, rtol=0)


def test_hooks_on_the_projections_run_on_the_fast_path():
    """Q, K, V are projected by one product only where W_q, W_k, W_v are plain nn.Linear without hooks: otherwise
    the modules are called, their hooks fire, and what a hook changes is seen (before: W_k's hook never ran)"""
    g = small_gpt().eval()
    attn, ids = g.stack.layers[0].self_attn, torch.randint(0, 17, (2, 6))
    calls = []
    for n in ("W_q", "W_k", "W_v", "W_o"):
        getattr(attn, n).register_forward_hook(lambda m, i, o, n=n: calls.append(n))
    g(ids)
    assert calls == ["W_q", "W_k", "W_v", "W_o"]
    zero_k = attn.W_k.register_forward_hook(lambda m, i, o: o * 0)
    hooked = g(ids)
    torch.testing.assert_close(hooked, g(ids, need_weights=True)[0], atol=TOL, rtol=0)
    zero_k.remove()
    assert (hooked - g(ids)).abs().max() > 0.1                     # the hook changed the output
    # cross-attention's W_k and W_v, read from the memory
    mha, x, mem = MultiHeadAttention(D, H), torch.randn(B, T, D), torch.randn(B, S, D)
    mha.W_v.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    torch.testing.assert_close(mha(x, mem, mem, need_weights=False)[0], mha(x, mem, mem)[0], atol=TOL, rtol=0)
    assert _products(mha, x, mem, mem)[0] == [D, D, D, D]


def test_fused_attention_under_vmap_with_a_causal_mask():
    "is_causal reads the mask's values, which vmap refuses (aten::equal): it steps aside there, as when compiling"
    from transformer_nb.attention import fused_attention
    from transformer_nb.masking import causal_mask
    # per example: q (1, 2, 4, 8) and its own mask (1, 1, 4, 4), as make_batch's target masks
    q, masks = torch.randn(3, 1, 2, 4, 8), causal_mask(4).expand(3, 1, 1, 4, 4)
    out = torch.func.vmap(lambda x, m: fused_attention(x, x, x, m))(q, masks)
    torch.testing.assert_close(out, torch.stack([fused_attention(x, x, x, m) for x, m in zip(q, masks)]))


def test_a_hook_added_between_two_cached_steps_runs():
    """A decoding cache keeps the stacked W_q, W_k, W_v from step to step, but a hook put on W_k after the first
    step still runs at the next (d3921ba had looked at hooks only when stacking: the hook was skipped)"""
    from transformer_nb.layers import LayerCache
    g = small_gpt().eval()
    attn, ids = g.stack.layers[0].self_attn, torch.randint(0, 17, (1, 6))
    with torch.no_grad():
        cache = [LayerCache()]
        g(ids[:, :5], cache=cache)                                    # stacks the weights
        calls = []
        hook = attn.W_k.register_forward_hook(lambda m, i, o: calls.append(1) or o * 0)
        step = g(ids[:, 5:], cache=cache)
        hook.remove()
    assert calls == [1]
    with torch.no_grad(): plain = g(ids)[:, 5:]
    assert (step - plain).abs().max() > 0.1                            # what the hook did is seen


def test_pruned_projection_trains_on_the_fast_path():
    "torch.nn.utils.prune puts a pre-hook on W_q: three training steps run (before: the second raised)"
    import torch.nn.functional as F
    from torch.nn.utils import prune

    g = small_gpt()
    attn, ids = g.stack.layers[0].self_attn, torch.randint(0, 17, (2, 6))
    prune.l1_unstructured(attn.W_q, "weight", amount=0.5)
    opt = torch.optim.AdamW(g.parameters(), lr=1e-2)
    for _ in range(3):
        loss = F.cross_entropy(g(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad(); loss.backward(); opt.step()
    g.eval()
    torch.testing.assert_close(g(ids), g(ids, need_weights=True)[0], atol=TOL, rtol=0)
    assert (attn.W_q.weight == 0).float().mean() == 0.5           # the pruned weights stay at zero


def test_dynamically_quantized_model_runs_on_the_fast_path():
    "quantize_dynamic swaps each nn.Linear for a quantized one: the fast path calls it (before: a TypeError)"
    import warnings

    g = small_gpt().eval()
    ids = torch.randint(0, 17, (2, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                           # torch.ao's deprecation notice
        q = torch.ao.quantization.quantize_dynamic(g, {nn.Linear})
        fast, readable = q(ids), q(ids, need_weights=True)[0]
    torch.testing.assert_close(fast, readable, atol=TOL, rtol=0)
    assert (fast - g(ids)).abs().max() < 0.1                      # 8-bit weights: close to the float model


def test_training_step_with_default_adam():
    cfg = TINY.with_model(dropout=0.0)
    fused, plain = measure.training_step("fast", cfg), measure.training_step("fast", cfg, fused_adam=False)
    assert torch.equal(fused(), plain())                     # the same loss: the same weights and batch
    for a, b in zip(fused.module.parameters(), plain.module.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
