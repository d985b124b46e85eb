"""Regenerate tests/data/tiny-llama: the small random Llama the README's first command exports.

Its tokenizer files are written the way Hub checkpoints ship them (transformers 4.x style:
tokenizer_class PreTrainedTokenizerFast, the chat template inside tokenizer_config.json,
special_tokens_map.json), the other style from the one the tests make on the fly.

    python tests/data/make_tiny_llama.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from tiny_models import CHAT_TEMPLATE, save_llama  # noqa: E402


def main() -> None:
    out = HERE / "tiny-llama"
    save_llama(out, seed=1234, tie_word_embeddings=True, num_hidden_layers=2, dtype="bfloat16")
    (out / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config.update(tokenizer_class="PreTrainedTokenizerFast", chat_template=CHAT_TEMPLATE, model_max_length=256)
    config.pop("backend", None)
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {k: config[k] for k in ("bos_token", "eos_token", "pad_token")}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


if __name__ == "__main__":
    main()
