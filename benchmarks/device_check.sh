#!/usr/bin/env bash
# GPU check for a session lent a device machine (see the device tool's README): builds the
# repo's tiny Llama as CUDA packages (fp16, bf16, int4 x gqa, bias (nonpad_kv_seqlen form),
# split; split with shared GPU weights), runs each through onnxruntime-genai on CUDA and prints a
# table of tokens/s and whether the greedy tokens equal the CPU fp32 package's. Carry `.whl` (onnxruntime-genai-cuda and this
# project's pure-Python deps) as the device README says; the machine has torch and onnxruntime-gpu.
#
#   bash benchmarks/device_check.sh [OUT_DIR]
set -euo pipefail
out=${1:-${OUT:-/tmp/device-check}}
mkdir -p "$out"
model=tests/data/tiny-llama
gqa-export build "$model" -o "$out/cpu-fp32" --ep cpu -p fp32 --no-smoke -q --overwrite
for precision in fp16 bf16 int4; do
  for mode in gqa bias split; do
    gqa-export build "$model" -o "$out/cuda-$precision-$mode" --ep cuda -p "$precision" --attention "$mode" \
      --no-smoke -q --overwrite
  done
done
# split with one GPU copy of the weights (decoder.shared_initializers; unverified without a GPU)
gqa-export build "$model" -o "$out/cuda-fp16-split-shared" --ep cuda -p fp16 --attention split \
  --set attention.split_shared_weights=true --no-smoke -q --overwrite
# speculative decoding on CUDA: the model as its own draft (docs/speculative.md; structural without a GPU)
gqa-export build "$model" -o "$out/cuda-fp16-draft" --ep cuda -p fp16 --draft "$model" --no-smoke -q --overwrite
python - "$out" <<'PY' | tee "$out/table.md"
import sys
from pathlib import Path
from gqa_export.runtime.run import generate_greedy
from gqa_export.runtime.providers import cuda_device_available
out = Path(sys.argv[1])
prompt = [0, 45, 319, 81, 84, 266, 265, 302]
reference = generate_greedy(out / "cpu-fp32", prompt, 48, min_new_tokens=48).tokens
print(f"CUDA device available: {cuda_device_available()}\n")
print("| package | decode tok/s | prefill ms | tokens equal cpu fp32 (first 48) |\n|---|---|---|---|")
for package in sorted(p for p in out.iterdir() if p.name.startswith("cuda-")):
    try:
        r = generate_greedy(package, prompt, 48, ep="cuda", min_new_tokens=48)
        print(f"| {package.name} | {r.decode_tokens_per_s:.0f} | {r.prefill_ms:.2f} | {r.tokens == reference} |")
    except Exception as exc:  # report and go on: one failing package must not hide the others
        print(f"| {package.name} | error | {str(exc).splitlines()[0][:60]} | - |")
PY

# Speed beside the official builder's packages on CUDA (issue #40): fp16 and int4, a 150M random
# Llama, prompts of 64/512/2048 tokens then 64 greedy steps, 3 alternating runs (about 3 minutes).
# SPEED=0 skips it.
if [ "${SPEED:-1}" != 0 ]; then
  python benchmarks/speed_vs_builder.py --ep cuda --shape 150m --cases fp16,int4,int4-gu,int4-sym-gu --lengths 64,512,2048 \
    --threads 1 --reps 3 --profile --keep "$out/speed" --results "$out/speed_vs_builder.md" || echo "speed section failed"
fi

# ---------------------------------------------------------------------------------------------
# Other execution providers (docs/eps.md §6): one section each, for the day a machine with that
# device is lent. Each is opt-in (EPS="openvino webgpu dml trt-rtx qnn" bash benchmarks/device_check.sh),
# so the CUDA part above runs alone by default. Each section builds the EP's packages from the EP
# table, runs them through onnxruntime-genai on that provider (the wheel named per section must be
# installed in its own environment) and compares greedy tokens with the CPU fp32 package.
for ep in ${EPS:-}; do
  case "$ep" in
    openvino) precisions="fp32 int4" ;;   # pip install onnxruntime-openvino onnxruntime-genai --no-deps (own venv)
    webgpu) precisions="fp16 fp32 int4" ;; # onnxruntime-webgpu + onnxruntime-genai; needs a real GPU adapter
    dml) precisions="fp16 int4" ;;         # Windows: onnxruntime-directml + onnxruntime-genai-directml
    trt-rtx) precisions="fp16 bf16 int4" ;;     # NVIDIA RTX: onnxruntime with NvTensorRTRTXExecutionProvider
    # Snapdragon (Windows/Linux ARM64): onnxruntime-qnn + onnxruntime-genai; QNN is a plugin EP, so
    # QNN_EP_LIBRARY=<onnxruntime_qnn.get_library_path()> registers it below (docs/eps.md §7.4).
    # Static shapes: 64-token prefill windows, max_length rounded down to a multiple of 64.
    qnn) precisions="int4 fp16 fp32" ;;
    *) echo "unknown EP section '$ep'" >&2; exit 2 ;;
  esac
  for precision in $precisions; do
    gqa-export build "$model" -o "$out/$ep-$precision" --ep "$ep" -p "$precision" --no-smoke -q --overwrite
    gqa-export inspect "$out/$ep-$precision" --json > "$out/$ep-$precision.inspect.json"
  done
  python - "$out" "$ep" <<'PY' | tee "$out/table-$ep.md"
