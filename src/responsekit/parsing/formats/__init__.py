"""One module per output format; importing this package registers them all.

To add a format, add its module here (see docs/parsing.md).
"""

from responsekit.parsing.formats import (  # noqa: F401  (imported to register)
    apertus,
    command_r7b,
    deepseek_r1,
    deepseek_v3_1,
    deepseek_v3_2_dsml,
    firefunction_v2,
    functionary_v3_1,
    functionary_v3_2,
    functiongemma,
    gemma4,
    generic_json,
    glm_4_5,
    glm_4_7,
    gpt_oss_harmony,
    granite_3,
    hermes_json,
    kimi_k2,
    lfm2_pythonic,
    llama3_builtin_python_tag,
    llama3_json,
    llama4_pythonic,
    minimax_m2,
    mistral_args,
    mistral_json_array,
    nemotron_toolcall,
    olmo3_pythonic,
    phi4_mini,
    pythonic,
    qwen3_coder_xml,
    seed_oss,
    think_tags,
    xlam,
)
