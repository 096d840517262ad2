"The pronoun task of chapter 11a: German agreement, held-out pairs never seen in training, the referent measure."
import torch
from transformer_nb.pronouns import (AGENTS, PLACES, AGENT_ADJECTIVES, PLACE_ADJECTIVES, IT, AGENT, PLACE,
                                     ADJECTIVE, PRONOUN, pronoun_pair, make_pronoun_task, refers_to_agent,
                                     genders_differ, referent_preference, words)


def test_the_pronoun_agrees_with_the_referent():
    for agent, (_, g_agent) in AGENTS.items():
        for place, (_, g_place) in PLACES.items():
            for adj in [*AGENT_ADJECTIVES, *PLACE_ADJECTIVES]:
                en, de = pronoun_pair(agent, place, adj)
                assert (en[IT], en[AGENT], en[PLACE], en[ADJECTIVE]) == ("it", agent, place, adj)
                gender = g_agent if adj in AGENT_ADJECTIVES else g_place
                assert de[PRONOUN] == {"m": "er", "f": "sie", "n": "es"}[gender]
                assert len(en) == len(de) == 12


def test_held_out_pairs_never_occur_in_training():
    task = make_pronoun_task(held_out=0.2, seed=3)
    key = lambda en: (en[AGENT] if refers_to_agent(en) else en[PLACE], en[ADJECTIVE])
    assert {key(en) for en, _ in task.train}.isdisjoint({key(en) for en, _ in task.valid})
    total = len(AGENTS) * len(PLACES) * (len(AGENT_ADJECTIVES) + len(PLACE_ADJECTIVES))
    assert len(task.train) + len(task.valid) == total
    assert 0.15 < len(task.valid) / total < 0.25
    assert make_pronoun_task(seed=3).valid == task.valid and make_pronoun_task(seed=4).valid != task.valid
    assert all(w in task.vocab.stoi for en, de in task.train + task.valid for w in en + de)


def test_genders_differ():
    assert genders_differ(pronoun_pair("animal", "street", "tired")[0])        # das Tier, die Straße
    assert not genders_differ(pronoun_pair("cat", "street", "tired")[0])      # die Katze, die Straße


def test_referent_preference_counts_the_referent_against_the_other_noun():
    sources = [pronoun_pair("dog", "river", "tired")[0], pronoun_pair("dog", "river", "wide")[0]]
    w = torch.zeros(1, 2, 2, 12)                               # (L, B, H, S)
    w[0, :, 0, AGENT] = 1.0                                    # head 0: always the animal
    w[0, 0, 1, AGENT] = w[0, 1, 1, PLACE] = 1.0                # head 1: always the referent
    assert referent_preference(w, sources).tolist() == [[0.5, 1.0]]


def test_words_stop_at_the_end_token():
    task = make_pronoun_task()
    v = task.vocab
    ids = torch.tensor([v.bos, v.stoi["der"], v.stoi["Hund"], v.eos, v.stoi["Bach"], v.pad])
    assert words(ids, v) == ["der", "Hund"]
