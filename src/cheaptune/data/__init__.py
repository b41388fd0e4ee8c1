"""Datasets for training and planning: formats, bad rows with file and line, token counts."""

from cheaptune.data.formats import FORMATS, accepted_shapes, resolve_format
from cheaptune.data.load import LoadedData, last_turn_as_completion, load_dataset_rows, validation_split
from cheaptune.data.tokens import TokenCount, count_tokens

__all__ = ["FORMATS", "LoadedData", "TokenCount", "accepted_shapes", "count_tokens", "last_turn_as_completion",
           "load_dataset_rows", "resolve_format", "validation_split"]
