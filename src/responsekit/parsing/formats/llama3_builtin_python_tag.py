"""`llama3_builtin_python_tag`: Llama 3.1/3.3 builtin tools after `<|python_tag|>`.

    <|python_tag|>brave_search.call(query="Menlo Park weather today")<|eom_id|>
    <|python_tag|>import math⏎print(math.sqrt(2))        (code_interpreter: raw Python)

A Llama 3 output holds builtin or custom (JSON) calls alike, so this is the Llama 3
parser (`llama3_json`) under the name the catalogue gives the builtin form.
"""

from __future__ import annotations

from responsekit.parsing.formats.llama3_json import Llama3JsonParser
from responsekit.parsing.registry import register


@register
class Llama3BuiltinPythonTagParser(Llama3JsonParser):
    """`NAME.call(k="v")` builtin calls and raw code, plus Llama 3's JSON calls."""

    name = "llama3_builtin_python_tag"
