"""The `openai` designer: the official OpenAI SDK, Chat Completions with a JSON schema.

`--llm-base-url` reaches any OpenAI-compatible server (vLLM, llama.cpp, Ollama, ...);
without a key in OPENAI_API_KEY a placeholder is sent to such a local server. Timeouts
and transport retries are the SDK's (`--llm-timeout`, `--llm-retries`).
"""

from __future__ import annotations

from typing import Any, Final

from pipeline_runner.designers.llm import (
    JsonClient,
    LLMDesigner,
    Message,
    ProviderError,
    designer_from_config,
)

DEFAULT_MODEL: Final = "gpt-4.1"


class OpenAIClient:
    def __init__(self, model: str, base_url: str | None, timeout_s: float, retries: int,
                 max_tokens: int) -> None:
        import openai

        self._openai = openai
        try:
            self._client = openai.OpenAI(base_url=base_url, timeout=timeout_s,
                                         max_retries=retries)
        except openai.OpenAIError:
            if base_url is None:
                raise ProviderError("openai: no API key (set OPENAI_API_KEY)") from None
            self._client = openai.OpenAI(api_key="unused-local", base_url=base_url,
                                         timeout=timeout_s, max_retries=retries)
        self.model, self.max_tokens, self.local = model, max_tokens, base_url is not None

    def complete_json(self, system: str, messages: list[Message], schema: dict[str, Any],
                      schema_name: str) -> str:
        omit = self._openai.omit
        conversation: list[Any] = [{"role": "system", "content": system}, *messages]
        try:
            reply = self._client.chat.completions.create(
                model=self.model, messages=conversation,
                response_format={"type": "json_schema", "json_schema": {
                    "name": schema_name, "schema": schema, "strict": True}},
                # Local OpenAI-compatible servers know max_tokens; OpenAI prefers the other.
                max_tokens=self.max_tokens if self.local else omit,
                max_completion_tokens=omit if self.local else self.max_tokens)
        except self._openai.APITimeoutError as exc:
            raise TimeoutError(f"openai: {exc}") from None
        except self._openai.APIError as exc:
            raise ProviderError(f"openai: {type(exc).__name__}: {exc}") from None
        if not reply.choices:
            raise ProviderError("openai: the answer has no choices")
        choice = reply.choices[0]
        if choice.message.refusal:
            raise ProviderError(f"openai: refused: {choice.message.refusal[:300]}")
        if choice.finish_reason == "length":
            return "{truncated: the answer hit the token limit"
        return choice.message.content or ""


def client_of(config: Any) -> JsonClient:
    return OpenAIClient(config.llm_model or DEFAULT_MODEL, config.llm_base_url,
                        config.llm_timeout / 1000, config.llm_retries, config.llm_max_tokens)


def from_config(config: Any = None) -> LLMDesigner:
    return designer_from_config("openai", client_of, config)
