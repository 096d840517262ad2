"""The package on a GPU: the models, decoders, trainers and looking-inside tools run on the device their model is
on, and give what they give on the CPU. Skipped where torch sees no CUDA device (CI, laptops); TNB_DEVICE=cpu runs the same
checks on the CPU, which tests the tests. Inputs a function makes itself (from texts, from a text's ids, from a
seed) go to the model's device; tensors the caller passes stay where the caller put them.

Tolerances: float32 on both sides with TF32 off; the GPU's attention kernels sum in another order, so logits agree
to about 1e-5, not bit for bit; greedy tokens agree exactly on these untrained models' clear margins."""
import copy
import os

import pytest
import torch
import torch.nn.functional as F

from transformer_nb.checkpoints import load_model, save_model
from transformer_nb.data import batch_stream, make_batch, make_task
from transformer_nb.decoding import (
    beam_translate,
    exact_match,
    greedy_search,
    translate,
)
from transformer_nb.gpt import GPT, bits_per_char, generate, train_lm
from transformer_nb.induction import (
    attention_only,
    eval_batch,
    head_scores,
    train_induction,
)
from transformer_nb.inside import (
    logit_attribution,
    patching_study,
    recomposition_error,
    run_with_cache,
)
from transformer_nb.masking import causal_mask
from transformer_nb.reading import (
    attention_maps,
    cross_attention,
    head_sharpness,
    teacher_forced_accuracy,
)
from transformer_nb.training import task_config, train
from transformer_nb.transformer import Transformer

DEVICE = os.environ.get("TNB_DEVICE") or ("cuda" if torch.cuda.is_available() else None)
pytestmark = pytest.mark.skipif(DEVICE is None, reason="no CUDA device (TNB_DEVICE=cpu runs these on the CPU)")
LLAMA = dict(positions="rope", norm="rms", activation="swiglu", n_kv_heads=2, bias=False, qk_norm=True)


@pytest.fixture(autouse=True)
def _fp32():
    "Full float32 matrix products on the GPU (no TF32), as on the CPU"
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def on(model):
    "A copy of model on the test device"
    return copy.deepcopy(model).to(DEVICE)


def close(a, b, atol=2e-5):
    torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), atol=atol, rtol=1e-4)


@pytest.fixture(scope="module")
def task():
    return make_task("reverse", n_train=256, n_valid=32, seed=0)


def small(vocab_size, **kw):
    torch.manual_seed(0)
    return Transformer.from_config(task_config(vocab_size, dropout=0.0, **kw)).eval()


def test_transformer_forward_and_gradients_match_the_cpu(task):
    b = make_batch(task.train[:8], task.vocab)
    cpu = small(len(task.vocab)).train()
    gpu = on(cpu)
    for need_weights in (False, True):
        args = (b.src, b.tgt_in, b.src_mask, b.tgt_mask, b.src_mask)
        out_c = cpu(*args, need_weights=need_weights)
        out_g = gpu(*(a.to(DEVICE) for a in args), need_weights=need_weights)
        if need_weights:
            (out_c, w_c), (out_g, w_g) = out_c, out_g
            for wc, wg in zip(w_c, w_g): close(wc, wg)
        close(out_c, out_g)
    for m, out in ((cpu, out_c), (gpu, out_g)):
        y = b.tgt_out.flatten().to(out.device)
        m.zero_grad(); F.cross_entropy(out.flatten(0, 1), y).backward()
    for p, q in zip(cpu.parameters(), gpu.parameters()):
        close(p.grad, q.grad, atol=1e-4)


def test_decoders_take_texts_to_the_models_device(task):
    cpu = small(len(task.vocab))
    gpu = on(cpu)
    texts = [s for s, _ in task.valid[:6]]
    assert translate(gpu, task.vocab, texts) == translate(cpu, task.vocab, texts)
    assert beam_translate(gpu, task.vocab, texts[:2]) == beam_translate(cpu, task.vocab, texts[:2])
    assert exact_match(gpu, task.vocab, task.valid[:6]) == exact_match(cpu, task.vocab, task.valid[:6])
    b = make_batch(task.valid[:6], task.vocab, DEVICE)
    ys, _ = greedy_search(gpu, b.src, b.src_mask, 12)
    ys_nc, _ = greedy_search(gpu, b.src, b.src_mask, 12, use_cache=False)
    assert ys.device.type == torch.device(DEVICE).type and torch.equal(ys, ys_nc)
    assert torch.equal(ys.cpu(), greedy_search(cpu, b.src.cpu(), b.src_mask.cpu(), 12)[0])


