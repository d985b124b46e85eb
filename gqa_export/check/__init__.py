"""Reading packages back: any ORT GenAI package or bare .onnx read from its files (`reader`, with
the facts a built graph states: package/graph_facts.py), lints (`lints`), `inspect` as data
(`report`), external data checks (`external_data`) and `verify` (`verify`)."""
