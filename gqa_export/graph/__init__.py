"""Stages 2 and 3: the ONNX decoder graph built directly with onnx-ir (no torch, no tracing) from
the model's dimensions (`model.dims`), the attention plan (`plan`) and the graph I/O options (`io_options`),
then cleaned and fused (`optimize`) without touching a weight byte."""
