"""Run by the python of a llama-cpp-python venv (never imported by the test process): one llama.cpp
job per call, read from argv as JSON, answered on stdout as JSON.

    {"job": "greedy", "model": PATH, "prompt": [ids], "new": N, "threads": T, "suppress": [ids never chosen]}
        -> {"tokens": [...], "logits": [[...] per prompt position, then per generated token]}
    {"job": "tokenize", "model": PATH, "texts": [...]} -> {"ids": [[...], ...]}
    {"job": "quantize", "model": PATH, "out": PATH, "ftype": "Q4_K_M"} -> {"rc": 0}
    {"job": "speed", "model": PATH, "prompt": [ids], "new": N, "threads": T} -> {"prefill_s": .., "decode_s": ..}

llama.cpp's defaults are kept (f16 KV cache, its own activation quantization for quantized weights);
greedy is argmax over its logits, with no sampler in the way.
"""

import json
import sys
import time


def main() -> None:
    import llama_cpp
    import numpy as np

    job = json.loads(sys.argv[1])
    if job["job"] == "quantize":
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + job["ftype"])
        params.nthread = 1
        print(
            json.dumps({"rc": int(llama_cpp.llama_model_quantize(job["model"].encode(), job["out"].encode(), params))})
        )
        return
    threads = int(job.get("threads", 1))
    n_ctx = max(256, len(job.get("prompt", [])) + int(job.get("new", 0)) + 8)
    llm = llama_cpp.Llama(
        model_path=job["model"],
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=job["job"] == "greedy",
        verbose=False,
        seed=0,
    )
    if job["job"] == "tokenize":
        print(json.dumps({"ids": [llm.tokenize(t.encode(), add_bos=True, special=True) for t in job["texts"]]}))
        return
    prompt, new = job["prompt"], int(job["new"])
    if job["job"] == "speed":
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(new):
            llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
        print(json.dumps({"prefill_s": prefill, "decode_s": time.perf_counter() - start}))
        return
    llm.reset()
    llm.eval(prompt)
    tokens = []
    suppressed = list(job.get("suppress", []))  # the ids genai holds back until min_length (end of generation)
    for _ in range(new):
        scores = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        scores[suppressed] = -np.inf
        token = int(np.argmax(scores))
        tokens.append(token)
        llm.eval([token])
    logits = np.asarray(llm.scores[: llm.n_tokens - 1], dtype=np.float32)
    print(json.dumps({"tokens": tokens, "logits": logits.tolist()}))


if __name__ == "__main__":
    main()
