"""Tokenizer: a `tokenizers` backend plus what serving needs (EOS set, BOS rule, chat template).

Sources: GGUF metadata (`tokenizer.ggml.*`, byte-level BPE only), a Hugging Face
`tokenizer.json` (+ `tokenizer_config.json`), or a built-in byte tokenizer for tiny-random.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import tokenizers
from tokenizers import decoders, models, pre_tokenizers

from reference_engine.model.errors import ModelLoadError

# llama.cpp's end-of-generation heuristic: control tokens with these texts end a sequence even
# when metadata names only one EOS (SmolLM2's `eos` is <|im_end|>, but plain completions end
# with <|endoftext|>).
_EOG_TEXTS = frozenset(
    {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>"}
)
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# GGUF `tokenizer.ggml.pre` values whose pre-tokenizer is "each digit alone, then GPT-2's regex".
_DIGIT_SPLIT_PRE = frozenset({"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"})
_CONTROL, _USER_DEFINED = 3, 4


@dataclass(slots=True)
class Tokenizer:
    """Invariant: `decode(encode(text, add_special_tokens=False)) == text` for byte-level BPE.

    `add_bos` is applied by `encode` itself only for sources whose backend does not add BOS
    (GGUF); HF tokenizers add it in their own post-processor.
    """

    backend: tokenizers.Tokenizer
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None
    add_bos: bool = False
    chat_template: str | None = None
    _template: Any = field(default=None, init=False, repr=False)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        bos = self.bos_token_id
        if add_special_tokens and self.add_bos and bos is not None and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, tokenize: bool = False
    ) -> str | list[int]:
        """Render `messages` with the model's Jinja template, the way `transformers` does
        (sandboxed, trim_blocks + lstrip_blocks, `raise_exception`, `strftime_now`)."""
        if self.chat_template is None:
            raise ValueError("this model has no chat template; use the completions endpoint")
        if self._template is None:
            self._template = _compile_template(self.chat_template)
        special = {"bos_token": self._text(self.bos_token_id)}
        if self.eos_token_ids:
            special["eos_token"] = self._text(self.eos_token_ids[0])
        text = self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **special
        )
        # The template already carries BOS text when the model wants one; never add a second.
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def _text(self, token_id: int | None) -> str:
        return "" if token_id is None else (self.backend.id_to_token(token_id) or "")


def _compile_template(source: str):
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def _eog_ids(tokens: Sequence[str], control: Sequence[int], named: Sequence[int | None]) -> tuple[int, ...]:
    ids = [i for i in named if i is not None]
    ids += [i for i in control if tokens[i] in _EOG_TEXTS]
    return tuple(dict.fromkeys(ids))


def tokenizer_from_gguf(fields: dict[str, Any], source: str) -> Tokenizer:
    """Rebuild a byte-level BPE tokenizer from `tokenizer.ggml.*` metadata (llama.cpp "gpt2")."""
    kind = fields.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ModelLoadError(
            f"{source}: tokenizer model {kind!r} is not supported (only byte-level BPE 'gpt2')"
        )
    tokens: list[str] = list(fields.get("tokenizer.ggml.tokens") or [])
    merges = [tuple(m.split(" ", 1)) for m in fields.get("tokenizer.ggml.merges") or []]
    types = list(fields.get("tokenizer.ggml.token_type") or [1] * len(tokens))
    if not tokens or len(types) != len(tokens):
        raise ModelLoadError(f"{source}: tokenizer metadata is incomplete (tokens/token_type)")
    pre = fields.get("tokenizer.ggml.pre", "default")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _DIGIT_SPLIT_PRE:
        pre_tok = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in ("llama3", "llama-bpe"):
        split = pre_tokenizers.Split(tokenizers.Regex(_LLAMA3_REGEX), behavior="isolated")
        pre_tok = pre_tokenizers.Sequence(
            [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        )
    else:
        if pre not in ("default", "gpt-2", "gpt2"):
            warnings.warn(f"{source}: unknown pre-tokenizer {pre!r}; using GPT-2's", stacklevel=2)
        pre_tok = byte_level
    vocab = {tok: i for i, tok in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=merges, ignore_merges=pre in ("llama3", "llama-bpe"))
    backend = tokenizers.Tokenizer(bpe)
    backend.pre_tokenizer = pre_tok
    backend.decoder = decoders.ByteLevel()
    control = [i for i, t in enumerate(types) if t == _CONTROL]
    backend.add_special_tokens(
        [tokenizers.AddedToken(tokens[i], special=True, normalized=False) for i in control]
    )
    user = [tokens[i] for i, t in enumerate(types) if t == _USER_DEFINED]
    backend.add_tokens([tokenizers.AddedToken(t, normalized=False) for t in user])
    named = [fields.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
    return Tokenizer(
        backend=backend,
        eos_token_ids=_eog_ids(tokens, control, named),
        bos_token_id=fields.get("tokenizer.ggml.bos_token_id"),
        add_bos=bool(fields.get("tokenizer.ggml.add_bos_token", False)),
        chat_template=fields.get("tokenizer.chat_template"),
    )


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (the ByteLevel alphabet), byte order kept."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


BYTE_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def byte_tokenizer() -> Tokenizer:
    """Token id b < 256 is byte b; ids 256.. are `BYTE_SPECIAL_TOKENS`. No merges, no files."""
    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    for i, tok in enumerate(BYTE_SPECIAL_TOKENS):
        vocab[tok] = 256 + i
    backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [tokenizers.AddedToken(t, special=True, normalized=False) for t in BYTE_SPECIAL_TOKENS]
    )
    return Tokenizer(backend=backend, eos_token_ids=(256, 258), chat_template=CHATML_TEMPLATE)
