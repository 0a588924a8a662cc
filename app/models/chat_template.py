"""Render a conversation with the GGUF's own Jinja chat template (as transformers and llama.cpp's
--jinja do), so the model sees exactly the format it was trained on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Used only when a GGUF carries no template at all; ChatML is what most instruct models expect.
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class ChatTemplateError(ValueError):
    pass


def _raise(message: str) -> None:
    raise ChatTemplateError(message)


def render(template: str | None, messages: Sequence[dict[str, Any]], bos: str = "", eos: str = "",
           add_generation_prompt: bool = True, continue_final: bool = False) -> str:
    """The prompt text. `continue_final`: the last message is an assistant reply to go on with, so
    the text stops right after its content, without the end-of-turn the template closes it with
    (as transformers' continue_final_message)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loader=jinja2.BaseLoader())
    env.globals["raise_exception"] = _raise
    try:
        compiled = env.from_string(template or CHATML)
        text = compiled.render(
            messages=list(messages), bos_token=bos, eos_token=eos,
            add_generation_prompt=add_generation_prompt and not continue_final, tools=None,
        )
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"The model's chat template failed to render: {exc}") from exc
    if continue_final:
        final = str(messages[-1]["content"]) if messages else ""
        at = text.rfind(final) if final.strip() else -1
        if at < 0:
            raise ChatTemplateError("The chat template changes the reply's text, so it cannot be continued")
        text = text[: at + len(final)]
    return text
