"Decoding: the key/value cache changes nothing; beam search is ordered, reduces to greedy, finds the exact n-best when\nwide enough, and never scores below greedy"
import pytest
import torch

from transformer_nb import decoding
from transformer_nb.data import Vocab, make_batch
from transformer_nb.decoding import (
    KVCache,
    beam_search,
    decode_step,
    exact_match,
    greedy_search,
    length_penalty,
    sequence_logprob,
    translate,
)
from transformer_nb.masking import causal_mask, padding_mask
from transformer_nb.reading import teacher_forced_accuracy
from transformer_nb.training import train_task
from transformer_nb.transformer import Transformer


def _model(norm_first=True, V=13, seed=0):
    torch.manual_seed(seed)
    return Transformer(V, V, d_model=24, num_heads=4, num_encoder_layers=2, num_decoder_layers=3, d_ff=40,
                       norm_first=norm_first, positions="sinusoidal").eval()


@pytest.fixture(scope="module")
def trained():
    "A date model trained for a few dozen steps: not accurate, but its outputs are not uniform either"
    # warm-up 60: the schedule this fixture had when the warm-up was capped at the run's steps
    return train_task("dates", steps=60, warmup=60, progress=False, n_train=2000, n_valid=100, d_model=32, num_heads=4,
                      d_ff=64)


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
    assert cache.length == T and cache.layers[2].k.shape == (B, 4, T, 6)


def test_cached_greedy_equals_uncached(trained):
    b = make_batch(trained.task.valid[:50], trained.task.vocab)
    ids, logits = greedy_search(trained.model, b.src, b.src_mask, max_len=14)
    ids2, logits2 = greedy_search(trained.model, b.src, b.src_mask, max_len=14, use_cache=False)
    assert torch.equal(ids, ids2)
    torch.testing.assert_close(logits, logits2, atol=1e-5, rtol=0)


def test_exact_match_is_teacher_forced_whole_target_accuracy(trained):
    "Greedy writes the target iff the argmax is right at every position given the true prefix (chapter 10's claim)"
    v, pairs = trained.task.vocab, trained.task.valid
    assert exact_match(trained.model, v, pairs) == teacher_forced_accuracy(trained.model, v, pairs).sequences


def test_translate_uses_the_cached_greedy_decoder(trained, monkeypatch):
    v = trained.task.vocab
    srcs = [s for s, _ in trained.task.valid[:10]]
    expected = translate(trained.model, v, srcs)
    calls = []
    real = decoding.decode_step
    monkeypatch.setattr(decoding, "decode_step", lambda *a: calls.append(1) or real(*a))
    assert translate(trained.model, v, srcs) == expected and calls


def test_greedy_writes_pad_after_eos_and_stops():
    m = _model()
    with torch.no_grad(): m.output.bias.fill_(-10); m.output.bias[Vocab.eos] = 10   # always </s>
    ids, logits = greedy_search(m, torch.randint(4, 13, (2, 5)), max_len=9)
    assert ids.tolist() == [[Vocab.eos], [Vocab.eos]] and logits.shape == (2, 1, 13)


def test_beam_width_one_is_greedy(trained):
    "Without a length penalty (alpha 0), as the chapter says; with one it need not be (the next test)"
    v = trained.task.vocab
    for s, _ in trained.task.valid[:20]:
        x = torch.tensor(v.encode(s))
        g, _ = greedy_search(trained.model, x[None], max_len=14)
        h = beam_search(trained.model, x, beam_size=1, max_len=14, alpha=0.0)[0]
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


# ---- beam search against exhaustive enumeration, on a "model" whose next-token log-probabilities are known ----
V_TABLE, EOS = 6, Vocab.eos


def table_logprobs(prefix, seed):
    "log-probabilities of the token after `prefix` (a tuple of ids): fixed, arbitrary, and context-dependent"
    g = torch.Generator().manual_seed(hash((seed,) + tuple(prefix)) % 2**31)
    return (3 * torch.randn(V_TABLE, generator=g)).log_softmax(-1)


