"""The tasks of chapter 9: `date_pairs` names the argument it cannot use (a range that ends before it starts, no
format, a format name given as a string), where it used to fail inside `random` with a message about neither."""
import datetime

import pytest

from transformer_nb.data import date_pairs

D = datetime.date


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(first=D(2000, 1, 1), last=D(1999, 1, 1)), ValueError,
     "first must be on or before last, got first 2000-01-01 and last 1999-01-01"),
    (dict(formats=[]), ValueError, r"formats must name at least one format, got none; known: \['D Mon YYYY'"),
    (dict(formats="D Mon YYYY"), TypeError, r"formats must be a list of format names, got the string 'D Mon YYYY': "
                                            r"write \['D Mon YYYY'\]"),
    (dict(first="1900-01-01"), TypeError, "first must be a datetime.date, got str '1900-01-01'"),
    (dict(last=2099), TypeError, "last must be a datetime.date, got int 2099"),
])
def test_date_pairs_names_the_argument_it_cannot_use(kwargs, error, words):
    with pytest.raises(error, match=words):
        date_pairs(2, 0, **kwargs)


def test_a_range_of_one_day_and_one_format_still_work():
    pairs = date_pairs(3, 0, first=D(2026, 11, 22), last=D(2026, 11, 22), formats=["YYYY/MM/DD"])
    assert pairs == [("2026/11/22", "2026-11-22")] * 3
