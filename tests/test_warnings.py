"""CI is quiet: a warning raised by the project's own modules fails the test that raised it (tests/conftest.py's
filters), while the third-party ones named there are ignored."""

import warnings

import pytest


def test_a_warning_from_our_own_code_fails_and_a_named_third_party_one_is_ignored():
    with pytest.raises(UserWarning, match="ours"):
        warnings.warn_explicit("ours", UserWarning, "model/serving/translator.py", 1,
                               module="attention_inspector.model.serving.translator")
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn_explicit("Recommended: pip install sacremoses.", UserWarning, "tokenization_marian.py", 176,
                               module="transformers.models.marian.tokenization_marian")
    assert caught == []  # ignored, not merely recorded