class TableCache(KVCache):
    "A KVCache that also remembers each row's prefix, reordered with the beam"
    def __init__(self, model, memory, memory_mask=None):
        super().__init__(model, memory, memory_mask); self.prefixes = [()] * memory.shape[0]
    def reorder(self, index):
        super().reorder(index); self.prefixes = [self.prefixes[i] for i in index.tolist()]


@pytest.fixture
def table(monkeypatch):
    "A Transformer whose decoding steps are replaced by the table: set table['seed'] to choose one"
    box = {"seed": 0}
    box["fn"] = lambda prefix: table_logprobs(prefix, box["seed"])
    def step(model, cache, token):
        cache.prefixes = [p + (t,) for p, t in zip(cache.prefixes, token.tolist())]
        return torch.stack([box["fn"](p[1:]) for p in cache.prefixes])                   # without <s>
    monkeypatch.setattr(decoding, "KVCache", TableCache)
    monkeypatch.setattr(decoding, "decode_step", step)
    torch.manual_seed(0)
    box["model"] = Transformer(V_TABLE, V_TABLE, d_model=8, num_heads=2, num_encoder_layers=1,
                               num_decoder_layers=1, d_ff=8).eval()
    return box


def enumerate_outputs(seed, max_len, alpha):
    "Every output of at most max_len tokens: (tokens, logprob, score, finished), best score first"
    out = []
    def walk(prefix, lp):
        logp = table_logprobs(prefix, seed)
        if len(prefix) == max_len:
            out.append((list(prefix), lp, lp / length_penalty(max_len, alpha), False)); return
        end = lp + float(logp[EOS])
        out.append((list(prefix), end, end / length_penalty(len(prefix) + 1, alpha), True))
        for t in range(V_TABLE):
            if t != EOS: walk(prefix + (t,), lp + float(logp[t]))
    walk((), 0.0)
    return sorted(out, key=lambda h: -h[2])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_finds_the_exact_n_best(table, seed, alpha):
    table["seed"] = seed
    max_len, n = 4, 6
    exact = enumerate_outputs(seed, max_len, alpha)
    hyps = beam_search(table["model"], torch.tensor([4, 5]), beam_size=(V_TABLE - 1) ** max_len,
                       max_len=max_len, alpha=alpha)
    assert [(h.tokens, h.finished) for h in hyps[:n]] == [(e[0], e[3]) for e in exact[:n]]
    for h, e in zip(hyps[:n], exact):
        assert abs(h.score - e[2]) < 1e-5 and abs(h.logprob - e[1]) < 1e-5


@pytest.mark.parametrize("seed", range(12))
def test_narrow_beams_in_order_and_not_below_greedy(table, seed):
    table["seed"] = seed
    exact = {tuple(e[0]) + (e[3],): e[2] for e in enumerate_outputs(seed, 5, 0.6)}
    greedy = beam_search(table["model"], torch.tensor([4]), beam_size=1, max_len=5)[0]
    for k in (2, 3, 5):
        hyps = beam_search(table["model"], torch.tensor([4]), beam_size=k, max_len=5)
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True) and len(hyps) == k
        for h in hyps: assert abs(h.score - exact[tuple(h.tokens) + (h.finished,)]) < 1e-5
        assert hyps[0].score >= greedy.score - 1e-6


def test_search_continues_while_a_live_hypothesis_can_win(table):
    "Issue 15: two short outputs finish first, but the live A A overtakes both; stopping at k finished returned []"
    A, B = 4, 5
    probs = {(): {A: .6, EOS: .3, B: .1}, (A,): {A: .65, EOS: .35}, (A, A): {EOS: .99, A: .01}}
    def fn(prefix):
        p = torch.full((V_TABLE,), 1e-6)
        for tok, q in probs.get(tuple(prefix), {EOS: 1.0}).items(): p[tok] = q
        return p.log()
    table["fn"] = fn
    for alpha in (0.0, 0.6):
        hyps = beam_search(table["model"], torch.tensor([4]), beam_size=2, max_len=6, alpha=alpha)
        assert hyps[0].tokens == [A, A] and hyps[0].finished
        assert [h.tokens for h in hyps] == [[A, A], []]                  # then the early </s>


