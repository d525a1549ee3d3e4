"""What encode, infill and generate refuse, and how: the leaf checks and their use in ``Magnet``."""

from __future__ import annotations

import math
import time

import pytest

from magnetsdk.checks import check_max_length, check_temperature, check_texts, truncate_prompts
from magnetsdk.testing import tiny_tokenizer


def test_check_texts_accepts_a_string_or_a_list_of_strings():
    assert check_texts("one") == ["one"]
    assert check_texts(("a", "b")) == ["a", "b"]
    assert check_texts([]) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "texts is None"),
        (b"raw", "texts is bytes; decode it"),
        (["ok", None], r"texts\[1\] is NoneType None, expected a string"),
        (["ok", b"raw"], r"texts\[1\] is bytes; decode it to a string first"),
        ([1.5], r"texts\[0\] is float"),
        (3, "must be a string or a list of strings, not int"),
        ({"text": "x"}, "not dict"),
    ],
)
def test_check_texts_names_the_bad_item(value, message):
    with pytest.raises(TypeError, match=message):
        check_texts(value)


def test_check_temperature_and_max_length():
    assert check_temperature(0) == 0.0 and check_temperature(0.7) == 0.7
    for bad in (math.nan, math.inf, -0.1):
        with pytest.raises(ValueError, match="finite number >= 0"):
            check_temperature(bad)
    with pytest.raises(TypeError):
        check_temperature("hot")
    assert check_max_length(None) is None and check_max_length(64) == 64
    with pytest.raises(ValueError, match="max_length=0 must be at least 8 tokens"):
        check_max_length(0)
    with pytest.raises(TypeError):
        check_max_length(True)


def test_truncate_prompts_keeps_the_end_and_warns():
    tokenizer = tiny_tokenizer()
    long = "the cat sat on the mat " * 200
    with pytest.warns(UserWarning, match="1 of 2 prompts are longer than 20 tokens"):
        short, cut = truncate_prompts(["the cat", long], tokenizer, 20)
    assert short == "the cat"
    assert len(tokenizer(cut, add_special_tokens=False)["input_ids"]) <= 21 and long.rstrip().endswith(
        cut.strip()
    )


def test_magnet_refuses_bad_texts_and_settings(llama_magnet):
    for call in (
        lambda: llama_magnet.encode(["a", None]),
        lambda: llama_magnet.encode(b"bytes"),
        lambda: llama_magnet.infill(["The [GAP] sat.", b"x [GAP]"]),
        lambda: llama_magnet.generate(["Once", None]),
    ):
        with pytest.raises(TypeError, match=r"(texts|text|prompt)(\[1\])? is (bytes|NoneType)"):
            call()
    with pytest.raises(ValueError, match="temperature=nan"):
        llama_magnet.generate("Once", temperature=math.nan)
    with pytest.raises(ValueError, match="temperature=nan"):
        llama_magnet.infill("The [GAP] sat.", temperature=math.nan)
    with pytest.raises(ValueError, match="max_length=0 must be at least 8"):
        llama_magnet.encode("text", max_length=0)


def test_a_very_long_prompt_is_truncated_with_a_warning(llama_magnet):
    prompt = "the cat sat on the mat " * 400  # ~2,400 tokens: beyond the tiny model's 1024 positions
    started = time.perf_counter()
    with pytest.warns(UserWarning, match="longer than"):
        out = llama_magnet.generate(prompt, max_new_tokens=2, temperature=0)
    assert isinstance(out, str) and time.perf_counter() - started < 60
