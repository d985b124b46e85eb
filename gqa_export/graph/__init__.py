"""Stage 2: construct the ONNX decoder graph directly with onnx-ir (no torch, no tracing)."""
