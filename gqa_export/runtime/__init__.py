"""Stage 6 and after: running packages through onnxruntime-genai: the smoke run and `run`
(`run`), chat sessions (`chat`), perplexity (`evaluate`), the decode loops (`decode`) and what runs
them for a build: the KV-cache calibration (`kv_calibration`) and `--report`'s logits (`logit_error`)."""
