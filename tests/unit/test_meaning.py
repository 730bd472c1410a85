from __future__ import annotations

import numpy as np

from proxy.recall.meaning import DIMENSIONS, decoded, encoded, vectors


def test_a_paraphrase_is_nearer_than_an_unrelated_message() -> None:
    """The packaged model, read from its wheel with nothing downloaded."""
    question, *said = vectors(
        [
            "What pet does she have?",
            "I adopted a rescue dog named Max last spring",
            "We went hiking in the mountains",
            "The quarterly tax filing deadline is on the 15th",
        ]
    ).astype(np.float32)
    nearness = [float(question @ message) for message in said]
    assert nearness[0] > 0.3 > max(nearness[1:])


def test_vectors_are_unit_length_and_empty_text_is_zero() -> None:
    found = vectors(["a long tool output " * 10_000, "", "hello"])
    assert found.shape == (3, DIMENSIONS) and found.dtype == np.float16
    lengths = np.linalg.norm(found.astype(np.float32), axis=1)
    assert np.allclose(lengths[[0, 2]], 1.0, atol=1e-2) and lengths[1] == 0.0


def test_meanings_round_trip_as_text_and_a_wrong_size_reads_as_unknown() -> None:
    found = vectors(["one", "two"])
    assert np.array_equal(decoded(encoded(found), 2), found)
    assert not decoded(encoded(found), 3).any()
