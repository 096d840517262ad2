"The pronoun task of chapter 11a: German agreement, held-out pairs never seen in training, the referent measure."
import pytest
import torch

from transformer_nb.pronouns import (
    ADJECTIVE,
    AGENT,
    AGENT_ADJECTIVES,
    AGENTS,
    IT,
    PLACE,
    PLACE_ADJECTIVES,
    PLACES,
    PRONOUN,
    genders_differ,
    make_pronoun_task,
    pronoun_ablation,
    pronoun_accuracy,
    pronoun_pair,
    referent_preference,
    referent_shares,
    refers_to_agent,
    show_strips,
    train_pronoun_model,
    words,
)


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


def test_referent_preference_adds_up_several_key_positions():
    "The decoder's keys: article and noun of each noun, their weights added"
    sources = [pronoun_pair("dog", "river", "tired")[0], pronoun_pair("dog", "river", "wide")[0]]
    w = torch.zeros(1, 2, 1, 9)                                # (L, B, H, T)
    w[0, :, 0, 1] = 0.3; w[0, :, 0, 2] = 0.3                   # the animal's article and noun: 0.6
    w[0, :, 0, 5] = 0.4                                        # the place's noun alone: 0.4
    assert referent_preference(w, sources, (1, 2), (4, 5)).tolist() == [[0.5]]
    assert referent_preference(w, sources, 2, 5).tolist() == [[0.5]]   # 0.3 against 0.4: the place


def small_model(task, seed=0):
    from transformer_nb.transformer import Transformer
    torch.manual_seed(seed)
    return Transformer(len(task.vocab), len(task.vocab), d_model=16, num_heads=2, num_encoder_layers=1,
                       num_decoder_layers=2, d_ff=32, max_len=32).eval()


def test_referent_shares_has_every_kind_and_refuses_other_sentences():
    from transformer_nb.data import make_batch
    task = make_pronoun_task()
    model, b = small_model(task), make_batch(task.valid, task.vocab)
    with torch.no_grad():
        _, attn = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask, b.src_mask, need_weights=True)
    shares = referent_shares(attn, task)
    assert {k: tuple(v.shape) for k, v in shares.items()} == {"encoder": (1, 2), "decoder": (2, 2), "cross": (2, 2)}
    assert all(((0 <= v) & (v <= 1)).all() for v in shares.values())
    with pytest.raises(ValueError, match="attn holds 336 sentences, the task 335 held-out ones"):
        referent_shares(attn, task._replace(valid=task.valid[:-1]))


def test_pronoun_accuracy_is_the_share_of_right_pronouns_and_ablation_restores_the_model():
    from transformer_nb.data import make_batch
    task = make_pronoun_task()
    model = small_model(task)
    telling = [p for p in task.valid if genders_differ(p[0])]
    b = make_batch(telling, task.vocab)
    with torch.no_grad():
        guess = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask, b.src_mask)[:, PRONOUN].argmax(-1)
    by_hand = sum(task.vocab.itos[int(g)] == de[PRONOUN] for g, (_, de) in zip(guess, telling)) / len(telling)
    assert abs(pronoun_accuracy(model, task) - by_hand) < 1e-6
    before = {k: v.clone() for k, v in model.state_dict().items()}
    table = pronoun_ablation(model, task)
    assert set(table) == ({"none"} | {f"encoder 0 {h}" for h in range(2)} | {"encoder 0 all"}
                          | {f"{k} {l} {h}" for k in ("decoder", "cross") for l in range(2) for h in range(2)}
                          | {f"{k} {l} all" for k in ("decoder", "cross") for l in range(2)})
    assert table["none"] == pronoun_accuracy(model, task)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    every_cross = [("cross", l, h) for l in range(2) for h in range(2)]
    assert pronoun_ablation(model, task, {"no cross": every_cross}).keys() == {"none", "no cross"}


def test_train_pronoun_model_refuses_a_negative_seed():
    with pytest.raises(ValueError, match="seed"):
        train_pronoun_model(seed=-1)
    with pytest.raises(ValueError, match="split"):
        train_pronoun_model(split=-2)


def test_show_strips_draws_one_row_per_label_narrow_enough_for_a_phone():
    from transformer_nb.plotting import figure_legibility
    fig = show_strips({"a": [0.5, 0.9], "b": [0.2, 0.3]}, "share", hue=["split 0", "split 1"], marks={0.5: "chance"})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["b", "a"]
    assert len(ax.collections) == 4                             # two rows, two colours
    assert figure_legibility(fig)["width"] <= 370
