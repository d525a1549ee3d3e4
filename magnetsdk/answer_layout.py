"""The token layout of an answer: the retrieved chunks are the context, the question follows them.

An answer is laid out as one sequence, the same way for both attention modes::

    [BOS] chunk 1 \\n\\n chunk 2 \\n\\n ... chunk k  |  \\n\\n Question: ... \\n Answer:  a1 a2 ...
    context                                    |  span block (prompt, then the generated answer)
    0 ...                                  C-1 |  C ...

Position ids count real tokens, so the span block continues at ``C`` (the rule of
:mod:`magnetsdk.layout`). With a chat template (``chat``), the context opens with the template's
head and the prompt closes the user turn and opens the assistant's; the split between context and
span block is the same. :mod:`magnetsdk.answering` decodes the answer after this layout.
"""

from __future__ import annotations

DEFAULT_TEMPLATE = "Question: {question}\nAnswer:"
# Under a chat template the assistant's turn follows, so the prompt asks for the answer's form instead.
CHAT_TEMPLATE = "Question: {question}\nAnswer in a few words, copied from the text."
PASSAGE_SEPARATOR = "\n\n"


def lay_out_answer(
    tokenizer,
    prefix: list[int],
    passages: list[str],
    question: str,
    template: str = DEFAULT_TEMPLATE,
    chat: bool = False,
) -> tuple[list[int], list[int]]:
    """The context ids (prefix + passages) and the prompt ids (separator + filled template).

    ``chat=True`` wraps both in the tokenizer's chat template as one user message: the context
    then starts with the template's head (system prompt, user turn) instead of ``prefix``, and the
    prompt ends with the end of the turn and the assistant's opening.
    """
    passages_text = PASSAGE_SEPARATOR.join(passages)
    tail = ""
    if chat:
        head, tail = _chat_frame(tokenizer)
        context = tokenizer(head + passages_text, add_special_tokens=False)["input_ids"]
    else:
        context = list(prefix) + tokenizer(passages_text, add_special_tokens=False)["input_ids"]
    prompt_text = PASSAGE_SEPARATOR + template.format(question=question) + tail
    return context, tokenizer(prompt_text, add_special_tokens=False)["input_ids"]


# A private-use character marks where the user's message goes when the chat template is rendered.
_CONTENT = "\ue000"


def _chat_frame(tokenizer) -> tuple[str, str]:
    """The chat template's text before and after a user message's content."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat=True, but this tokenizer has no chat template; pass chat=False")
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": _CONTENT}], add_generation_prompt=True, tokenize=False
    )
    if rendered.count(_CONTENT) != 1:
        raise ValueError(
            "this tokenizer's chat template does not place the user message once; pass chat=False"
        )
    head, tail = rendered.split(_CONTENT)
    return head, tail


def framing(tokenizer, chat: bool | None = None, template: str | None = None) -> tuple[bool, str]:
    """Whether the chat template frames the answer (``None``: when the tokenizer has one), and the
    prompt template (``None``: the default for that framing)."""
    if chat is None:
        chat = bool(getattr(tokenizer, "chat_template", None))
    return chat, template or (CHAT_TEMPLATE if chat else DEFAULT_TEMPLATE)
