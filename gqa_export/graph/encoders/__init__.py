"""Vision (and later speech) encoder graphs of multimodal packages, built like the decoder: onnx-ir
nodes over streamed checkpoint weights, no torch at export time (docs/multimodal.md)."""
