"""Pydantic models of the vLLM (0.32) OpenAI-compatible HTTP requests and responses we use.

One module, one definition: the policy client validates what vLLM answers with these models, and
the stand-in server (standin/) builds its answers from the same models, so the two can
never drift apart. Field names and nesting follow the recordings in shared/vllm-wire/ exactly.

Response models accept unknown extra fields (a newer vLLM may add some; we must not break), while
the stand-in server's request models reject badly typed known fields with a 400, as vLLM does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# cache_salt: vLLM 0.32 rejects salts over 128 characters or containing these characters.
CACHE_SALT_MAX_LEN = 128
CACHE_SALT_FORBIDDEN = ("@", "/", "\\", "\x00")


def cache_salt_problem(salt: str) -> str | None:
    """Why `salt` would be rejected by vLLM, or None when it is acceptable."""
    if not salt:
        return "Parameter 'cache_salt' must be a non-empty string if provided."
    if len(salt) > CACHE_SALT_MAX_LEN:
        return f"Parameter 'cache_salt' must be at most {CACHE_SALT_MAX_LEN} characters."
    if any(c in salt for c in CACHE_SALT_FORBIDDEN):
        return "Parameter 'cache_salt' must not contain '@', '/', '\\' or NUL."
    return None


class _Response(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Request(BaseModel):
    # vLLM accepts (and ignores with a warning) fields it does not know.
    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------- errors


class ErrorInfo(_Response):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(_Response):
    error: ErrorInfo


# ---------------------------------------------------------------- /v1/models


class ModelPermission(_Response):
    id: str
    object: Literal["model_permission"] = "model_permission"
    created: int
    allow_create_engine: bool = False
    allow_sampling: bool = True
    allow_logprobs: bool = True
    allow_search_indices: bool = False
    allow_view: bool = True
    allow_fine_tuning: bool = False
    organization: str = "*"
    group: str | None = None
    is_blocking: bool = False


class ModelCard(_Response):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "vllm"
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None
    permission: list[ModelPermission] = Field(default_factory=list)


class ModelList(_Response):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# ---------------------------------------------------------------- /tokenize, /detokenize


class ChatMessage(BaseModel):
    role: str
    content: str


class TokenizeRequest(_Request):
    """Either `messages` (chat template applied) or `prompt` (raw text), as vLLM accepts both."""

    model: str | None = None
    messages: list[ChatMessage] | None = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None  # e.g. {"enable_thinking": false}
    tools: list[dict[str, Any]] | None = None  # rendered by the chat template (tool calling)
    prompt: str | None = None
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeResponse(_Response):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(_Request):
    model: str | None = None
    tokens: list[int]


class DetokenizeResponse(_Response):
    prompt: str


# ---------------------------------------------------------------- /v1/completions


# The sampling fields of a completion request that the policy client always sends: left out,
# vLLM fills them from its defaults, or from the model's generation_config.json when the server
# runs without `--generation-config vllm` (Qwen3: top_k 20, top_p 0.95, temperature 0.6), and the
# tokens would be sampled from a distribution other than the one the trajectory records. `seed`
# is sent too whenever one is given.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "max_tokens",
    "min_tokens",
    "stop",
    "ignore_eos",
)


class CompletionRequest(_Request):
    """The fields of vLLM's CompletionRequest that token-in/token-out RL uses. None: not sent
    (vLLM then applies its default)."""

    model: str | None = None
    prompt: list[int]  # token ids; we never send text prompts
    n: int = Field(default=1, ge=1)
    seed: int | None = None
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = None  # -1 or 0 disables, as in vLLM
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    max_tokens: int | None = Field(default=16, ge=1)
    min_tokens: int = Field(default=0, ge=0)
    ignore_eos: bool = False
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    logprobs: int | None = Field(default=None, ge=0)
    return_token_ids: bool | None = False
    return_tokens_as_token_ids: bool | None = False
    cache_salt: str | None = None
    logit_bias: dict[str, float] | None = None

    @field_validator("top_k")
    @classmethod
    def _top_k_range(cls, v: int | None) -> int | None:
        if v is not None and v < -1:
            raise ValueError("top_k must be -1 (disable), or at least 1")
        return v

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class CompletionLogprobs(_Response):
    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class CompletionChoice(_Response):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    prompt_logprobs: list[dict[str, Any] | None] | None = None
    prompt_token_ids: list[int] | None = None
    routed_experts: Any = None


class UsageInfo(_Response):
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: dict[str, Any] | None = None
    completion_tokens_details: dict[str, Any] | None = None


class CompletionResponse(_Response):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    service_tier: str | None = None
    system_fingerprint: str | None = None
    usage: UsageInfo
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    metrics: Any = None


# ---------------------------------------------------------------- /v1/chat/completions
# Not used for generation (we are token-in/token-out), modelled so the recordings all parse.


class ChatLogprobEntry(_Response):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[dict[str, Any]] = Field(default_factory=list)


class ChatLogprobs(_Response):
    content: list[ChatLogprobEntry] | None = None


class ChatResponseMessage(_Response):
    role: str
    content: str | None = None


class ChatChoice(_Response):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None


class ChatCompletionResponse(_Response):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    prompt_token_ids: list[int] | None = None


# ---------------------------------------------------------------- /inference/v1/generate
# Token-in/token-out with `--enable-scale-out` (403 without it). The one route that reports which
# weights produced which output tokens: `weight_versions`, contiguous spans of output indexes per
# engine weight version (the string set by /update_weight_version, "default" before any).


class GenerateSamplingParams(_Request):
    """vLLM's SamplingParams as the generate route takes them (a subset: what we send)."""

    n: int = Field(default=1, ge=1)
    seed: int | None = None
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int = -1
    min_p: float = Field(default=0.0, ge=0, le=1)
    repetition_penalty: float = Field(default=1.0, gt=0)
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    max_tokens: int | None = Field(default=16, ge=1)
    min_tokens: int = Field(default=0, ge=0)
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    logprobs: int | None = Field(default=None, ge=0)
    prompt_logprobs: int | None = Field(default=None, ge=0)
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True

    @field_validator("top_k")
    @classmethod
    def _top_k_range(cls, v: int) -> int:
        if v < -1:
            raise ValueError("top_k must be -1 (disable), or at least 1")
        return v


