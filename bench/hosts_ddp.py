#!/usr/bin/python3
"""One rank of PyTorch DDP (gloo) for bench/hosts_vs_ddp.sh: the README's MLP
trained as bench/vs_pytorch.py's DDP trains it (same data split, model,
initial values, optimizer, evaluation after each epoch by rank 0), but with
the ranks in separate network hosts and any number of them.

  hosts_ddp.py --rank R --world N --master HOST:PORT --t0 SECONDS \\
      [--epochs 2] [--round 1] [--data-dir DIR] [--system NAME]

Rank 0 prints vs_pytorch.py's JSON line of results (times from --t0, the
moment the script launched the ranks: data loading and joining the group are
inside the timed span, as in vs_pytorch.py); every rank prints a line
{"cpu_s": ...} of its own CPU time. Run each rank in its host's network
namespace with GLOO_SOCKET_IFNAME set to the host's interface.
"""

import argparse
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vs_pytorch  # noqa: E402  (the README job's PyTorch side)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True, help="rank 0's HOST:PORT")
    p.add_argument("--t0", type=float, required=True)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--round", type=int, default=1)
    p.add_argument("--system", default="PyTorch DDP (gloo)")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    vs_pytorch.one_thread()
    data = vs_pytorch.load_fashion_mnist(args.data_dir)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}",
                            rank=args.rank, world_size=args.world)
    model = DistributedDataParallel(vs_pytorch.make_model(args.seed))
    opt = vs_pytorch.make_optimizer(model.parameters(), args.lr)
    records = vs_pytorch.train_local(model, opt, data, args, args.rank,
                                     args.world, args.t0,
                                     evaluate=args.rank == 0)
    dist.barrier()
    dist.destroy_process_group()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    if args.rank == 0:
        print(json.dumps(vs_pytorch.result(args.system, args.round, records,
                                           {"rank0": cpu})))
    print(json.dumps({"cpu_s": cpu}))


if __name__ == "__main__":
    main()
