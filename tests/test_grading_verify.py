"""The defects a verification of the reviewed checkers found (notes/verify_grading.md): wrong answers that passed
and broke a later lesson, and correct answers told of a mistake they did not make. Each test runs the wrong answer
(it fails with the message that says what it did and what was expected) and a correct one (it passes)."""
from test_grading import fails_with
from test_grading_review import _decoder_layer


# ---------------------------------------------------------------- 1. the cross-attention's cache
def test_decoder_layer_that_keeps_the_cache_from_its_cross_attention_is_told_so():
    "verify 1: a layer that gave the cache to its self-attention only passed, then x025 read cache.cross (None)"
    from transformer_nb.book.graders_stack import grade_decoder_layer
    assert grade_decoder_layer(_decoder_layer())
    fails_with(grade_decoder_layer(_decoder_layer(cross_cache=False)), "cache.cross is still None",
               "cross_attn(..., cache=cache)", "the cell after this check reads cache.cross")
