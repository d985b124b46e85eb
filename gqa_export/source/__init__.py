"""Stage 1, fetch and read: a Hub id or folder resolved to local files (`fetch`), the safetensors
shards read lazily and checked (`weights`), and checkpoints this tool cannot import refused
(`prequantized`), and the config's sizes checked against the stored tensors (`consistency`)."""
