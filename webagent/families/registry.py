"""The registered model families: the only place in the package where their names are spelled out.

Adding a family is one entry here (and its tests); the configuration, the CLI's choices, the
localizer profiles, the policy's contract, the offline model server and the benchmarks all read
this table. Each entry names the sources its contract was taken from; what could not be
established from them is said in the entry's comment and in docs/serving.md.

Families known and left out: **Holotron4-30B-A3B** (H Company, September 2026; Nemotron 3 Nano
Omni, served with ``trust_remote_code``): no public description of its request or reply format or
of its image processor was found, so it has no entry.
"""

from __future__ import annotations

from ..images import ResizeRule
from .contracts import LocalizerContract, ModelFamily, PolicyContract, Serving, ValidatorContext
from .processors import NemotronTiles, QwenPatches

__all__ = ["DEFAULT_PROFILE", "GENERIC_POLICY", "REGISTRY"]

#: Qwen2.5-VL's processor (14-px patches merged 2x2) at Holo1's and Holo1.5's pixel limits.
_QWEN25_HOLO1 = QwenPatches(ResizeRule(factor=28, min_pixels=3136, max_pixels=1_003_520))
_QWEN25 = QwenPatches(ResizeRule(factor=28, min_pixels=3136, max_pixels=12_845_056))
#: Qwen3-VL's processor (16-px patches merged 2x2). Qwen3.5/3.6's vision encoder has the same patch
#: and merge (Holo3's published conversions list patch 16); its pixel limits are taken to be
#: Qwen3-VL's (not checked against the processor's own configuration).
_QWEN3 = QwenPatches(ResizeRule(factor=32, min_pixels=65_536, max_pixels=16_777_216))

_HOLO2_NO_THINKING = {"chat_template_kwargs": {"thinking": False}}
#: H's agent loop: reasoning on in agent mode, "medium" effort (hub.hcompany.ai/agent-loop).
_AGENT_REASONING = {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "medium"}
#: H's single-shot calls (element localization, judging): thinking off (hub.hcompany.ai/element-localization).
_NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}

_HOLO1_SERVING = Serving(flags=())
#: Qwen3.5/3.6 hybrids (Gated DeltaNet + attention): prefix caching only in align mode, at
#: attention blocks of several hundred tokens (vLLM PR #30877; issues #40696, #47430).
_QWEN35_FLAGS = ("--reasoning-parser qwen3", "--enable-prefix-caching", "--mamba-cache-mode align")
_QWEN35_TOOL_FLAGS = (*_QWEN35_FLAGS, "--enable-auto-tool-choice", "--tool-call-parser qwen3_coder")
_QWEN35_BLOCKS = (1056, 2096)

#: H's agent-loop families run one conversation per task on one model: a validator that is the
#: policy's model at the policy's server judges the answer as that conversation's next turn, its
#: screenshots already in the server's prefix cache (docs/configuration.md weighs what it then sees).
_JUDGE: ValidatorContext = "conversation"

_H_AGENT_LOOP = "https://hub.hcompany.ai/agent-loop"
_H_LOCALIZATION = "https://hub.hcompany.ai/element-localization"
_H_MODELS = "https://hub.hcompany.ai/models"

