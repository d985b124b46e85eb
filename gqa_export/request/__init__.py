"""A build request: the option records (`records`), each option declared once (`table`), and what
the declarations derive (`values`): docs/architecture.md §7."""
