"""One module per output format; importing this package registers them all.

To add a format, add its module here (see docs/parsing.md).
"""

from responsekit.parsing.formats import (  # noqa: F401  (imported to register)
    deepseek_r1,
    deepseek_v3_1,
    deepseek_v3_2_dsml,
    functiongemma,
    gemma4,
    glm_4_5,
    glm_4_7,
    gpt_oss_harmony,
    hermes_json,
    kimi_k2,
    minimax_m2,
    mistral_args,
    mistral_json_array,
    qwen3_coder_xml,
    seed_oss,
    think_tags,
)
