"""A Python worker process for the tests: trains the job the coordinator
gives it.

  train.py COORDINATOR external [--samples N] [--ack_log F] [--step_sleep S]
  train.py COORDINATOR builtin --spec JOB.json
"""

import argparse
import logging
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

import paramserver as ps  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("coordinator")
    parser.add_argument("model", choices=["external", "builtin"])
    parser.add_argument("--spec")
    parser.add_argument("--job")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--ack_log")
    parser.add_argument("--step_sleep", type=float, default=0.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    torch.set_num_threads(1)
    if args.model == "builtin":
        module = ps.torch.builtin_model(args.spec)
        data = None  # The spec's IDX data set.
    else:
        torch.manual_seed(0)
        module = common.Small()
        data = common.synthetic(args.samples)
    with ps.torch.Worker(args.coordinator, module, job=args.job,
                         ack_log=args.ack_log) as worker:
        print(f"worker registered, digest {worker.digest}", flush=True)
        test = None
        for epoch, batches in worker.epochs(data):
            if test is None:
                print(f"training {worker.job_id} as worker {worker.index} "
                      f"from clock {worker.clock}", flush=True)
                if args.model == "builtin" and worker.index == 0:
                    test = worker.test_data()
                elif data is not None:
                    test = data
            for x, y in batches:
                loss = F.cross_entropy(module(x), y)
                loss.backward()
                worker.step(loss)
                if args.step_sleep:
                    time.sleep(args.step_sleep)
            acc = common.accuracy(module, *test) if test is not None else None
            worker.report(test_accuracy=acc,
                          test_samples=len(test[1]) if test else None)
            print(f"epoch {epoch} done, accuracy {acc}", flush=True)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
