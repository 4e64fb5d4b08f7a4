"""Stand-in datasets: Dataset.from_dict keeps the columns."""

from typing import Any


class Dataset:
    def __init__(self, columns: dict[str, list[Any]]) -> None:
        self.columns = columns

    @classmethod
    def from_dict(cls, columns: dict[str, list[Any]]) -> "Dataset":
        return cls(columns)
