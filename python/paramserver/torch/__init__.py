"""PyTorch on the cluster: :class:`Worker` trains a ``torch.nn.Module`` as a
member of the cluster, next to other Python workers or ``ps-worker``
processes.

    import paramserver as ps

    spec = {..., "model": ps.torch.model_spec(net)}   # an EXTERNAL model
    with ps.torch.Worker("127.0.0.1:7000", net) as worker:
        for epoch, batches in worker.epochs((x, y)):
            for xb, yb in batches:
                F.cross_entropy(net(xb), yb).backward()
                worker.step()
            worker.report(test_accuracy=evaluate(net))

docs/python.md has the whole API.
"""

from paramserver.torch.embedding import ShardedEmbedding, ShardedEmbeddingBag
from paramserver.torch.models import BuiltinModel, builtin_model
from paramserver.torch.worker import Worker, load, model_spec, parameters_of

__all__ = ["Worker", "model_spec", "load", "parameters_of", "BuiltinModel",
           "builtin_model", "ShardedEmbedding", "ShardedEmbeddingBag"]
