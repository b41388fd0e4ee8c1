"""cheaptune: the cheapest way to fine-tune an LLM (plan, train, launch, report)."""

__version__ = "0.1.0"
