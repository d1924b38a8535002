"""`tfdist data check`: does every simulated worker's pipeline read each example exactly once?"""

from tfdist import input_pipelines
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import Records
from tfdist.input_pipelines import SourceKind
from tfdist.runtime import plugins
from tfdist.training import summary
from tfdist.runtime.config import ConfigError

EXIT_NOT_EXACTLY_ONCE = 1


def main(config: InputConfig, num_workers: int, replicas_per_worker: int,
         json_path: str | None) -> int:
    """Prints the coverage report of `config`'s dataset, or of the `tfdist.Records` that its
    `python:` dataset function returns for "train" (and writes it to `json_path`); 0 when each
    example of one epoch is read exactly once, else 1.

    Raises:
      InputConfigError: the dataset, plan or batch size cannot work, in one line.
    """
    input_pipelines.per_replica_batch_size(config.global_batch_size,
                                           num_workers * replicas_per_worker)
    records = None
    if config.source_kind is SourceKind.PYTHON:
        records = plugins.dataset_splits(config.dataset)["train"]
        if not isinstance(records, Records):
            raise ConfigError(f"dataset={config.dataset!r} returns a "
                              f"{type(records).__name__} for 'train'; data check counts the "
                              "examples of a tfdist.Records (files and parse_fn), so return one.")
    report = input_pipelines.check_coverage(config, num_workers=num_workers,
                                            replicas_per_worker=replicas_per_worker,
                                            records=records)
    print("\n".join(report.lines()))
    if json_path:
        summary.write_json(json_path, report.as_dict())
    return 0 if report.exactly_once else EXIT_NOT_EXACTLY_ONCE