def test_tensors_on_another_device_are_named(task):
    if DEVICE == "cpu": pytest.skip("one device only")
    gpu = on(small(len(task.vocab)))
    b = make_batch(task.valid[:2], task.vocab, DEVICE)
    with pytest.raises(ValueError, match="src_mask"):
        greedy_search(gpu, b.src, b.src_mask.cpu(), 4)
    with pytest.raises(ValueError, match="src is on cpu"):
        greedy_search(gpu, b.src.cpu(), None, 4)
    g = GPT(40, max_len=48, d_model=32, num_heads=4, d_ff=64, num_layers=2).to(DEVICE)
    cpu_ids = torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="ids is on cpu"): g(cpu_ids)
    with pytest.raises(ValueError, match="prompt is on cpu"): generate(g, cpu_ids, 2)


@pytest.mark.parametrize("kw", [{}, LLAMA], ids=["gpt2", "llama"])
def test_gpt_generation_matches_the_cpu(kw):
    torch.manual_seed(0)
    cpu = GPT(40, max_len=48, d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0, **kw).eval()
    gpu = on(cpu)
    ids = torch.randint(0, 40, (3, 10), generator=torch.Generator().manual_seed(1))
    close(cpu(ids), gpu(ids.to(DEVICE)))
    greedy = generate(cpu, ids, 12, greedy=True)
    assert torch.equal(generate(gpu, ids.to(DEVICE), 12, greedy=True).cpu(), greedy)
    assert torch.equal(generate(gpu, ids.to(DEVICE), 12, greedy=True, use_cache=False).cpu(), greedy)
    a, b = (generate(gpu, ids.to(DEVICE), 12, top_p=0.9, seed=5) for _ in range(2))
    assert a.device.type == torch.device(DEVICE).type and torch.equal(a, b)


def test_language_model_training_takes_its_text_to_the_models_device():
    torch.manual_seed(0)
    cpu = GPT(30, max_len=32, d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0)
    gpu = on(cpu)
    text = torch.randint(0, 30, (2000,), generator=torch.Generator().manual_seed(2))
    loss_c, loss_g = train_lm(cpu, text, steps=5, context=32), train_lm(gpu, text, steps=5, context=32)
    assert max(abs(a - b) for a, b in zip(loss_c, loss_g)) < 1e-4
    assert abs(bits_per_char(cpu, text[:300], 32) - bits_per_char(gpu, text[:300], 32)) < 1e-4


def test_task_training_on_the_device(task):
    cpu = small(len(task.vocab))
    gpu = on(cpu)
    hist = [train(m, batch_stream(task.train, task.vocab, 16, device=d), steps=6, warmup=2, average=1,
                  progress=False) for m, d in ((cpu, None), (gpu, DEVICE))]
    assert max(abs(a - b) for a, b in zip(hist[0].loss, hist[1].loss)) < 1e-4
    assert next(gpu.parameters()).device.type == torch.device(DEVICE).type


def test_checkpoint_of_a_device_model_loads_on_the_cpu(task, tmp_path):
    cpu = small(len(task.vocab))
    gpu = on(cpu)
    save_model(tmp_path / "m.pt", gpu, task_config(len(task.vocab), dropout=0.0), task.vocab)
    back, vocab, _ = load_model(tmp_path / "m.pt")
    b = make_batch(task.valid[:4], task.vocab)
    close(back(b.src, b.tgt_in, b.src_mask, b.tgt_mask, b.src_mask),
          cpu(b.src, b.tgt_in, b.src_mask, b.tgt_mask, b.src_mask), atol=0)



