"""Reading packages back: any ORT GenAI package or bare .onnx read from its files (`reader`), the
facts a built graph states (`graph_facts`), lints (`lints`), `inspect` as data (`report`), external
data checks (`external_data`) and `verify` (`verify`)."""
