"""The fast path (need_weights=False, chapter "Fast path"): the same outputs and gradients as the readable path within 1e-5 for self- and
cross-attention, every mask kind, both norm placements and whole models; dropout's mask; the benchmark's machinery."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import all_close
from conftest import pad_mask as pad
from transformer_nb.attention import fused_attention as attention
from transformer_nb.attention import is_causal
from transformer_nb.book import benchmark, measure
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
from transformer_nb.transformer import Transformer

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

# the benchmark's machinery (the benchmark itself is never a test)

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


def test_the_three_implementations_compute_the_same_loss():
    config = measure.small_config(seq_len=8, batch_size=2, vocab=30, dropout=0.0).with_model(d_model=32, d_ff=64)
    impls = measure.build(config)
    src, tgt_in, tgt_out, tgt_mask = measure.random_batch(config)
    with torch.no_grad():
        logits = {k: f(src, tgt_in, None, tgt_mask) for k, (m, f) in impls.items()}
    for k in ("fast", "torch"): torch.testing.assert_close(logits[k], logits["readable"], atol=1e-4, rtol=0)


def test_interleaved_and_summary():
    calls = []
    t = measure.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, reps=3, warmup=1)
    assert calls == ["a", "b"] * 4 and set(t) == {"a", "b"}
    assert all(v["min"] <= v["median"] <= v["max"] for v in t.values())
    entry = lambda s, tok: dict(median=s, min=s, max=s, tokens_per_s=tok / s, peak_mb=100 * s, saved_mb=1.0)
    res = {"train": {"T=8, dropout 0.1": {"readable": entry(2.0, 10), "fast": entry(1.0, 10), "torch": entry(1.25, 10),
                                          "flops": 50.0}},
           "matmul_peak": 100.0,
           "forward_base": {"readable": entry(3.0, 6), "fast": entry(2.0, 6), "torch": entry(2.0, 6)},
           "decoding": {"cached": entry(1.0, 8), "uncached": entry(4.0, 8)}}
    s = benchmark.summary(res)
    assert s["train T=8, dropout 0.1: fast / torch tokens/s"] == pytest.approx(1.25)
    assert s["train T=8, dropout 0.1: fast / readable tokens/s"] == pytest.approx(2.0)
    assert s["train T=8, dropout 0.1: fast / torch peak memory"] == pytest.approx(0.8)
    assert s["train T=8, dropout 0.1: fast share of matmul peak"] == pytest.approx(0.5)
    assert s["decoding: cached / uncached tokens/s"] == pytest.approx(4.0)


def test_saved_for_backward_counts_what_autograd_keeps():
    w = torch.randn(256, 256, requires_grad=True)
    x = torch.randn(1000, 256)
    def step(): (x @ w).sum().backward()
    assert saved_for_backward(step) == pytest.approx(1000 * 256 * 4 / 2**20)   # x is kept for w's gradient


def test_committed_results_are_complete():
    "The chapter draws benchmarks/results/cpu.json: a full run (not --quick), with every figure the ratios need."
    res = benchmark.load_results(ROOT / "benchmarks" / "results" / "cpu.json")
    assert not res["quick"]
    assert set(res["train"]) == {f"T={T}, dropout {p}" for T in (32, 128) for p in (0.1, 0.0)}
    for r in res["train"].values():
        for k in measure.IMPLEMENTATIONS: assert r[k]["peak_mb"] > 0 and r[k]["tokens_per_s"] > 0
    s = benchmark.summary(res)
    assert all(v > 0 for v in s.values())
    per_setting = ["fast / torch tokens/s", "fast / readable tokens/s", "fast / torch tokens/s, default Adam",
                   "fast / torch peak memory", "fast share of matmul peak", "compiled / fast tokens/s"]
    expected = {f"train {key}: {r}" for key in res["train"] for r in per_setting}
    expected |= {"forward base: fast / torch tokens/s", "forward base: fast / readable tokens/s",
                 "decoding: cached / uncached tokens/s"}
    expected |= {f"train T={T}: fast dropout 0.1 / 0 tokens/s" for T in (32, 128)}
    ladder = [f"T=128, dropout {p}" for p in (0.1, 0.0)]
    expected |= {f"train {key}: bfloat16 autocast / float32 tokens/s" for key in ladder}
    expected |= {f"ladder {key}: {name} / before tokens/s" for key in ladder for name in benchmark.RUNGS[1:]}
    expected |= {f"ladder {key}: top / torch tokens/s" for key in ladder}
    expected |= {f"kernel returning a {k}: compiled / eager speed" for k in ("float", "mask")}
    assert set(s) == expected
    panels = benchmark.profiled(res)                                  # the chapter draws where the time goes
    assert set(panels) == {f"{part}, length 128, dropout {p}" for part in ("training", "torch.compile")
                           for p in (0.1, 0.0)} | {"forward, base model", "greedy decoding"}
    assert all(b["profile"]["operators"] > 0 and b["profile"]["ms"]["matrix multiplies"] > 0
               for bars in panels.values() for b in bars.values())
    assert all(r["compile_s"] > 0 for r in res["compiled"].values())
    assert all(v["max_diff"] <= 1e-5 for lad in res["ladder"].values() for v in lad.values())
    runs = sorted((ROOT / "benchmarks" / "results" / "runs").glob("cpu-*.json"))  # the chapter draws their spread
    assert len(runs) == 3 and all(benchmark.summary(benchmark.load_results(p)).keys() == s.keys() for p in runs)


def test_run_script_help():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--quick" in out.stdout


def _result(scale):
    "A benchmark result of made-up timings: every tokens/s of the fast path scaled by `scale`"
    impl = lambda t: {"tokens_per_s": t, "median": 1.0, "peak_mb": 10.0}
    train = {f"T=32, dropout {p}": {"readable": impl(100), "fast": impl(100 * scale), "torch": impl(100),
                                    "flops": 1e9} for p in (0.1, 0.0)}
    return {"train": train, "matmul_peak": 1e10, "forward_base": {k: impl(50) for k in measure.IMPLEMENTATIONS},
            "decoding": {"cached": impl(40 * scale), "uncached": impl(10)},
            "bf16": {"T=32, dropout 0.1": {"float32": impl(100), "bfloat16": impl(10 * scale)}}}


def test_spread_is_the_lowest_and_highest_ratio_over_runs():
    r = benchmark.spread([_result(1.0), _result(1.5), _result(1.2)])
    assert r["train T=32, dropout 0.1: fast / torch tokens/s"] == pytest.approx((1.0, 1.5))
    assert r["decoding: cached / uncached tokens/s"] == pytest.approx((4.0, 6.0))
    assert r["train T=32, dropout 0.1: bfloat16 autocast / float32 tokens/s"] == pytest.approx((0.1, 0.15))
    assert r["train T=32: fast dropout 0.1 / 0 tokens/s"] == pytest.approx((1.0, 1.0))
    fig = benchmark.show_spread(r, {"decoding: cached / uncached tokens/s": (5.0, "at least")})
    assert len(fig.axes[0].get_yticklabels()) == len(r)
    colors = [line.get_color() for line in fig.axes[0].lines if line.get_linewidth() == 5]  # the bars
    assert colors[list(r).index("decoding: cached / uncached tokens/s")] == "#c0392b"  # 4-6, not all >= 5


def test_met_asks_every_run():
    assert benchmark.met((1.2, 1.5), (1.2, "at least")) and not benchmark.met((1.1, 1.5), (1.2, "at least"))
    assert benchmark.met((0.7, 0.9), (0.9, "at most")) and not benchmark.met((0.7, 0.95), (0.9, "at most"))
    with pytest.raises(ValueError, match='"at least" or "at most", got \'above\''):
        benchmark.met((1, 2), (1, "above"))


def test_op_group_sorts_torch_operators():
    assert benchmark.op_group("aten::addmm") == "matrix multiplies"
    assert benchmark.op_group("aten::_scaled_dot_product_flash_attention_for_cpu_backward") == "fused attention"
    assert benchmark.op_group("## Call CompiledFxGraph fx3k ##") == "compiled kernels"
    assert benchmark.op_group("aten::bernoulli_") == benchmark.op_group("aten::random_") == "random numbers"
    assert benchmark.op_group("aten::copy_") == "copies and fills"
    assert benchmark.op_group("aten::native_layer_norm") == "everything else"


def test_every_profile_group_has_a_style():
    groups = [g for g, _ in benchmark.PROFILE_GROUPS] + ["everything else"]
    assert sorted(benchmark.GROUP_STYLE) == sorted(groups)
    shorts = [short for short, _ in benchmark.GROUP_STYLE.values()]
    assert len(set(shorts)) == len(shorts) and all(len(s) <= 7 for s in shorts)  # columns of 8


def test_profile_groups_finds_the_matrix_multiplies():
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    calls = []
    p = benchmark.profile_groups(lambda: calls.append((a @ b).relu()), calls=2)
    assert len(calls) == 3                                                    # a warm-up, two profiled
    assert list(p["ms"]) == [g for g, _ in benchmark.PROFILE_GROUPS] + ["everything else"]
    assert p["ms"]["matrix multiplies"] > 0 and p["ms"]["everything else"] > 0      # mm, and relu
    assert p["ms"]["random numbers"] == p["ms"]["compiled kernels"] == 0
    assert p["operators"] >= 2
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="calls must be an int >= 1, got"):
            benchmark.profile_groups(lambda: None, calls=bad)


def test_profile_summary_and_figure():
    groups = [g for g, _ in benchmark.PROFILE_GROUPS] + ["everything else"]
    prof = lambda mm, rest: {"ms": dict.fromkeys(groups, 0.0) | {"matrix multiplies": mm, "everything else": rest},
                             "operators": 10}
    timing = lambda mm, rest, s=1.0: {"median": s, "tokens_per_s": 1 / s, "profile": prof(mm, rest)}
    res = {"train": {"T=128, dropout 0.0": {"fast": timing(80.0, 20.0), "torch": timing(80.0, 40.0, 1.2),
                                            "fast, default Adam": timing(1.0, 1.0), "flops": 1.0},
                     "T=32, dropout 0.0": {"fast": {"median": 1.0}}},          # not profiled: no panel
           "decoding": {"cached": timing(3.0, 7.0), "uncached": timing(30.0, 30.0)}}
    panels = benchmark.profiled(res)
    assert list(panels) == ["training, length 128, dropout 0.0", "greedy decoding"]
    assert list(panels["training, length 128, dropout 0.0"]) == ["fast", "torch"]  # default Adam: not drawn
    s = benchmark.profile_summary(res)
    # timed 1.2 times torch's speed, with 80 of 100 ms in matrix multiplies: at most 1.2 * 100 / 80
    assert s["training, length 128, dropout 0.0"]["ceiling"] == pytest.approx(1.5)
    assert s["greedy decoding"]["cached"] == pytest.approx(dict(ms=10.0, share=0.3, operators=10))
    with pytest.raises(ValueError, match="runs must be a non-empty list of results, got"):
        benchmark.profile_table(res)                                          # one result, not a list
    table = benchmark.profile_table([res, res]).splitlines()
    assert max(map(len, table)) <= 68 and "ceiling in each run: 1.50, 1.50" in table
    # only the groups that took time: mm and rest
    assert "            total      mm    rest   core" in table
    assert "fast          100      80      20    80%" in table
    assert "operators: fast 10, torch 10" in table                           # the same in both runs
    fig = benchmark.show_profiles(res)
    assert [ax.get_title(loc="left") for ax in fig.axes] == list(panels)
    assert [t.get_text() for t in fig.axes[1].get_yticklabels()] == ["cached", "uncached"]


def test_bf16_autocast_step_is_measured():
    cfg = measure.small_config(8, batch_size=2, vocab=30, dropout=0.0).with_model(d_model=16, d_ff=32)
    b = benchmark.bench_bf16(cfg, reps=1)
    assert set(b) == {"float32", "bfloat16"} and all(v["tokens_per_s"] > 0 for v in b.values())


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


def test_fuse_projections_switch():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H)
    x, mem = torch.randn(B, T, D), torch.randn(B, S, D)
    calls = []
    mha.W_q.register_forward_hook(lambda *a: calls.append("q"))
    mha.W_k.register_forward_hook(lambda *a: calls.append("k"))
    fused = mha(x, x, x, need_weights=False)[0], mha(x, mem, mem, need_weights=False)[0]
    assert calls == ["q"]                                   # K and V of the memory in one product
    mha.fuse_projections = False
    apart = mha(x, x, x, need_weights=False)[0], mha(x, mem, mem, need_weights=False)[0]
    assert calls == ["q", "q", "k", "q", "k"]               # three products each time
    for a, b in zip(fused, apart): torch.testing.assert_close(a, b, atol=TOL, rtol=0)


def test_rung_step_switches_and_equality():
    worst = benchmark.check_rungs(TINY)
    assert list(worst) == list(benchmark.RUNGS[1:]) and all(v < TOL for v in worst.values())
    from transformer_nb.norms import LayerNorm
    for rung in range(len(benchmark.RUNGS)):
        step = benchmark.rung_step(rung, TINY)
        mods = list(step.module.modules())
        assert all(m.fused == (rung >= 1) for m in mods if isinstance(m, LayerNorm))
        assert all(m.fuse_projections == (rung >= 3) for m in mods if isinstance(m, MultiHeadAttention))
        assert all(m.recompute_norm == (rung >= 5) for m in mods if isinstance(m, (EncoderLayer, DecoderLayer)))
        seen = []
        def spy(*a, _f=nn.functional.dropout, **kw): seen.append(1); return _f(*a, **kw)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(nn.functional, "dropout", spy)
            loss = step()
        assert loss.ndim == 0 and bool(seen) == (rung < 4)   # torch's masks below the "cheaper mask" rung
    for bad in (-1, len(benchmark.RUNGS), 1.0, True):
        with pytest.raises(ValueError, match="rung must be an int from 0 to 5"): benchmark.rung_step(bad, TINY)


def test_bench_ladder_times_every_rung_and_refuses_a_wrong_one(monkeypatch):
    lad = benchmark.bench_ladder(TINY, reps=1)
    assert list(lad) == [*benchmark.RUNGS, "torch"]
    assert all(v["tokens_per_s"] > 0 and v["saved_mb"] > 0 for v in lad.values())
    res = {"ladder": {"T=16, dropout 0.1": lad},
           "bf16": {"T=16, dropout 0.1": {"float32": {"tokens_per_s": 10.0}, "bfloat16": {"tokens_per_s": 1.0}}}}
    r = benchmark.ladder_ratios(res, "T=16, dropout 0.1")
    assert r["readable"] == 1.0 and r["bfloat16"] == pytest.approx(r[benchmark.RUNGS[-1]] / 10)
    fig = benchmark.show_ladder([res, res])
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [*benchmark.RUNGS, "top, bfloat16 autocast"]
    monkeypatch.setattr(benchmark, "check_rungs", lambda config: {"+ LayerNorm kernel": 1e-3})
    with pytest.raises(RuntimeError, match="differs from the readable path by more than 1e-05"):
        benchmark.bench_ladder(TINY, reps=1)


def test_training_step_with_default_adam():
    cfg = TINY.with_model(dropout=0.0)
    fused, plain = measure.training_step("fast", cfg), measure.training_step("fast", cfg, fused_adam=False)
    assert torch.equal(fused(), plain())                     # the same loss: the same weights and batch
    for a, b in zip(fused.module.parameters(), plain.module.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
