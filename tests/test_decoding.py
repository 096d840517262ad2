"Decoding: the key/value cache changes nothing, beam search is ordered, stops at </s> and reduces to greedy"
import pytest, torch
from transformer_nb.transformer import Transformer
from transformer_nb.masking import causal_mask, padding_mask
from transformer_nb.data import Vocab, make_batch
from transformer_nb.training import train_task, greedy_decode
from transformer_nb.decoding import (KVCache, decode_step, greedy_search, beam_search, sequence_logprob,
                                     length_penalty)


def _model(norm_first=True, V=13, seed=0):
    torch.manual_seed(seed)
    return Transformer(V, V, d_model=24, num_heads=4, num_encoder_layers=2, num_decoder_layers=3, d_ff=40,
                       norm_first=norm_first, positions="sinusoidal").eval()


@pytest.fixture(scope="module")
def trained():
    "A date model trained for a few dozen steps: not accurate, but its outputs are not uniform either"
    return train_task("dates", steps=60, progress=False, n_train=2000, n_valid=100, d_model=32, num_heads=4, d_ff=64)


@pytest.mark.parametrize("norm_first", [True, False])
def test_cached_steps_equal_full_decoder(norm_first):
    m = _model(norm_first)
    B, S, T = 3, 7, 6
    src = torch.randint(4, 13, (B, S)); src[1, 4:] = 0
    tgt = torch.randint(4, 13, (B, T)); tgt[:, 0] = 1
    smask = padding_mask(src, 0)
    memory = m.encode(src, smask)
    full = m.decode(tgt, memory, causal_mask(T), smask)
    cache = KVCache(m, memory, smask)
    stepped = torch.stack([decode_step(m, cache, tgt[:, t]) for t in range(T)], 1)
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=0)
    assert cache.length == T and cache.self_k[2].shape == (B, 4, T, 6)


def test_cached_greedy_equals_uncached_and_chapter9(trained):
    b = make_batch(trained.task.valid[:50], trained.task.vocab)
    ids, logits = greedy_search(trained.model, b.src, b.src_mask, max_len=14)
    ids2, logits2 = greedy_search(trained.model, b.src, b.src_mask, max_len=14, use_cache=False)
    assert torch.equal(ids, ids2)
    torch.testing.assert_close(logits, logits2, atol=1e-5, rtol=0)
    assert torch.equal(ids, greedy_decode(trained.model, b.src, b.src_mask, max_len=14))


def test_greedy_writes_pad_after_eos_and_stops():
    m = _model()
    with torch.no_grad(): m.output.bias.fill_(-10); m.output.bias[Vocab.eos] = 10   # always </s>
    ids, logits = greedy_search(m, torch.randint(4, 13, (2, 5)), max_len=9)
    assert ids.tolist() == [[Vocab.eos], [Vocab.eos]] and logits.shape == (2, 1, 13)


def test_beam_width_one_is_greedy(trained):
    v = trained.task.vocab
    for s, _ in trained.task.valid[:20]:
        x = torch.tensor(v.encode(s))
        g, _ = greedy_search(trained.model, x[None], max_len=14)
        for alpha in (0.0, 0.6):
            h = beam_search(trained.model, x, beam_size=1, max_len=14, alpha=alpha)[0]
            assert h.tokens == [t for t in g[0].tolist() if t not in (Vocab.pad, Vocab.eos)]


def test_beam_hypotheses_in_score_order_and_match_model(trained):
    v = trained.task.vocab
    for s, _ in trained.task.valid[:5]:
        x = torch.tensor(v.encode(s))
        hyps = beam_search(trained.model, x, beam_size=5, max_len=14)
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True) and 1 <= len(hyps) <= 5
        for h in hyps:
            assert Vocab.eos not in h.tokens
            assert abs(h.score - h.logprob / length_penalty(len(h.tokens) + h.finished, 0.6)) < 1e-6
            assert abs(h.logprob - sequence_logprob(trained.model, x, h.tokens, h.finished)) < 1e-4


def test_beam_stops_at_end_token():
    m = _model()
    with torch.no_grad(): m.output.bias.fill_(-20); m.output.bias[Vocab.eos] = 20; m.output.bias[5] = 15
    hyps = beam_search(m, torch.tensor([4, 5, 6]), beam_size=3, max_len=10)
    assert hyps[0].tokens == [] and hyps[0].finished                 # </s> at once is by far the best
    assert all(h.finished and len(h.tokens) < 10 for h in hyps)


def test_beam_unfinished_at_max_len():
    m = _model()
    with torch.no_grad(): m.output.bias.fill_(-20); m.output.bias[5] = 20   # never </s>
    hyps = beam_search(m, torch.tensor([4, 5, 6]), beam_size=2, max_len=4)
    assert hyps and all(not h.finished and len(h.tokens) == 4 for h in hyps)


def test_beam_errors():
    m = _model()
    with pytest.raises(ValueError, match="beam_size"): beam_search(m, torch.tensor([4, 5]), beam_size=0)
    with pytest.raises(ValueError, match="src must have 1 dimensions"): beam_search(m, torch.tensor([[4, 5]]))
