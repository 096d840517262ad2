"Tests of chapter 11f's switches: RMSNorm, SwiGLU, QK-norm, rotary positions, grouped-query attention."
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_nb.embeddings import Embeddings, rotary
from transformer_nb.ffn import PositionwiseFeedForward
from transformer_nb.gpt import GPT, generate
from transformer_nb.layers import LayerCache
from transformer_nb.masking import causal_mask
from transformer_nb.multihead import MultiHeadAttention, split_heads
from transformer_nb.norms import RMSNorm, make_norm

D, H = 32, 8


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_rmsnorm_equals_torch():
    norm, ref = RMSNorm(D), nn.RMSNorm(D, eps=1e-6)
    with torch.no_grad(): norm.weight.copy_(_x(D, seed=1)); ref.weight.copy_(norm.weight)
    x = _x(3, 5, D) * 4
    assert (norm(x) - ref(x)).abs().max() <= 1e-6
    assert isinstance(make_norm("rms", D), RMSNorm)
    with pytest.raises(ValueError, match="norm must be one of"): make_norm("batch", D)


def test_rmsnorm_half_precision_as_torch():
    """float16 and bfloat16: the mean square in float32, then back, as nn.RMSNorm (before: x² overflowed float16
    from |x| = 256, and the output was zeros); float32 and float64 exactly the formula of the chapter"""
    x = torch.tensor([[300.0, 1.0, -2.0, 0.5]])
    for dtype in (torch.float16, torch.bfloat16):
        ours, ref = RMSNorm(4).to(dtype)(x.to(dtype)), nn.RMSNorm(4, eps=1e-6).to(dtype)(x.to(dtype))
        assert ours.dtype == dtype and torch.equal(ours, ref), (dtype, ours, ref)
    torch.testing.assert_close(RMSNorm(4).half()(x.half()), torch.tensor([[2.0, 0.0067, -0.0133, 0.0033]]).half(),
                               atol=1e-3, rtol=0)
    norm = RMSNorm(D)
    with torch.no_grad(): norm.weight.copy_(_x(D, seed=1))
    for dtype in (torch.float32, torch.float64):
        x, w = _x(3, 5, D).to(dtype) * 4, norm.weight.to(dtype)
        assert torch.equal(norm.to(dtype)(x), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)


def test_rms_gpt_in_float16_with_a_large_residual_stream():
    "A residual stream of a few hundred: the float16 RMS model predicts what the float64 one does (before: 11%)"
    import copy
    torch.manual_seed(0)
    g = GPT(17, d_model=32, num_heads=4, d_ff=64, num_layers=2, max_len=16, norm="rms").eval()
    with torch.no_grad(): g.embed.tokens.embed.weight.mul_(150)
    ids = torch.randint(0, 17, (2, 9))
    with torch.no_grad(): ref, half = g.double()(ids), copy.deepcopy(g).half()(ids)
    assert torch.equal(half.argmax(-1), ref.argmax(-1))


def test_swiglu_ffn():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(D, 48, dropout=0.0, activation="swiglu", bias=False)
    assert ffn.linear1.weight.shape == (96, D) and ffn.linear1.bias is None and ffn.linear2.bias is None
    x = _x(2, 5, D)
    gate, up = ffn.linear1.weight.chunk(2)
    expected = (F.silu(x @ gate.T) * (x @ up.T)) @ ffn.linear2.weight.T
    torch.testing.assert_close(ffn(x), expected, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match='"swiglu"'): PositionwiseFeedForward(D, 48, activation="geglu")


def test_ffn_default_unchanged():
    "bias=True and relu: the same parameters drawn in the same order as before the switch"
    torch.manual_seed(3); a = PositionwiseFeedForward(D, 48)
    torch.manual_seed(3); l1, l2 = nn.Linear(D, 48), nn.Linear(48, D)
    for p, q in zip(a.parameters(), [l1.weight, l1.bias, l2.weight, l2.bias]): assert torch.equal(p, q)


