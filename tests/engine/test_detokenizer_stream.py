"""The API server's streaming detokenizers hand out the tokenizer's own text, token by token.

- The byte table (byte-level BPE tokenizers): at every token its text extends what the window
  decoder has handed out (never different, at most earlier), and in the end it is the
  tokenizer's decode of all ids; stop strings cut it where the full decode's text has them.
- DecodeStream (any other `tokenizers` backend): exactly the window decoder's text, token by
  token, stop strings and held-back prefixes included.

On the byte tokenizer (random bytes: many incomplete and invalid UTF-8 sequences) and
SmolLM2's BPE."""

from __future__ import annotations

import random

import pytest
import tokenizers
from tokenizers.decoders import DecodeStream

from reference_engine.detokenizer import (
    ByteTableDetokenizer,
    IncrementalDetokenizer,
    StreamDetokenizer,
    detokenizer_factory,
)
from reference_engine.model.tokenizer import byte_tokenizer
from reference_engine.sim.engine import load_sim_tokenizer
from tests.engine.fakes import CharTokenizer

TOKENIZERS = pytest.mark.parametrize("make", [byte_tokenizer, load_sim_tokenizer], ids=["bytes", "smollm2"])


def random_ids(tokenizer, rnd: random.Random, n: int) -> list[int]:
    size = tokenizer.backend.get_vocab_size(with_added_tokens=True)  # special tokens too
    return [rnd.randrange(size) for _ in range(n)]


@TOKENIZERS
def test_the_byte_table_streams_the_tokenizers_own_text(make):
    tokenizer = make()
    new = detokenizer_factory(tokenizer)
    rnd = random.Random(3)
    for _ in range(300):
        ids = random_ids(tokenizer, rnd, 30)
        window, table = IncrementalDetokenizer(tokenizer.decode), new([])
        assert isinstance(table, ByteTableDetokenizer)
        for token in ids:
            window.add([token])
            table.add([token])
            assert table.text.startswith(window.text)
        assert table.text + table.pending.decode(errors="replace") == tokenizer.backend.decode(ids)


@TOKENIZERS
def test_the_byte_table_cuts_at_stop_strings_where_the_full_text_has_them(make):
    tokenizer = make()
    new = detokenizer_factory(tokenizer)
    rnd = random.Random(5)
    candidates = stopped = 0
    for _ in range(200):
        ids = random_ids(tokenizer, rnd, 30)
        stop = tokenizer.decode(ids[10:12])
        if not stop or "\ufffd" in stop:
            continue
        candidates += 1
        detok, streamed = new([stop]), ""
        for i, token in enumerate(ids):
            detok.add([token])
            cut = detok.find_stop()
            streamed += detok.take(final=cut >= 0 or i == len(ids) - 1, cut=cut)
            if cut >= 0:
                full = tokenizer.backend.decode(ids[: i + 1])
                assert streamed == full[: full.find(stop)]
                stopped += 1
                break
            assert stop not in streamed
    # In context a stop string's first bytes may complete an earlier character, so not all stop.
    assert stopped > candidates / 2


@TOKENIZERS
def test_decode_stream_matches_the_window_decoder(make):
    tokenizer = make()
    rnd = random.Random(7)
    for _ in range(60):
        ids = random_ids(tokenizer, rnd, 30)
        stop = [tokenizer.decode(ids[10:12])] if rnd.random() < 0.5 else []
        window = IncrementalDetokenizer(tokenizer.decode, list(stop))
        stream = StreamDetokenizer(
            tokenizer.decode,
            list(stop),
            backend=tokenizer.backend,
            stream=DecodeStream(skip_special_tokens=True),
        )
        for i, token in enumerate(ids):
            window.add([token])
            stream.add([token])
            cut_w, cut_s = window.find_stop(), stream.find_stop()
            assert cut_w == cut_s
            final = cut_w >= 0 or i == len(ids) - 1
            assert stream.take(final, cut_s) == window.take(final, cut_w)
            if cut_w >= 0:
                break


class _WordPieceTokenizer:
    """A `tokenizers` backend whose decoder is not byte-level (WordPiece's `##` joining)."""

    def __init__(self):
        vocab = {"[UNK]": 0, "sea": 1, "##s": 2, "wide": 3}
        self.backend = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
        self.backend.decoder = tokenizers.decoders.WordPiece()

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode(ids)


def test_other_tokenizers_get_decode_stream_or_the_window_decoder():
    wordpiece = detokenizer_factory(_WordPieceTokenizer())([])
    assert type(wordpiece) is StreamDetokenizer
    wordpiece.add([1])
    wordpiece.add([2])
    wordpiece.add([3])
    assert wordpiece.take(final=True) == "seas wide"
    assert type(detokenizer_factory(CharTokenizer())(["x"])) is IncrementalDetokenizer


def test_ids_the_table_does_not_know_decode_to_nothing():
    detok = detokenizer_factory(load_sim_tokenizer())([])
    detok.add([10**6, 28, 10**6])
    assert detok.take(final=True) == ","
