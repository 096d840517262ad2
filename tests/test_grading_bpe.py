"""grade_learn_bpe: the book's function and other correct forms pass; each mistake a learner makes when learning
byte-pair merges (ties, overlapping pairs, word counts, word boundaries, recounting, applying a merge, the number of
merges) gets its own hint."""
import re
from collections import Counter, defaultdict

import pytest

from transformer_nb.book.graders_decoding import grade_learn_bpe
from transformer_nb.numbers import _merge, learn_bpe


def fails_with(v, *words):
    assert not v, f"passed: {v}"
    for w in words: assert w in v.message, f"{w!r} not in: {v.message}"
    assert "Traceback" not in v.message


def pair_counts(cut, counts, per_word=lambda p: zip(p, p[1:]), boundaries=True):
    "The pairs of every word, weighted by its count (a helper the answers below share)"
    pairs = Counter()
    for w, p in cut.items():
        for a, b in per_word(p):
            if boundaries and (a in " -" or b in " -"): continue
            pairs[a, b] += counts[w]
    return pairs


def bpe(words, merges, *, pick=lambda pairs: max(pairs, key=lambda q: (pairs[q], q)), counts=Counter,
        per_word=lambda p: zip(p, p[1:]), boundaries=True, merge=_merge, extra=0, stop=True):
    "A learner's learn_bpe with one thing done their way"
    counts = counts(words)
    cut, learned = {w: list(w) for w in counts}, []
    for _ in range(merges + extra):
        pairs = pair_counts(cut, counts, per_word, boundaries)
        if not pairs and stop: break
        best = pick(pairs)
        learned.append(best)
        cut = {w: merge(p, best) for w, p in cut.items()}
    return learned


# ---------------------------------------------------------------- correct, written otherwise

def sennrich(words, merges):
    "The paper's reference: words as space-separated symbols, a regex that matches whole symbols only"
    vocab = Counter(" ".join(w) for w in words)
    learned = []
    for _ in range(merges):
        pairs = defaultdict(int)
        for word, freq in vocab.items():
            syms = word.split(" ")
            for a, b in zip(syms, syms[1:]):
                if a not in ("-", "") and b not in ("-", ""): pairs[a, b] += freq
        if not pairs: break
        best = sorted(pairs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[0][0]
        learned.append(best)
        pat = re.compile(r"(?<!\S)" + re.escape(" ".join(best)) + r"(?!\S)")
        vocab = {pat.sub("".join(best), w): f for w, f in vocab.items()}
    return learned


def lists_and_loops(words, merges):
    "Merges as lists, a hand-written max, a hand-written left-to-right merge"
    counts = {}
    for w in words: counts[w] = counts.get(w, 0) + 1
    cut, learned = {w: list(w) for w in counts}, []
    while len(learned) < merges:
        pairs = {}
        for w, p in cut.items():
            for i in range(len(p) - 1):
                if p[i] in (" ", "-") or p[i + 1] in (" ", "-"): continue
                pairs[(p[i], p[i + 1])] = pairs.get((p[i], p[i + 1]), 0) + counts[w]
        if not pairs: break
        best = None
        for q, c in pairs.items():
            if best is None or (c, q) > (pairs[best], best): best = q
        learned.append(list(best))
        for w, p in cut.items():
            out, i = [], 0
            while i < len(p):
                if i + 1 < len(p) and (p[i], p[i + 1]) == best: out.append(p[i] + p[i + 1]); i += 2
                else: out.append(p[i]); i += 1
            cut[w] = out
    return learned


@pytest.mark.parametrize("answer", [learn_bpe, sennrich, lists_and_loops, lambda words, merges: bpe(words, merges)])
def test_correct_forms_pass(answer):
    v = grade_learn_bpe(answer)
    assert v, v


# ---------------------------------------------------------------- mistakes, as learners write them

def right_to_left(p, pair):
    out = []
    while p:
        if len(p) > 1 and (p[-2], p[-1]) == pair: out.insert(0, p[-2] + p[-1]); p = p[:-2]
        else: out.insert(0, p[-1]); p = p[:-1]
    return out


def first_only(p, pair):
    for i in range(len(p) - 1):
        if (p[i], p[i + 1]) == pair: return p[:i] + [p[i] + p[i + 1]] + p[i + 2:]
    return p


def by_replace(p, pair):
    return " ".join(p).replace(" ".join(pair), "".join(pair)).split(" ")


def count_with_str_count(words, merges):
    "str.count on the joined pieces: overlapping occurrences of ('a', 'a') counted once"
    def per_word(p):
        s = "\0".join(p)
        return [q for q in dict.fromkeys(zip(p, p[1:])) for _ in range(s.count("\0".join(q)))]
    return bpe(words, merges, per_word=per_word)


def first_counts_only(words, merges):
    "the pairs counted once, then the most frequent taken in turn"
    counts = Counter(words)
    pairs = pair_counts({w: list(w) for w in counts}, counts)
    return sorted(pairs, key=lambda q: (pairs[q], q), reverse=True)[:merges]


def never_stops(words, merges):
    "no early stop: max() of no pairs raises"
    return bpe(words, merges, stop=False)


def joined_pieces(words, merges):
    "the merged piece instead of the pair"
    return ["".join(m) for m in learn_bpe(words, merges)]


MISTAKES = {
    "most_common": (lambda w, k: bpe(w, k, pick=lambda p: p.most_common(1)[0][0]), "Counter.most_common"),
    "smaller pair": (lambda w, k: bpe(w, k, pick=lambda p: min(p, key=lambda q: (-p[q], q))), "the smaller pair"),
    "word types": (lambda w, k: bpe(w, k, counts=lambda ws: Counter(set(ws))), "counts once however often"),
    "across boundaries": (lambda w, k: bpe(w, k, boundaries=False), "across a space or a hyphen"),
    "set of pairs": (lambda w, k: bpe(w, k, per_word=lambda p: set(zip(p, p[1:]))), "counts once: count every"),
    "str.count": (count_with_str_count, "overlapping occurrences are counted once"),
    "no recount": (first_counts_only, "count them again after every merge"),
    "right to left": (lambda w, k: bpe(w, k, merge=right_to_left), "applied from the right"),
    "first occurrence": (lambda w, k: bpe(w, k, merge=first_only), "first occurrence in a word only"),
    "string replace": (lambda w, k: bpe(w, k, merge=by_replace), "joined parts of longer pieces"),
    "one more": (lambda w, k: bpe(w, k, extra=1), "one merge too many"),
    "one fewer": (lambda w, k: bpe(w, k, extra=-1), "one merge too few"),
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_mistake_named(name):
    answer, words = MISTAKES[name]
    fails_with(grade_learn_bpe(answer), words)


def test_no_early_stop(): fails_with(grade_learn_bpe(never_stops), "ValueError", "stop early")
def test_joined_pieces(): fails_with(grade_learn_bpe(joined_pieces), "not the joined piece")


def test_two_mistakes_named_in_order():
    "pairs across word boundaries and a tie broken by most_common: both named, the boundaries first"
    v = grade_learn_bpe(lambda w, k: bpe(w, k, boundaries=False, pick=lambda p: p.most_common(1)[0][0]))
    fails_with(v, "2 things differ")
    assert v.message.index("across a space") < v.message.index("most_common")


def test_unfilled():
    def learn_bpe(words, merges):
        "Byte-pair encoding"
        ...
    fails_with(grade_learn_bpe(learn_bpe), "fill in the TODO", "the book's `learn_bpe`")