def test_reading_tools_on_the_device(task):
    "Chapter 9b's measures batch the caller's strings on the model's device (they batched them on the CPU)"
    cpu = small(len(task.vocab))
    gpu = on(cpu)
    pairs, vocab = task.valid[:8], task.vocab
    assert teacher_forced_accuracy(gpu, vocab, pairs) == teacher_forced_accuracy(cpu, vocab, pairs)
    close(cross_attention(gpu, vocab, pairs), cross_attention(cpu, vocab, pairs))
    sharp, sharp_cpu = head_sharpness(gpu, vocab, pairs), head_sharpness(cpu, vocab, pairs)
    for kind in sharp: close(sharp[kind], sharp_cpu[kind])
    (attn, *labels), (attn_cpu, *labels_cpu) = (attention_maps(m, vocab, *pairs[0]) for m in (gpu, cpu))
    assert labels == labels_cpu
    close(attn.decoder, attn_cpu.decoder)

def test_inside_tools_on_the_device():
    torch.manual_seed(0)
    tr = Transformer(11, 13, d_model=24, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                     d_ff=40, dropout=0.0).eval().to(DEVICE)
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(4, 11, (2, 7), generator=g), torch.randint(4, 13, (2, 5), generator=g)
    src, tgt = src.to(DEVICE), tgt.to(DEVICE)
    tm = causal_mask(5, DEVICE)
    logits, cache = run_with_cache(tr, src, tgt, tgt_mask=tm)
    assert max(recomposition_error(tr, cache).values()) <= 1e-5
    att = logit_attribution(tr, cache, 4, torch.tensor([5, 6]), torch.tensor([7, 8]))
    diff = logits[[0, 1], 4, [5, 6]] - logits[[0, 1], 4, [7, 8]]
    assert (sum(att.values()) - diff).abs().max() <= 1e-4
    corrupted = src.clone(); corrupted[:, 2] = 4
    metric = lambda out: (out[:, 4, 5] - out[:, 4, 7]).mean()
    p = patching_study(tr, (src, tgt), (corrupted, tgt), metric, tgt_mask=tm)
    assert all(torch.isfinite(h).all() for h in p.heads.values())


def test_induction_training_on_the_device():
    cpu = attention_only(2, seed=0)
    gpu = on(cpu)
    runs = [train_induction(m, steps=4, every=2, batch_size=8, warmup=2, cooldown=2) for m in (cpu, gpu)]
    for a, b in zip(runs[0][0], runs[1][0]):
        assert abs(a.scores.loss_first - b.scores.loss_first) < 1e-4
        assert abs(a.scores.loss_second - b.scores.loss_second) < 1e-4
        close(a.scores.induction, b.scores.induction, atol=1e-4)
    assert head_scores(gpu, eval_batch(gpu)).induction.shape == (2, gpu.num_heads)


def test_autocast_bfloat16():
    if DEVICE == "cpu": pytest.skip("bfloat16 autocast is tested where it is fast")
    torch.manual_seed(0)
    for kw in ({}, LLAMA):
        m = GPT(40, max_len=48, d_model=64, num_heads=4, d_ff=128, num_layers=2, dropout=0.0, **kw).to(DEVICE)
        ids = torch.randint(0, 40, (4, 24), device=DEVICE)
        full = m(ids)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            half = m(ids)
            F.cross_entropy(half.flatten(0, 1).float(), ids.flatten()).backward()
            out = generate(m.eval(), ids[:, :4], 8, greedy=True)
        assert half.dtype == torch.bfloat16 and out.shape == (4, 12)
        assert (half.float() - full).abs().max() < 0.05 * full.abs().max()


def test_compiled_gpt_equals_eager():
    if DEVICE == "cpu": pytest.skip("tests/test_compile.py compiles on the CPU")
    if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 13):
        # seen on torch 2.11: dynamo cannot trace the door's class attribute (CPU and GPU alike)
        pytest.skip("the package needs torch >= 2.13 (settings.ini); older dynamo cannot trace its door")
    torch.manual_seed(0)
    m = GPT(40, max_len=48, d_model=32, num_heads=4, d_ff=64, num_layers=2, dropout=0.0).eval().to(DEVICE)
    ids = torch.randint(0, 40, (3, 16), device=DEVICE)
    with torch.no_grad():
        close(torch.compile(m, fullgraph=True)(ids), m(ids), atol=1e-4)
