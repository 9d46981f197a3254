"""Settings: every option, its default, parser and sources, declared once."""