def test_beam_width_one_is_not_greedy_under_a_length_penalty(table):
    """</s> is the best first token (greedy writes nothing), but its score -0.69 / penalty(1) is below the live A's
    bound -0.71 / penalty(max_len) when alpha > 0: the search goes on, and A </s> wins (the chapter's condition)"""
    A = 4
    probs = {(): {EOS: .5, A: .49}, (A,): {EOS: .999}}
    def fn(prefix):
        p = torch.full((V_TABLE,), 1e-6)
        for tok, q in probs.get(tuple(prefix), {EOS: 1.0}).items(): p[tok] = q
        return p.log()
    table["fn"] = fn
    one = lambda alpha: beam_search(table["model"], torch.tensor([4]), beam_size=1, max_len=6, alpha=alpha)
    assert [h.tokens for h in one(0.0)] == [[]]                  # greedy's output: </s> at once
    assert [h.tokens for h in one(0.6)] == [[A]] and one(0.6)[0].finished


@pytest.fixture(scope="module")
def trained_tasks():
    "A briefly trained reversal model (good, not perfect: where search errors would show)"
    return [train_task("reverse", steps=150, progress=False, n_train=3000, n_valid=120, average=1, runs=0)]


def test_beam_never_scores_below_greedy_on_trained_tasks(trained_tasks):
    """On models that have learned something (not the 60-step `trained` fixture: there a beam of 2 can prune greedy's
    path, which beam search does not rule out; see the decoding chapter)"""
    for t in trained_tasks:
        v = t.task.vocab
        for s, _ in t.task.valid[:40]:
            x = torch.tensor(v.encode(s))
            g = greedy_search(t.model, x[None], max_len=len(x) + 8)[0][0].tolist()
            fin = v.eos in g
            g = g[:g.index(v.eos)] if fin else g
            g_score = sequence_logprob(t.model, x, g, fin) / length_penalty(len(g) + fin)
            for k in (2, 4):
                h = beam_search(t.model, x, k, max_len=len(x) + 8)[0]
                assert h.score >= g_score - 1e-4, (t.task.name, s, k, v.decode(h.tokens), v.decode(g))
                assert abs(h.logprob - sequence_logprob(t.model, x, h.tokens, h.finished)) < 1e-4


# ---- the cache's layout: room set aside and doubled, reordering, beam search's steps against recomputation ----
def _padded_batch(B=3, S=7, V=13, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (B, S), generator=g); src[-1, 4:] = 0
    if B > 2: src[1, 2:] = 0
    return src, padding_mask(src, 0)


@pytest.mark.parametrize("norm_first", [True, False])
def test_cache_writes_in_place_and_doubles_its_room(norm_first):
    "Steps within the room write into the same buffer; past it the room doubles; the logits never change"
    m = _model(norm_first)
    src, smask = _padded_batch()
    T = 9
    tgt = torch.randint(4, 13, (3, T)); tgt[:, 0] = 1
    memory = m.encode(src, smask)
    full = m.decode(tgt, memory, causal_mask(T), smask)
    cache = KVCache(m, memory, smask, capacity=2)
    ptrs, rooms, stepped = [], [], []
    for t in range(T):
        stepped.append(decode_step(m, cache, tgt[:, t]))
        ptrs.append(cache.layers[0].keys.data_ptr()); rooms.append(cache.layers[0].keys.shape[2])
    torch.testing.assert_close(torch.stack(stepped, 1), full, atol=1e-5, rtol=0)
    assert rooms == [2, 2, 4, 4, 8, 8, 8, 8, 16]
    assert ptrs[0] == ptrs[1] and ptrs[2] == ptrs[3] and len(set(ptrs[4:8])) == 1
    assert [layer.k.shape for layer in cache.layers] == [(3, 4, T, 6)] * 3


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("shared_source", [True, False])
def test_reordered_cache_equals_recomputing_the_prefixes(norm_first, shared_source):
    """Beam search's use of the cache: rows copied, dropped and permuted at every step (`reorder`); each step's
    logits equal one decoder pass over that row's whole prefix. A shared source (one row of memory for every
    hypothesis, as in beam search) and a batch of padded sources take different paths through `reorder`."""
    m = _model(norm_first)
    g = torch.Generator().manual_seed(0)
    src, smask = _padded_batch(1, 7) if shared_source else _padded_batch(4, 7)
    memory = m.encode(src, smask)
    cache = KVCache(m, memory, smask, capacity=3)
    rows = list(range(src.shape[0]))                      # which source each live row decodes
    prefixes = [[1] for _ in rows]
    for _ in range(8):
        logits = decode_step(m, cache, torch.tensor([p[-1] for p in prefixes]))
        tgt = torch.tensor(prefixes)
        mem, mask = memory[rows], smask[rows]
        full = m.decode(tgt, mem, causal_mask(tgt.shape[1]), mask)[:, -1]
        torch.testing.assert_close(logits, full, atol=1e-5, rtol=0)
        n = int(torch.randint(1, 5, (), generator=g))      # rows kept: fewer, as many, or more
        index = torch.randint(0, len(prefixes), (n,), generator=g)
        cache.reorder(index)
        rows = [rows[i] for i in index.tolist()]
        prefixes = [prefixes[i] + [int(torch.randint(4, 13, (), generator=g))] for i in index.tolist()]
    if shared_source: assert cache.layers[0].cross[0].shape[0] == 1        # never copied


