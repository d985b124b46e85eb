"""Stage 5, the package on disk: the weight writer (`writer`), genai_config.json (`genai_config`,
`genai_schema`, written from the facts the built graph states: `graph_facts`), manifest.json
(`manifest`), the atomic staging folder and tokenizer files (`staging`), what `-o`/`--overwrite`
may touch (`ownership`), and whether a path is a package at all (`paths`: every command that reads
one back asks it)."""
