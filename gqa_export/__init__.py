"""gqa-export: turn a Hugging Face causal LM into a ready-to-run ONNX Runtime GenAI package."""

__version__ = "0.1.0"