@pytest.mark.parametrize("norm_first", [True, False])
def test_beam_search_steps_equal_recomputation(norm_first, monkeypatch):
    "Every step of a real beam search: the cached log-probabilities of every live hypothesis equal a recompute"
    m = _model(norm_first, seed=3)
    src = torch.tensor([4, 7, 5, 9, 6])
    memory = m.encode(src[None])

    class Tracked(KVCache):                                     # remembers each row's prefix through reorders
        def __init__(self, *a, **kw): super().__init__(*a, **kw); self.prefixes = [[]]
        def reorder(self, index):
            super().reorder(index); self.prefixes = [self.prefixes[i] for i in index.tolist()]

    real, steps = decoding.decode_step, []
    def checked(model, cache, token):
        cache.prefixes = [p + [t] for p, t in zip(cache.prefixes, token.tolist())]
        logits = real(model, cache, token)
        tgt = torch.tensor(cache.prefixes)
        full = model.decode(tgt, memory.expand(len(tgt), -1, -1), causal_mask(tgt.shape[1]))[:, -1]
        torch.testing.assert_close(logits, full, atol=1e-5, rtol=0)
        steps.append(len(tgt))
        return logits
    monkeypatch.setattr(decoding, "KVCache", Tracked)
    monkeypatch.setattr(decoding, "decode_step", checked)
    hyps = beam_search(m, src, beam_size=3, max_len=40)           # longer than the cache's first room
    assert len(steps) > 32 and max(steps) <= 3
    for h in hyps:
        # a sum of up to 40 log-probabilities, added in another order: within 1e-6 of its size
        want = sequence_logprob(m, src, h.tokens, h.finished)
        assert abs(h.logprob - want) <= 1e-5 + 1e-6 * abs(want), (h.logprob, want)


def test_greedy_and_beam_decode_in_inference_mode_and_hand_back_tensors_autograd_takes():
    """greedy_search and beam_search run their decoder steps under torch.inference_mode (cheaper per operation than
    no_grad); greedy's ids and logits are normal tensors all the same: written in place, and trained on after"""
    m, modes = _model(), []
    m.decoder.register_forward_hook(lambda mod, args, out: modes.append(torch.is_inference_mode_enabled()))
    src = torch.tensor([[4, 5, 6, 7, 2]])
    for use_cache in (True, False):
        modes.clear()
        ids, logits = greedy_search(m, src, max_len=5, eos=None, use_cache=use_cache)
        assert modes and all(modes), (use_cache, modes)
        assert not torch.is_inference(ids) and not torch.is_inference(logits)
        ids[0, 0] = 3; logits[0, 0, 0] = 0.0       # an inference tensor refuses these outside the mode
    modes.clear()
    beam_search(m, src[0], beam_size=2, max_len=5)
    assert modes and all(modes), modes
    m.train()
    tgt = torch.cat([torch.full((1, 1), Vocab.bos), ids], 1)
    m(src, tgt[:, :-1]).logsumexp(-1).mean().backward()      # the embedding keeps the ids for backward
    assert m.decoder.layers[0].self_attn.W_q.weight.grad is not None
