"""Stage 6 and after: running packages through onnxruntime-genai: the smoke run and `run`
(`run`), chat sessions (`chat`) and perplexity (`evaluate`)."""
