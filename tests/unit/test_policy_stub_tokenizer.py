"""The stand-in's tokenizer and chat template."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from standin.chat_template import parse_transcript, render
from standin.tokenizer import EOS_ID, IM_START_ID, StubTokenizer

TOK = StubTokenizer()


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_round_trips(text: str) -> None:
    ids = TOK.encode(text)
    assert TOK.check_ids(ids) is None
    assert TOK.decode(ids) == text


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1))
def test_invalid_utf8_decodes_with_replacement(data: bytes) -> None:
    ids = [3 + b for b in data]  # byte tokens
    assert TOK.decode(ids) == data.decode("utf-8", errors="replace")


def test_merges_make_tokenization_context_dependent() -> None:
    a, b = '{"analy', 'sis": "x"}'
    assert TOK.decode(TOK.encode(a) + TOK.encode(b)) == a + b
    assert TOK.encode(a + b) != TOK.encode(a) + TOK.encode(b)
    assert len(TOK.encode('{"analysis": "')) == 1  # a protocol key is one token
    assert TOK.vocab_size > 259 + 300  # a few hundred merges on top of bytes and specials


def test_special_tokens_recognised_in_text() -> None:
    ids = TOK.encode("<|im_end|>\n<|im_start|>user\nhi")
    assert ids[0] == EOS_ID and ids[2] == IM_START_ID
    assert TOK.decode(ids) == "<|im_end|>\n<|im_start|>user\nhi"
    assert TOK.decode(ids, skip_special_tokens=True) == "\nuser\nhi"


def test_chat_template_is_qwen_style() -> None:
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert render(msgs, add_generation_prompt=True) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )
    assert render(msgs, add_generation_prompt=False).endswith("U<|im_end|>\n")


def test_transcript_parse_tolerates_truncated_turns() -> None:
    text = (
        '<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n{"cut'  # length: no <|im_end|>
        "<|im_start|>user\nerror<|im_end|>\n<|im_start|>assistant\n"
    )
    turns = parse_transcript(text)
    assert [(t.role, t.content) for t in turns] == [
        ("user", "U"),
        ("assistant", '{"cut'),
        ("user", "error"),
        ("assistant", ""),
    ]
    assert not turns[-1].closed
