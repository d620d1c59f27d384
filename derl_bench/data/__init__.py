"""The data layer: where datasets live, how they are fetched, and how they are checked."""

from derl_bench.data.read import DataFileError
from derl_bench.data.root import ENV_VAR, DataNotFoundError, data_root, dataset_dir
from derl_bench.data.sources import dataset, datasets

__all__ = ["ENV_VAR", "DataFileError", "DataNotFoundError", "data_root", "dataset",
           "dataset_dir", "datasets"]
