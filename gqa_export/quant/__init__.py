"""Stage 4, weight precision: float casts, int4/int8 MatMulNBits (`quantize`, `nbits`, `mixed`),
QMoE experts (`experts`), the quantized KV cache (`kv_cache`), `gqa-export quantize` of a float
package (`requantize`) and the accuracy report (`report`)."""
