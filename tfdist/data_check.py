"""`tfdist data check`: does every simulated worker's pipeline read each example exactly once?"""

import input_pipelines
from input_pipelines import InputConfig
from tfdist import summary

EXIT_NOT_EXACTLY_ONCE = 1


def main(config: InputConfig, num_workers: int, replicas_per_worker: int,
         json_path: str | None) -> int:
    """Prints the coverage report (and writes it to `json_path`); 0 when each example of one
    epoch is read exactly once, else 1.

    Raises:
      InputConfigError: the dataset, plan or batch size cannot work, in one line.
    """
    input_pipelines.per_replica_batch_size(config.global_batch_size,
                                           num_workers * replicas_per_worker)
    report = input_pipelines.check_coverage(config, num_workers=num_workers,
                                            replicas_per_worker=replicas_per_worker)
    print("\n".join(report.lines()))
    if json_path:
        summary.write_json(json_path, report.as_dict())
    return 0 if report.exactly_once else EXIT_NOT_EXACTLY_ONCE
