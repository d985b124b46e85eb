"""The resolved model: a config (and its spec) read into typed dimensions, per layer (`dims`, with
`latent`, `moe`, `stream`, `layer_kinds`, `layer_ropes`, `rope`, `alibi`, `multipliers`), and
config.json's size keys checked as written (`raw_config`). Config only: nothing here reads a
weight or builds a graph, so every stage from `source/` up may import it (docs/architecture.md §1)."""