@pytest.mark.parametrize("G", [1, 2, 4])
@pytest.mark.parametrize("need_weights", [True, False])
def test_gqa_equals_sdpa_enable_gqa(G, need_weights):
    torch.manual_seed(G)
    mha = MultiHeadAttention(D, H, n_kv_heads=G).eval()
    assert mha.W_k.weight.shape == (G * D // H, D)
    x = _x(2, 7, D)
    mask = causal_mask(7)
    out, w = mha(x, x, x, mask, need_weights=need_weights)
    q = split_heads(mha.W_q(x), H)
    k, v = split_heads(mha.W_k(x), G), split_heads(mha.W_v(x), G)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    ref = mha.W_o(ref.transpose(1, 2).reshape(2, 7, D))
    assert (out - ref).abs().max() <= 1e-6
    if need_weights: assert w.shape == (2, H, 7, 7)



@pytest.mark.parametrize("G", [1, 2, 4])
def test_gqa_trains_on_the_fast_path_without_copies(G):
    """In training (grad on, no dropout) the fast path hands the G heads of keys and values to the fused kernel, not
    H copies, and its gradients are the readable path's (which repeats them)"""
    from torch.utils._python_dispatch import TorchDispatchMode
    class Kernel(TorchDispatchMode):
        "The heads of the keys each call of torch's fused attention kernel receives"
        def __init__(self): super().__init__(); self.key_heads = []
        def __torch_dispatch__(self, f, types, args=(), kwargs=None):
            if "scaled_dot_product" in str(f) and "backward" not in str(f): self.key_heads.append(args[1].shape[1])
            return f(*args, **(kwargs or {}))
    torch.manual_seed(G)
    mha = MultiHeadAttention(D, H, n_kv_heads=G).train()
    x, mask, grads = _x(2, 7, D), causal_mask(7), {}
    for nw in (True, False):
        mha.zero_grad()
        with Kernel() as kernel: mha(x, x, x, mask, need_weights=nw)[0].pow(2).sum().backward()
        grads[nw] = [p.grad.clone() for p in mha.parameters()]
    assert kernel.key_heads == [G]                      # the fast path's one call
    for a, b in zip(grads[True], grads[False]): assert (a - b).abs().max() <= 1e-5

def test_kv_heads_equal_heads_is_todays_attention_bit_for_bit():
    torch.manual_seed(5); old = MultiHeadAttention(D, H).eval()
    torch.manual_seed(5); new = MultiHeadAttention(D, H, n_kv_heads=H).eval()
    for (a, p), (b, q) in zip(old.state_dict().items(), new.state_dict().items()):
        assert a == b and torch.equal(p, q)
    x, y = _x(2, 6, D), _x(2, 4, D, seed=1)
    for nw in (True, False):
        assert torch.equal(old(x, x, x, causal_mask(6), nw)[0], new(x, x, x, causal_mask(6), nw)[0])
        assert torch.equal(old(x, y, y, None, nw)[0], new(x, y, y, None, nw)[0])


def test_rope_relative_position():
    "q at m and k at n: the score depends on m - n only"
    q, k = _x(1, 1, 1, 16), _x(1, 1, 1, 16, seed=1)
    for m, n in [(3, 1), (10, 5), (40, 2)]:
        s = (rotary(q, m) * rotary(k, n)).sum()
        for shift in (1, 7, 100):
            assert abs(s - (rotary(q, m + shift) * rotary(k, n + shift)).sum()) <= 1e-5
    # a rotation: norms kept, position 0 unchanged
    x = _x(2, 3, 5, 16)
    torch.testing.assert_close(rotary(x, 4).norm(dim=-1), x.norm(dim=-1))
    assert torch.equal(rotary(x[..., :1, :]), x[..., :1, :])


def test_rope_matches_complex_rotation():
    "Pairs (i, i + d/2) as complex numbers, multiplied by exp(i m θ_i)"
    d, T = 16, 6
    x = _x(1, 2, T, d).double()
    theta = 10000.0 ** (-torch.arange(0, d, 2).double() / d)
    z = torch.complex(x[..., : d // 2], x[..., d // 2:]) * torch.polar(
        torch.ones(T, d // 2).double(), torch.arange(3, 3 + T).double()[:, None] * theta)
    torch.testing.assert_close(rotary(x.float(), 3).double(), torch.cat([z.real, z.imag], -1),
                               atol=1e-5, rtol=0)


def _modern_gpt(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=20, d_model=32, num_heads=4, d_ff=48, num_layers=2, max_len=40,
               positions="rope", norm="rms", activation="swiglu", n_kv_heads=2, qk_norm=True, bias=False)
    return GPT(**cfg | kw).eval()


@pytest.mark.parametrize("kw", [dict(), dict(qk_norm=False, n_kv_heads=1), dict(norm="layer", bias=True)])
def test_cached_equals_uncached(kw):
    model = _modern_gpt(**kw)
    with torch.no_grad():
        for p in model.parameters(): p.add_(0.3 * torch.randn_like(p))
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    a = generate(model, prompt, 25, greedy=True, use_cache=True)
    b = generate(model, prompt, 25, greedy=True, use_cache=False)
    assert torch.equal(a, b)
    # logits position by position through a LayerCache equal the whole sequence's
    ids = a[:, :12]
    cache = [LayerCache() for _ in model.stack.layers]
    with torch.no_grad():
        whole = model(ids)
        steps = torch.cat([model(ids[:, :5], cache=cache)] + [model(ids[:, t:t + 1], cache=cache)
                                                              for t in range(5, 12)], 1)
    assert (whole - steps).abs().max() <= 1e-5
    G = kw.get("n_kv_heads", 2)
    assert cache[0].k.shape == (2, G, 12, 8)     # the cache holds G heads


def test_readable_and_fast_path_agree():
    model = _modern_gpt(1)
    ids = torch.randint(0, 20, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits, weights = model(ids, need_weights=True)
        fast = model(ids)
    assert (logits - fast).abs().max() <= 1e-5
    assert weights[0].shape == (2, 4, 10, 10)


def test_default_gpt_untouched():
    torch.manual_seed(0); a = GPT(20, d_model=32, num_heads=4, d_ff=48)
    assert "n_kv_heads" not in a.config and not any("norm" in k and "q_" in k for k in a.state_dict())
    assert a.stack.layers[0].self_attn.W_k.weight.shape == (32, 32)
    rope = _modern_gpt()
    assert rope.config["n_kv_heads"] == 2 and rope.config["positions"] == "rope"
    assert not any(k.startswith("embed.positions") for k in rope.state_dict())
    assert not any(k.endswith(".bias") for k in rope.state_dict())
    # the configuration builds the same model again
    assert GPT(**rope.config).state_dict().keys() == rope.state_dict().keys()


def test_errors():
    with pytest.raises(ValueError, match="n_kv_heads must divide num_heads, got n_kv_heads=3"):
        MultiHeadAttention(D, H, n_kv_heads=3)
    with pytest.raises(TypeError, match="rope must be a bool"): MultiHeadAttention(D, H, rope=1)
    with pytest.raises(TypeError, match="qk_norm must be a bool"): MultiHeadAttention(D, H, qk_norm="yes")
    with pytest.raises(ValueError, match='or "rope"'): Embeddings(10, D, positions="alibi")
    with pytest.raises(ValueError, match="exceeds max_len 40"):
        _modern_gpt()(torch.zeros(1, 41, dtype=torch.long))
    mha = MultiHeadAttention(D, H, n_kv_heads=2)
    from transformer_nb.multihead import mha_to_torch
    with pytest.raises(ValueError, match="grouped-query"): mha_to_torch(mha, nn.MultiheadAttention(D, H))


# ---- the converters to and from transformers (random configurations: nothing downloaded)
GPT2 = dict(vocab_size=40, max_len=48, positions="learned")
LLAMA = dict(vocab_size=40, max_len=48, positions="rope", norm="rms", activation="swiglu", bias=False)


@pytest.mark.parametrize("config", [
    dict(d_model=32, num_heads=4, d_ff=64, num_layers=2, **GPT2),
    dict(d_model=48, num_heads=4, d_ff=96, num_layers=1, activation="gelu_tanh", **GPT2),
    dict(d_model=32, num_heads=4, d_ff=80, num_layers=2, **LLAMA),
    dict(d_model=48, num_heads=6, n_kv_heads=2, d_ff=96, num_layers=2, **LLAMA),
])
def test_round_trip(config):
    from transformer_nb.modern import from_transformers, to_transformers
    torch.manual_seed(0)
    ours = GPT(**config).eval()
    with torch.no_grad():
        for p in ours.parameters(): p.add_(0.1 * torch.randn_like(p))
    theirs = to_transformers(ours)
    assert type(theirs).__name__ == ("GPT2LMHeadModel" if config["positions"] == "learned" else "LlamaForCausalLM")
    back = from_transformers(theirs)
    ids = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (ours(ids) - theirs(ids).logits).abs().max() <= 1e-4
        assert (ours(ids) - back(ids)).abs().max() <= 1e-4
    for k, v in ours.state_dict().items(): torch.testing.assert_close(back.state_dict()[k], v, atol=1e-6, rtol=1e-6)
    prompt = ids[:, :3]
    mine = generate(ours, prompt, 20, greedy=True)
    hf = theirs.generate(prompt, max_new_tokens=20, do_sample=False, attention_mask=torch.ones_like(prompt))
    assert torch.equal(mine, hf) and torch.equal(mine, generate(back, prompt, 20, greedy=True))


def test_converter_errors():
    from transformer_nb.modern import from_transformers, to_transformers
    small = GPT(d_model=32, num_heads=4, d_ff=80, num_layers=2, **LLAMA)
    wide = to_transformers(GPT(d_model=48, num_heads=4, d_ff=80, num_layers=2, **LLAMA))
    with pytest.raises(ValueError, match=r"'model.embed_tokens.weight' gives shape \(40, 48\) .*\(40, 32\)"):
        from_transformers(wide, into=small)
    gqa = to_transformers(GPT(d_model=32, num_heads=4, n_kv_heads=1, d_ff=80, num_layers=2, **LLAMA))
    with pytest.raises(ValueError, match=r"k_proj.weight' gives shape \(8, 32\)"):
        from_transformers(gqa, into=small)
    gpt2 = to_transformers(GPT(d_model=32, num_heads=4, d_ff=64, **GPT2))
    with pytest.raises(ValueError, match="but theirs is a GPT2LMHeadModel"): from_transformers(gpt2, into=small)
    with pytest.raises(TypeError, match="GPT2LMHeadModel or LlamaForCausalLM, got Linear"):
        from_transformers(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no counterpart in transformers"):
        to_transformers(GPT(40, d_model=32, num_heads=4, positions="rope"))
    gpt2.config.activation_function = "relu"
    with pytest.raises(ValueError, match="activation_function='relu'"): from_transformers(gpt2)


def test_no_counterpart_error_names_the_callers_argument():
    "from_transformers(theirs, into=...) with an `into` no transformers class computes: the message names `into`"
    from transformer_nb.modern import from_transformers, to_transformers
    gpt2 = to_transformers(GPT(d_model=32, num_heads=4, d_ff=64, **GPT2))
    rope_gpt = GPT(40, d_model=32, num_heads=4, d_ff=64, max_len=48, positions="rope")
    with pytest.raises(ValueError, match=r"^into has no counterpart in transformers: .*n_kv_heads None or num_heads"):
        from_transformers(gpt2, into=rope_gpt)
    with pytest.raises(ValueError, match="^model has no counterpart in transformers"): to_transformers(rope_gpt)
    # n_kv_heads equal to num_heads is today's attention: a GPT-2, as the message says
    assert type(to_transformers(GPT(d_model=32, num_heads=4, d_ff=64, n_kv_heads=4, **GPT2))).__name__ == (
        "GPT2LMHeadModel")


def test_released_llama_settings_are_refused():
    "LlamaConfig's default (untied), Llama 2's ε and Llama 3's rotary base: each refused by name; tied with ours converts"
    import transformers

    from transformer_nb.modern import from_transformers
    shape = dict(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                 max_position_embeddings=48)
    llama = lambda **kw: transformers.LlamaForCausalLM(transformers.LlamaConfig(**shape, **kw))
    with pytest.raises(ValueError, match="untied input and output embeddings"): from_transformers(llama())
    with pytest.raises(ValueError, match=r"rms_norm_eps=1e-05 \(ours: 1e-06\)"):
        from_transformers(llama(tie_word_embeddings=True, rms_norm_eps=1e-5))
    with pytest.raises(ValueError, match="rope_parameters=.*500000"):
        from_transformers(llama(tie_word_embeddings=True,
                                rope_parameters={"rope_type": "default", "rope_theta": 500000.0}))
    assert from_transformers(llama(tie_word_embeddings=True)).config["norm"] == "rms"


def test_qk_norm_equals_qwen3():
    """QK-norm's reference: every switch on is Qwen 3's layer (Llama's, with an RMSNorm over each head's queries and
    keys before the rotation); transformers' Qwen3ForCausalLM with our weights gives our logits and greedy tokens"""
    import transformers

    from transformer_nb.modern import _theirs_from_ours
    model = _modern_gpt(2)
    with torch.no_grad():
        for p in model.parameters(): p.add_(0.3 * torch.randn_like(p))
    c = model.config
    qwen = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
        vocab_size=c["vocab_size"], hidden_size=c["d_model"], intermediate_size=c["d_ff"],
        num_hidden_layers=c["num_layers"], num_attention_heads=c["num_heads"], num_key_value_heads=c["n_kv_heads"],
        head_dim=c["d_model"] // c["num_heads"], max_position_embeddings=c["max_len"], rms_norm_eps=1e-6,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)).eval()
    sd = model.state_dict()
    state = _theirs_from_ours(sd, "llama", model.embed.tokens.scale, c["num_layers"])
    for i in range(c["num_layers"]):
        for n in "qk":
            state[f"model.layers.{i}.self_attn.{n}_norm.weight"] = sd[f"stack.layers.{i}.self_attn.{n}_norm.weight"]
    qwen.load_state_dict(state)
    ids = torch.randint(0, 20, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (model(ids) - qwen(ids).logits).abs().max() <= 1e-4
        assert (model(ids, need_weights=True)[0] - qwen(ids).logits).abs().max() <= 1e-4
    prompt = ids[:, :3]
    hf = qwen.generate(prompt, max_new_tokens=20, do_sample=False, attention_mask=torch.ones_like(prompt))
    assert torch.equal(generate(model, prompt, 20, greedy=True), hf)
    # without QK-norm's weights Qwen 3 computes something else: the norms are not a no-op here
    for i in range(c["num_layers"]):
        for n in "qk": state[f"model.layers.{i}.self_attn.{n}_norm.weight"] = torch.ones(c["d_model"] // c["num_heads"])
    qwen.load_state_dict(state)
    with torch.no_grad(): assert (model(ids) - qwen(ids).logits).abs().max() > 1e-2
