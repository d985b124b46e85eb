"""Stage 6 and after: running packages through onnxruntime-genai: the smoke run and `run`
(`run`), chat sessions (`chat`), perplexity (`evaluate`), the decode loops (`decode`), what runs
them for a build (the KV-cache calibration: `kv_calibration`; `--report`'s logits: `logit_error`)
and `gqa-export verify` (`verify`: hashes, lints and a smoke run)."""
