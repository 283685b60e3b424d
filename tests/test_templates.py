"""Chat templates: every catalogued template renders the reference conversation (or refuses
it with its own message), Hugging Face conventions hold, and template code stays sandboxed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from responsekit.canonical.conversation import (
    FunctionTool,
    GenerationRequest,
    Message,
    TextPart,
    ToolCall,
)
from responsekit.parsing import get_parser
from responsekit.prompting.grammars import integer_range
from responsekit.prompting.templates import (
    ChatTemplate,
    TemplateError,
    from_tokenizer_config,
    load_template,
)

TEMPLATES = sorted((Path(__file__).parent / "data" / "formats" / "templates").glob("*.jinja"))

REFUSING = {
    "Mistral-Small-3.2-24B-Instruct-2506": "roles must alternate user/assistant",
    "mistralai-Mistral-Nemo-Instruct-2407": "roles must alternate user/assistant",
    "mistralai-Ministral-3-14B-Reasoning-2512": "roles must alternate user and assistant",
    "google-gemma-2-2b-it": "System role not supported",
    "meta-llama-Llama-3.1-8B-Instruct": "only supports single tool-calls",
    "meta-llama-Llama-3.2-3B-Instruct": "only supports single tool-calls",
    "meta-llama-Llama-3.3-70B-Instruct": "only supports single tool-calls",
}
"""Templates whose own `raise_exception` refuses the reference conversation: Mistral's
want an assistant answer between tool results and the next user turn, Gemma 2 has no
system role, Llama 3.x takes one call per turn."""

NO_TOOL_HISTORY = {"llama-cpp-rwkv-world", "microsoft-Phi-3.5-mini-instruct"}
"""Templates without tool support: they leave tool results out."""

WEATHER = FunctionTool(
    "get_weather",
    "The weather of a city",
    {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]},
)


def conversation() -> GenerationRequest:
    """A system message, a user turn, an assistant turn with reasoning and two tool calls,
    two tool results and a new user turn."""
    return GenerationRequest(
        model="m",
        messages=[
            Message("system", [TextPart("You are a weather assistant.")]),
            Message("user", [TextPart("Weather in Paris and Rome?")]),
            Message("assistant", [], reasoning="I should look both up.", tool_calls=[
                ToolCall("call_1", "get_weather", '{"city": "Paris"}'),
                ToolCall("call_2", "get_weather", '{"city": "Rome", "days": 2}'),
            ]),
            Message("tool", [TextPart("18 degrees")], tool_call_id="call_1"),
            Message("tool", [TextPart("21 degrees")], tool_call_id="call_2"),
            Message("user", [TextPart("Thanks! And tomorrow?")]),
        ],
        tools=[WEATHER],
    )  # fmt: skip


@pytest.mark.parametrize("path", TEMPLATES, ids=[path.stem for path in TEMPLATES])
def test_every_template_renders_the_reference_conversation(path: Path) -> None:
    template = ChatTemplate(path.read_text(), bos_token="<s>", eos_token="</s>")
    if path.stem in REFUSING:
        with pytest.raises(TemplateError) as refused:
            template.render_request(conversation())
        assert REFUSING[path.stem] in str(refused.value)
        return
    prompt = template.render_request(conversation())
    for text in ("Weather in Paris and Rome?", "Thanks! And tomorrow?", "Paris", "Rome"):
        assert text in prompt, f"{text!r} missing"
    if path.stem not in NO_TOOL_HISTORY:
        assert "18 degrees" in prompt and "21 degrees" in prompt
    assert "{'city': 'Paris'" not in prompt, "arguments printed as a Python dict"


def test_the_refusals_are_the_templates_own_messages() -> None:
    refused = set()
    for path in TEMPLATES:
        try:
            ChatTemplate(path.read_text()).render_request(conversation())
        except TemplateError:
            refused.add(path.stem)
    assert refused == set(REFUSING)


def test_arguments_are_objects_unless_the_template_concatenates_text() -> None:
    templates = {path.stem: ChatTemplate(path.read_text()) for path in TEMPLATES}
    assert templates["meetkai-functionary-medium-v3.2"].text_arguments  # '>>>' + name + '\n' + arguments
    assert not templates["Qwen3-Coder"].text_arguments  # iterates arguments|items
    prompt = templates["meetkai-functionary-medium-v3.2"].render_request(conversation())
    assert '>>>get_weather\n{"city": "Rome", "days": 2}' in prompt
    coder = templates["Qwen3-Coder"].render_request(conversation())
    assert "<parameter=days>\n2\n</parameter>" in coder


def render(source: str, **variables: object) -> str:
    return ChatTemplate(source, bos_token="<s>", eos_token="</s>").render([], **variables)  # type: ignore[arg-type]


def test_tojson_takes_the_hugging_face_options() -> None:
    value = {"b": "é<", "a": [1, 2]}
    assert render("{{ v | tojson }}", v=value) == '{"b": "é<", "a": [1, 2]}'  # no HTML escaping
    assert render("{{ v | tojson(ensure_ascii=True) }}", v=value) == '{"b": "\\u00e9<", "a": [1, 2]}'
    assert render("{{ v | tojson(sort_keys=True) }}", v=value) == '{"a": [1, 2], "b": "é<"}'
    assert render("{{ v | tojson(separators=(',', ':')) }}", v=value) == '{"b":"é<","a":[1,2]}'
    assert render("{{ v | tojson(indent=2) }}", v={"a": 1}) == '{\n  "a": 1\n}'
    assert render("{{ v | map(attribute='x') | tojson }}", v=[{"x": 1}, {"x": 2}]) == "[1, 2]"


def test_globals_loop_controls_and_namespace() -> None:
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", render("{{ strftime_now('%Y-%m-%d') }}"))
    assert render("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}") == "<s>|</s>|True"
    loops = "{% for i in range(9) %}{% if i == 1 %}{% continue %}{% endif %}{% if i > 3 %}{% break %}{% endif %}{{ i }}{% endfor %}"
    assert render(loops) == "023"
    assert render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}") == "3"
    assert render("{% generation %}kept{% endgeneration %}") == "kept"
    assert render("{{ 'a' + missing }}") == "a"  # a missing value concatenates as nothing


def test_raise_exception_carries_the_template_message() -> None:
    with pytest.raises(TemplateError, match="^Only user and assistant roles are supported!$"):
        render("{{ raise_exception('Only user and assistant roles are supported!') }}")
    with pytest.raises(TemplateError, match="does not parse"):
        render("{% if %}")


@pytest.mark.parametrize(
    "payload",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__.os.system('touch PWNED') }}",
        "{{ joiner.__init__.__globals__['os'].popen('id').read() }}",
        "{{ lipsum.__globals__['os'].system('touch PWNED') }}",
        "{{ namespace.__init__.__globals__ }}",
        "{{ raise_exception.__globals__['json'] }}",
        "{{ messages.__class__.__base__.__subclasses__() }}",
        "{{ range.__self__.__import__('os').system('touch PWNED') }}",
        "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
        "{{ self.__init__.__globals__ }}",
        "{{ 'x' * 100000000000 }}",
        "{{ 9 ** 9 ** 9 ** 9 }}",
        "{% for i in range(10**12) %}{% endfor %}",
    ],
)
def test_template_injection_fails_harmlessly(payload: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        output = render(payload)
    except TemplateError:
        output = ""
    assert not (tmp_path / "PWNED").exists()
    for leak in ("<class", "<module", "<built-in", "<function", "uid="):
        assert leak not in output


def test_thinking_left_open_by_the_prompt_is_read_from_it() -> None:
    request = GenerationRequest("m", [Message("user", [TextPart("hi")])], reasoning_effort="medium")
    hermes = get_parser("hermes_json")
    qwq = ChatTemplate((TEMPLATES[0].parent / "Qwen-QwQ-32B.jinja").read_text())
    assert hermes.thinking_open_in(qwq.render_request(request))  # ends with "<think>\n"
    coder = get_parser("qwen3_coder_xml")
    qwen35 = ChatTemplate((TEMPLATES[0].parent / "Qwen3.5-4B.jinja").read_text())
    assert coder.thinking_open_in(qwen35.render_request(request))
    request.reasoning_effort = None
    qwen3 = ChatTemplate((TEMPLATES[0].parent / "Qwen-Qwen3-0.6B.jinja").read_text())
    assert not hermes.thinking_open_in(qwen3.render_request(request))
    request.reasoning_effort = "none"  # enable_thinking=false: the template closes an empty block
    assert "<think>\n\n</think>" in qwen3.render_request(request)
    request.reasoning_effort = "high"
    harmony = ChatTemplate((TEMPLATES[0].parent / "openai-gpt-oss-120b.jinja").read_text())
    assert "Reasoning: high" in harmony.render_request(request)


def test_stop_texts_come_from_the_template_and_tokenizer() -> None:
    chatml = ChatTemplate((TEMPLATES[0].parent / "Qwen-Qwen3-0.6B.jinja").read_text(), eos_token="<|endoftext|>")
    assert chatml.stops == ("<|endoftext|>", "<|im_end|>")
    harmony = ChatTemplate((TEMPLATES[0].parent / "openai-gpt-oss-120b.jinja").read_text(), eos_token="<|return|>")
    assert harmony.stops == ("<|return|>", "<|call|>")  # <|end|> separates its channels
    llama = ChatTemplate((TEMPLATES[0].parent / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text())
    assert set(llama.stops) == {"<|eot_id|>", "<|eom_id|>"}


def test_templates_load_from_tokenizer_config_and_files(tmp_path: Path) -> None:
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({
        "chat_template": [{"name": "default", "template": "plain"}, {"name": "tool_use", "template": "tools"}],
        "bos_token": {"content": "<|begin|>"}, "eos_token": "<|end|>",
    }))  # fmt: skip
    template = from_tokenizer_config(config)
    assert (template.source, template.bos_token, template.eos_token) == ("tools", "<|begin|>", "<|end|>")
    assert load_template(config).source == "tools"
    jinja = tmp_path / "chat.jinja"
    jinja.write_text("{{ messages[0].content }}")
    assert load_template(jinja).render([{"role": "user", "content": "hello"}]) == "hello"
    with pytest.raises(TemplateError, match="not found"):
        load_template(tmp_path / "missing.jinja")


def test_images_are_refused_for_a_text_model() -> None:
    from responsekit.canonical.conversation import ImagePart

    request = GenerationRequest("m", [Message("user", [TextPart("look"), ImagePart("data:image/png;base64,AA==")])])
    with pytest.raises(TemplateError, match="text only"):
        ChatTemplate("{{ messages }}").render_request(request)


@pytest.mark.parametrize(("low", "high"), [(0, 0), (1, 14), (-5, 300), (-1234, -17), (7, 100000), (None, 42),
                                           (-3, None), (123, None), (None, -999), (99, 1000), (0, 9)])  # fmt: skip
def test_bounded_integer_rules_match_exactly_the_range(low: int | None, high: int | None) -> None:
    def regex(atoms: list[str]) -> str:
        return "".join(re.escape(json.loads(atom)) if atom.startswith('"') else atom for atom in atoms)

    pattern = re.compile("|".join(f"(?:{regex(atoms)})" for atoms in integer_range(low, high)))
    centre = [low if low is not None else -2000, high if high is not None else 2000]
    for number in range(min(centre) - 1500, max(centre) + 1500):
        inside = (low is None or number >= low) and (high is None or number <= high)
        assert bool(pattern.fullmatch(str(number))) == inside, number
    assert not pattern.fullmatch("-0") and not pattern.fullmatch("007")
