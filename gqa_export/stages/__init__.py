"""The stage functions every runner shares: graphs (build, optimize, precision), the package
written from them, and its finish (seal, lint, smoke run). docs/architecture.md §1."""
