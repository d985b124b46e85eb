"""A build request resolved in two phases before any work: `request_phase` (the options alone,
before the fetch) and `model_phase` (the config and tensor index, before any weight is read),
into the records of `records`; `draft` for build --draft's pairing. docs/architecture.md §7."""
