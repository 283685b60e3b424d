"""One module per output format; importing this package registers them all.

To add a format, add its module here (see docs/parsing.md).
"""

from responsekit.parsing.formats import (  # noqa: F401  (imported to register)
    deepseek_r1,
    deepseek_v3_1,
    gpt_oss_harmony,
    hermes_json,
    kimi_k2,
    mistral_args,
    qwen3_coder_xml,
    think_tags,
)