class GenerateRequest(_Request):
    model: str | None = None
    token_ids: list[int] = Field(min_length=1)
    sampling_params: GenerateSamplingParams
    output_mode: Literal["tokens", "text"] = "tokens"
    return_token_ids: bool | None = None
    cache_salt: str | None = None


class WeightVersionSpan(_Response):
    version: str
    start: int
    end: int


class GenerateTopLogprob(_Response):
    """In text mode a token string and its bytes; in tokens mode a token id."""

    logprob: float
    token: str | None = None
    token_id: int | None = None
    bytes: list[int] | None = None


class GenerateLogprobEntry(GenerateTopLogprob):
    top_logprobs: list[GenerateTopLogprob] = Field(default_factory=list)


class GenerateLogprobs(_Response):
    content: list[GenerateLogprobEntry] | None = None


class GenerateChoice(_Response):
    index: int
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    text: str | None = None  # output_mode "text" only
    logprobs: GenerateLogprobs | None = None
    weight_versions: list[WeightVersionSpan] | None = None
    routed_experts: Any = None
    sampling_mask: Any = None


class GenerateResponse(_Response):
    request_id: str
    model: str | None = None
    created: int | None = None
    output_mode: Literal["tokens", "text"] = "tokens"
    choices: list[GenerateChoice]
    usage: UsageInfo | None = None
    prompt_logprobs: list[dict[str, Any] | None] | None = None
    prompt_token_ids: list[int] | None = None
    prompt_token_id_logprobs: str | None = None
    mm_placeholders: Any = None
    metrics: Any = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None


# ---------------------------------------------------------------- dev-mode control endpoints
# (VLLM_SERVER_DEV_MODE=1). /pause answers once the engine is paused: `keep` freezes running
# requests (with the default clear_cache they are recomputed on /resume and the prefix cache is
# emptied), `abort` ends them with finish_reason "abort" and their partial output, `wait` drains.

PAUSE_MODES = ("keep", "abort", "wait")


class StatusResponse(_Response):
    """POST /pause and /resume."""

    status: str


class IsPausedResponse(_Response):
    is_paused: bool


class ResetPrefixCacheResponse(_Response):
    success: bool


class CollectiveRpcRequest(_Request):
    """POST /collective_rpc: a worker method, e.g. reload_weights(weights_path=DIR)."""

    method: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    args: list[Any] = Field(default_factory=list)
    timeout: float | None = None


class CollectiveRpcResponse(_Response):
    results: list[Any]


class UpdateWeightVersionRequest(_Request):
    new_version: str


class UpdateWeightVersionResponse(_Response):
    success: bool
    new_version: str


class WeightInfoResponse(_Response):
    weight_version: str | None = None


class LoadLoraAdapterRequest(_Request):
    """POST /v1/load_lora_adapter (VLLM_ALLOW_RUNTIME_LORA_UPDATING=1); the answer is plain
    text. `load_inplace` replaces the weights of an adapter already loaded under the name."""

    lora_name: str
    lora_path: str
    load_inplace: bool = False


class UnloadLoraAdapterRequest(_Request):
    lora_name: str
