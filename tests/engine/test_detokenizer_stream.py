"""The API server's streaming detokenizer (tokenizers' DecodeStream) hands out exactly the text
the window decoder does, token by token, stop strings and held-back prefixes included, on the
byte tokenizer (random bytes: many incomplete UTF-8 characters) and SmolLM2's BPE."""

from __future__ import annotations

import random

import pytest

from reference_engine.detokenizer import IncrementalDetokenizer, StreamDetokenizer, detokenizer_factory
from reference_engine.model.tokenizer import byte_tokenizer
from reference_engine.sim.engine import load_sim_tokenizer
from tests.engine.fakes import CharTokenizer


@pytest.mark.parametrize("make", [byte_tokenizer, load_sim_tokenizer], ids=["bytes", "smollm2"])
def test_stream_detokenizer_matches_the_window_decoder(make):
    tokenizer = make()
    new = detokenizer_factory(tokenizer)
    rnd = random.Random(7)
    for _ in range(60):
        ids = [rnd.randrange(tokenizer.vocab_size) for _ in range(30)]
        stop = [tokenizer.decode(ids[10:12])] if rnd.random() < 0.5 else []
        window, stream = IncrementalDetokenizer(tokenizer.decode, list(stop)), new(stop)
        assert isinstance(stream, StreamDetokenizer)
        for i, token in enumerate(ids):
            window.add([token])
            stream.add([token])
            cut_w, cut_s = window.find_stop(), stream.find_stop()
            assert cut_w == cut_s
            final = cut_w >= 0 or i == len(ids) - 1
            assert stream.take(final, cut_s) == window.take(final, cut_w)
            if cut_w >= 0:
                break


def test_tokenizers_without_a_tokenizers_backend_get_the_window_decoder():
    detok = detokenizer_factory(CharTokenizer())(["x"])
    assert type(detok) is IncrementalDetokenizer