REGISTRY: tuple[ModelFamily, ...] = (
    ModelFamily(
        name="holo1",
        label="Holo1",
        models=("Hcompany/Holo1-7B", "Hcompany/Holo1-3B"),
        match=("holo1",),
        images=_QWEN25_HOLO1,
        localizer=LocalizerContract("localizer_holo1.jinja", "click_text"),
        # Grounded: the policy's JSON carries the point in the localizer's convention (pixels).
        policy=PolicyContract("action", ("json",), "localizer", "append", point="pixels"),
        serving=_HOLO1_SERVING,
        sources=("https://huggingface.co/Hcompany/Holo1-7B",),
    ),
    ModelFamily(
        name="holo1.5",
        label="Holo1.5",
        models=("Hcompany/Holo1.5-7B", "Hcompany/Holo1.5-3B", "Hcompany/Holo1.5-72B"),
        match=("holo1.5", "holo1_5", "holo-1.5"),
        images=_QWEN25,
        localizer=LocalizerContract("localizer_holo1.5.jinja", "absolute_json"),
        policy=PolicyContract("action", ("json",), "localizer", "append", point="pixels"),
        serving=_HOLO1_SERVING,
        sources=("https://huggingface.co/Hcompany/Holo1.5-7B",),
    ),
    ModelFamily(
        name="holo2",
        label="Holo2",
        models=("Hcompany/Holo2-8B", "Hcompany/Holo2-4B", "Hcompany/Holo2-30B-A3B"),
        match=("holo2", "qwen3"),
        images=_QWEN3,
        localizer=LocalizerContract("localizer_holo2.jinja", "normalised_json"),
        policy=PolicyContract("action", ("json",), "localizer", "append", point="norm1000", fields=_HOLO2_NO_THINKING),
        single_fields=_HOLO2_NO_THINKING,
        serving=Serving(flags=("--default-chat-template-kwargs '{\"thinking\": false}'",)),
        sources=("https://huggingface.co/Hcompany/Holo2-8B",),
    ),
    ModelFamily(
        name="holotron",
        label="Holotron-12B",
        models=("Hcompany/Holotron-12B",),
        match=("holotron", "nemotron"),
        images=NemotronTiles(),
        localizer=None,  # no published localization prompt: a Holo localizer places its clicks
        policy=PolicyContract("action", ("json",), "localizer", "append", point=None),
        serving=Serving(
            flags=("--trust-remote-code", "--enable-prefix-caching", "--mamba-cache-mode align"),
            hybrid=True,
            align_blocks=(672,),
        ),
        sources=("https://huggingface.co/Hcompany/Holotron-12B",),
    ),
    ModelFamily(
        name="holo3",
        label="Holo3",
        models=("Hcompany/Holo3-35B-A3B",),
        match=("holo3", "qwen3.5"),
        images=_QWEN3,
        localizer=LocalizerContract("localizer_holo3.jinja", "normalised_json", "structured_outputs"),
        # Structured outputs only: "Native function calling ... Holo3 does not support it".
        policy=PolicyContract(
            "tool_call", ("json",), "policy", "history", "norm1000", _AGENT_REASONING, "structured_outputs", _JUDGE
        ),
        single_fields=_NO_THINKING,
        serving=Serving(flags=_QWEN35_FLAGS, hybrid=True, align_blocks=_QWEN35_BLOCKS),
        sources=("https://huggingface.co/Hcompany/Holo3-35B-A3B", _H_AGENT_LOOP, _H_LOCALIZATION),
    ),
    ModelFamily(
        name="holo3.1",
        label="Holo3.1",
        models=("Hcompany/Holo-3.1-35B-A3B", "Hcompany/Holo-3.1-35B-A3B-FP8"),
        match=("holo-3.1", "holo3.1", "holo3-1", "holo3_1", "qwen3.6"),
        images=_QWEN3,
        localizer=LocalizerContract("localizer_holo3.jinja", "normalised_json", "structured_outputs"),
        policy=PolicyContract(
            "tool_call",
            ("json", "tools"),
            "policy",
            "history",
            "norm1000",
            _AGENT_REASONING,
            "structured_outputs",
            _JUDGE,
        ),
        single_fields=_NO_THINKING,
        serving=Serving(flags=_QWEN35_TOOL_FLAGS, hybrid=True, align_blocks=_QWEN35_BLOCKS),
        sources=("https://huggingface.co/Hcompany/Holo-3.1-35B-A3B", _H_AGENT_LOOP, _H_LOCALIZATION, _H_MODELS),
    ),
    ModelFamily(
        name="holo4",
        label="Holo4",
        models=("Hcompany/Holo4-35B-A3B", "Hcompany/Holo4-27B"),
        match=("holo4", "holo-4"),
        images=_QWEN3,
        # H's localization page names Holo3 and Holo3.1 only: no localizer contract for Holo4.
        localizer=None,
        # H's Models API serves Holo4 with the same request fields and lists it as function
        # calling; its agent-loop page documents the JSON shape for Holo3/Holo3.1 only, so native
        # tool calls are the default and JSON is offered as on Holo3.1 (not documented for Holo4).
        policy=PolicyContract(
            "tool_call",
            ("tools", "json"),
            "policy",
            "history",
            "norm1000",
            _AGENT_REASONING,
            "structured_outputs",
            _JUDGE,
        ),
        single_fields=_NO_THINKING,
        serving=Serving(flags=_QWEN35_TOOL_FLAGS, hybrid=True, align_blocks=_QWEN35_BLOCKS),
        sources=("https://huggingface.co/collections/Hcompany/holo4", _H_MODELS, _H_AGENT_LOOP),
    ),
)

#: The localizer profile when none is set (``[localizer] profile``).
DEFAULT_PROFILE = "holo1.5"
#: The policy contract spoken when no family is set (``[policy] family``): webagent's JSON reply
#: under ``response_format``, clicks placed by the localizer, the append context, nothing added to
#: the requests; what any OpenAI-compatible server understands.
GENERIC_POLICY = PolicyContract("action", ("json",), "localizer", "append", point=None)
