"""Request bodies as OpenAI defines them, validated by pydantic: a wrong type or value becomes a 400 that names the
field (api.py turns pydantic's errors into OpenAI's shape). Unknown fields are ignored, as OpenAI-compatible local
servers do (clients send vendor extensions); known fields SpecChat cannot honour are refused by name
(`ChatRequest.refuse_unsupported`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.server.errors import ApiError, bad_value, unsupported

MAX_STOP = 4  # OpenAI's limit on stop sequences


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


Content = str | list[TextPart]


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Content | None = None
    name: str | None = None


class Prediction(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["content"]
    content: Content


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str


Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]


class _Sampled(BaseModel):
    """Fields both endpoints share. Sampling fields left out take the target model's recommended values (as the
    window's chats do); llama.cpp's own extensions (top_k, min_p, repeat_penalty) are accepted too."""

    model_config = ConfigDict(extra="ignore")
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    min_p: Annotated[float, Field(ge=0.0, lt=1.0)] | None = None
    repeat_penalty: Annotated[float, Field(gt=0.0)] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    n: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | int | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # llama-server's extension: false processes the whole prompt, reusing no cached prefix (benchmarks compare
    # prefill as well as decoding this way; bench-serve sends it to both servers)
    cache_prompt: bool = True

    def stops(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > MAX_STOP:
            raise bad_value("stop", f"At most {MAX_STOP} stop sequences are allowed, got {len(stops)}.")
        if any(s == "" for s in stops):
            raise bad_value("stop", "A stop sequence must not be empty.")
        return tuple(stops)

    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    def refuse_unsupported(self) -> None:
        if self.n not in (None, 1):
            raise unsupported("n", "more than one choice per request")
        if self.logprobs not in (None, False, 0):
            raise unsupported("logprobs", "returning log probabilities")
        if self.logit_bias:
            raise unsupported("logit_bias", "a logit bias")


class ChatRequest(_Sampled):
    messages: Annotated[list[Message], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    prediction: Prediction | None = None
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    response_format: ResponseFormat | None = None
    top_logprobs: int | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.tools:
            raise unsupported("tools", "tool calling")
        if self.functions:
            raise unsupported("functions", "function calling")
        if self.response_format is not None and self.response_format.type != "text":
            raise unsupported("response_format", f"response_format {self.response_format.type!r}")
        if self.top_logprobs:
            raise unsupported("top_logprobs", "returning log probabilities")

    def limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def chat_messages(self) -> list[dict[str, str]]:
        """The messages as the chat template takes them ("developer" is OpenAI's newer name for "system")."""
        out: list[dict[str, str]] = []
        for i, m in enumerate(self.messages):
            if m.role in ("tool", "function"):
                raise unsupported(f"messages[{i}].role", f"a {m.role!r} message (tool calling)")
            role = "system" if m.role == "developer" else m.role
            out.append({"role": role, "content": text_of(m.content, f"messages[{i}].content")})
        if out[-1]["role"] == "system":
            raise bad_value("messages", "The last message is a system message: there is nothing to answer.")
        return out

    def prediction_text(self) -> str | None:
        if self.prediction is None:
            return None
        return text_of(self.prediction.content, "prediction.content")


class CompletionRequest(_Sampled):
    prompt: str | list[str]
    max_tokens: Annotated[int, Field(ge=1)] | None = 16  # OpenAI's default for completions
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.echo:
            raise unsupported("echo", "echoing the prompt")
        if self.suffix:
            raise unsupported("suffix", "a suffix (fill in the middle)")
        if self.best_of not in (None, 1):
            raise unsupported("best_of", "best_of")

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise unsupported("prompt", "a batch of prompts (send one request per prompt)")
        return self.prompt[0]


def text_of(content: Content | None, param: str) -> str:
    """A message's text: a string, or text parts joined; other parts (images, audio) are refused by name."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise ApiError(400, f"'{param}[{j}]': content of type {part.type!r} is not supported; only text.",
                           f"{param}[{j}].type", "unsupported_content")
        texts.append(part.text)
    return "".join(texts)
