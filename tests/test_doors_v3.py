"""Doors fixed after the third code review (verify3_code): each case failed on the package before, with a Python
error deep inside, a message naming an argument the caller never passed, or a silent wrong answer"""
import pytest
import torch
from torch import nn

from conftest import small_transformer
from transformer_nb.attention import fused_attention, scaled_dot_product_attention
from transformer_nb.checkpoints import save_model, write_checkpoint
from transformer_nb.decoding import KVCache
from transformer_nb.gpt import CharText, train_lm
from transformer_nb.layers import LayerCache
from transformer_nb.multihead import MultiHeadAttention, load_weights
from transformer_nb.training import make_optimizer
from transformer_nb.transformer import Transformer

transformer = small_transformer  # conftest's


def test_one_memory_check_one_message():
    "decode and KVCache refuse a memory of another dtype with the same words (before: two checks, two remedies)"
    m = transformer()
    memory = m.encode(torch.tensor([[4, 5, 6]])).double()
    messages = []
    for call in (lambda: m.decode(torch.tensor([[1]]), memory), lambda: KVCache(m, memory)):
        with pytest.raises(TypeError) as e: call()
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "memory has dtype torch.float64" in messages[0]
    with pytest.raises(ValueError, match="memory"): m.decode(torch.tensor([[1]]), memory.float()[:, :0])


@pytest.mark.parametrize("call,error,words", [
    (lambda: load_weights(3, {}), TypeError, "module must be an nn.Module, got int"),
    (lambda: load_weights(nn.Linear(2, 2), {}), ValueError, "module does not match"),
    (lambda: make_optimizer(None, 8), TypeError, "model must be an nn.Module, got NoneType"),
    (lambda: train_lm(transformer(), torch.arange(50) % 11), TypeError, "model must be a GPT, got Transformer"),
    (lambda: CharText("abc", torch.tensor([0, 1]), torch.tensor([2])).encode(None), TypeError, "text must be a str, got NoneType"),
    (lambda: CharText("abc", torch.tensor([0, 1]), torch.tensor([2])).decode([0, -1]), ValueError, r"ids must lie in \[0, 3\), got -1"),
])
def test_the_caller_s_own_names(call, error, words):
    with pytest.raises(error, match=words): call()


def test_a_checkpoint_is_a_dict(tmp_path):
    with pytest.raises(TypeError, match="ckpt must be a dict, got list"): write_checkpoint(tmp_path / "x.pt", [1])
    assert not (tmp_path / "x.pt").exists()


def test_a_model_on_the_meta_device_is_named_as_the_model(tmp_path):
    from transformer_nb.data import Vocab
    with torch.device("meta"): m = Transformer(11, 11, d_model=16, num_heads=2, num_encoder_layers=1,
                                               num_decoder_layers=1, d_ff=32, max_len=32)
    with pytest.raises(ValueError, match="^model is on the meta device"):
        save_model(tmp_path / "m.pt", m, m.config, Vocab("abcdefgh"))


def test_is_self_is_a_bool():
    "A truthy non-bool turned a cross-attention call into self-attention (the cache kept the memory as keys)"
    mha = MultiHeadAttention(8, 2).eval()
    x, mem = torch.randn(1, 1, 8), torch.randn(1, 3, 8)
    cache = LayerCache()
    with pytest.raises(TypeError, match="is_self must be a bool, got str 'no'"):
        mha(x, mem, mem, cache=cache, is_self="no")
    assert len(cache) == 0


def test_both_attentions_refuse_a_1d_mask():
    "Chapter 2's two attentions agree: a (S,) mask is refused by both (before: only by the fused one)"
    q, k = torch.randn(1, 1, 3, 8), torch.randn(1, 1, 4, 8)
    mask = torch.tensor([True, True, False, True])
    for attention in (scaled_dot_product_attention, fused_attention):
        with pytest.raises(ValueError, match=r"mask must have shape \(\.\.\., T, S\), got \(4,\)"):
            attention(q, k, k, mask)
    out = [scaled_dot_product_attention(q, k, k, mask[None])[0], fused_attention(q, k, k, mask[None])]
    torch.testing.assert_close(out[0], out[1])


@pytest.mark.parametrize("need_weights", [True, False])
def test_a_one_dimensional_mask_is_refused_at_every_door(need_weights):
    """A mask must be at least (T, S), as torch's fused kernels read it: one rule in check_mask for every door (before:
    only chapter 2's functions had it; the fast path of multi-head attention and the layers raised torch's
    IndexError 'Dimension out of range' from inside)"""
    from transformer_nb.layers import EncoderLayer
    x, mask = torch.randn(2, 5, 16), torch.tensor([True, True, True, False, True])
    with pytest.raises(ValueError, match=r"mask must have shape \(\.\.\., T, S\), got \(5,\)"):
        MultiHeadAttention(16, 2).eval()(x, x, x, mask=mask, need_weights=need_weights)
    with pytest.raises(ValueError, match=r"src_mask must have shape \(\.\.\., T, S\), got \(5,\)"):
        EncoderLayer(16, 2, 32).eval()(x, mask, need_weights=need_weights)


def test_per_sample_gradients_with_dropout_draw_a_mask_per_sample():
    """vmap(grad(...), randomness="different") on a model in train mode with dropout: the package's own dropout mask
    steps aside under torch.func's transforms as under a compiler (before: vmap refused it, 'Cannot ask for different
    inplace randomness on an unbatched tensor'), and the samples' masks differ"""
    import torch.nn.functional as F
    from torch.func import functional_call, grad, vmap

    from conftest import small_gpt
    g = small_gpt(dropout=0.5).train()
    ids = torch.randint(0, 17, (1, 9)).expand(3, 9)              # the same row three times
    params = {k: v.detach() for k, v in g.named_parameters()}
    loss = lambda p, i: F.cross_entropy(functional_call(g, p, (i[None, :-1],))[0], i[1:])
    per_sample = vmap(grad(loss), in_dims=(None, 0), randomness="different")(params, ids)
    w = per_sample["stack.layers.0.ffn.linear1.weight"]
    assert w.shape[0] == 3 and not torch.equal(w[0], w[1])     # another mask per sample
