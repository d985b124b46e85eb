"""Reading packages back: any ORT GenAI package or bare .onnx read from its files (`reader`, with
the facts a built graph states and the package path checks of package/: `graph_facts`, `paths`),
lints (`lints`), `inspect` as data (`report`) and external data checks (`external_data`).
`gqa-export verify`, which also smoke-runs a package, is runtime/verify.py."""