import sys
from pathlib import Path
import onnxruntime
from gqa_export.eps import EPS
import os
from gqa_export.runtime.run import generate_greedy
out, ep = Path(sys.argv[1]), sys.argv[2]
if os.environ.get("QNN_EP_LIBRARY"):  # a plugin EP is registered before a model asks for it
    import onnxruntime_genai as og
    og.register_execution_provider_library(EPS[ep].ort_provider, os.environ["QNN_EP_LIBRARY"])
prompt = [0, 45, 319, 81, 84, 266, 265, 302]
reference = generate_greedy(out / "cpu-fp32", prompt, 48, min_new_tokens=48).tokens
print(f"{EPS[ep].ort_provider} available: {EPS[ep].ort_provider in onnxruntime.get_available_providers()}\n")
print("| package | decode tok/s | prefill ms | tokens equal cpu fp32 (first 48) |\n|---|---|---|---|")
for package in sorted(p for p in out.iterdir() if p.is_dir() and p.name.startswith(f"{ep}-")):
    try:
        r = generate_greedy(package, prompt, 48, ep=ep, min_new_tokens=48)
        print(f"| {package.name} | {r.decode_tokens_per_s:.0f} | {r.prefill_ms:.2f} | {r.tokens == reference} |")
    except Exception as exc:  # report and go on
        print(f"| {package.name} | error | {str(exc).splitlines()[0][:60]} | - |")
PY
done
# ---------------------------------------------------------------------------------------------
# Hybrid decoders' recurrent state on CUDA (LinearAttention, CausalConvWithState): opt-in,
# HYBRIDS="minimax qwen3_5_text" bash benchmarks/device_check.sh (needs torch: the tiny checkpoints of
# tests/dense_models.py). Each is built as CPU fp32 and CUDA fp16 / int4 packages; the table gives how
# many of the 48 greedy CUDA tokens agree with the CPU fp32 package's before the first difference
# (fp16 on a random tiny model may part at a near tie; docs/hybrid-state.md §8.16 for MiniMax).
for family in ${HYBRIDS:-}; do
  PYTHONPATH="tests${PYTHONPATH:+:$PYTHONPATH}" python -c "import sys; from dense_models import save_dense; save_dense(sys.argv[1], sys.argv[2])" \
    "$out/ckpt-$family" "$family"
  gqa-export build "$out/ckpt-$family" -o "$out/hybrid-$family-cpu-fp32" --ep cpu -p fp32 --no-smoke -q --overwrite
  for precision in fp16 int4; do
    gqa-export build "$out/ckpt-$family" -o "$out/hybrid-$family-cuda-$precision" --ep cuda -p "$precision" \
      --no-smoke -q --overwrite
  done
  python - "$out" "$family" <<'PY' | tee "$out/table-hybrid-$family.md"
import sys
from pathlib import Path
from gqa_export.runtime.run import generate_greedy
out, family = Path(sys.argv[1]), sys.argv[2]
prompt = [0, 45, 319, 81, 84, 266, 265, 302]
reference = generate_greedy(out / f"hybrid-{family}-cpu-fp32", prompt, 48, min_new_tokens=48).tokens
print("| package | decode tok/s | prefill ms | leading tokens equal cpu fp32 (of 48) |\n|---|---|---|---|")
for precision in ("fp16", "int4"):
    package = out / f"hybrid-{family}-cuda-{precision}"
    try:
        r = generate_greedy(package, prompt, 48, ep="cuda", min_new_tokens=48)
        same = next((i for i, (a, b) in enumerate(zip(r.tokens, reference)) if a != b), len(reference))
        print(f"| {package.name} | {r.decode_tokens_per_s:.0f} | {r.prefill_ms:.2f} | {same} |")
    except Exception as exc:  # report and go on
        print(f"| {package.name} | error | {str(exc).splitlines()[0][:60]} | - |")
PY
done
