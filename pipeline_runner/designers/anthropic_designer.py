"""The `anthropic` designer: Claude through the official Anthropic SDK.

Structured output via `output_config.format` (JSON schema). `--llm-base-url` points the
SDK elsewhere (e.g. a proxy); the key comes from the SDK's own ANTHROPIC_API_KEY.
Timeouts and transport retries are the SDK's (`--llm-timeout`, `--llm-retries`).
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

DEFAULT_MODEL: Final = "claude-sonnet-4-5"


class AnthropicClient:
    def __init__(self, model: str, base_url: str | None, timeout_s: float, retries: int,
                 max_tokens: int) -> None:
        import anthropic

        self._anthropic = anthropic
        self._client = anthropic.Anthropic(base_url=base_url, timeout=timeout_s,
                                           max_retries=retries)
        self.model, self.max_tokens = model, max_tokens

    def complete_json(self, system: str, messages: list[Message], schema: dict[str, Any],
                      schema_name: str) -> str:
        conversation: list[Any] = list(messages)
        try:
            reply = self._client.messages.create(
                model=self.model, max_tokens=self.max_tokens, system=system,
                messages=conversation,
                output_config={"format": {"type": "json_schema", "schema": schema}})
        except self._anthropic.APITimeoutError as exc:
            raise TimeoutError(f"anthropic: {exc}") from None
        except self._anthropic.APIError as exc:
            raise ProviderError(f"anthropic: {type(exc).__name__}: {exc}") from None
        if reply.stop_reason == "max_tokens":
            return "{truncated: the answer hit max_tokens"
        return "".join(getattr(block, "text", "") for block in reply.content)


def client_of(config: Any) -> JsonClient:
    return AnthropicClient(config.llm_model or DEFAULT_MODEL, config.llm_base_url,
                           config.llm_timeout / 1000, config.llm_retries, config.llm_max_tokens)


def from_config(config: Any = None) -> LLMDesigner:
    return designer_from_config("anthropic", client_of, config)
