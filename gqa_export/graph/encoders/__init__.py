"""Graphs of a multimodal package other than the decoder: vision towers and the embedding model
(docs/multimodal.md). Built with the decoder's GraphBuilder and streamed Params: no torch."""
