"""The cluster's Protobuf messages and enums (package ``ps.v1`` of proto/).

``ps.v1.JobSpec``, ``ps.v1.JobStatus``, ``ps.v1.TrainedModel``, the sweeps'
``ps.v1.SweepSpec`` and ``ps.v1.SweepStatus``, the enums' values
(``ps.v1.BSP``... are nested: ``ps.v1.ConsistencySpec.BSP``), and the gRPC
stubs (``ps.v1.SweepServiceStub`` among them). Generated from proto/ at
build time (python/gen_stubs.py), never checked in.
"""

try:
    from paramserver._proto.ps.v1.job_pb2 import *  # noqa: F401,F403
    from paramserver._proto.ps.v1.job_service_pb2 import *  # noqa: F401,F403
    from paramserver._proto.ps.v1.sweep_pb2 import *  # noqa: F401,F403
    from paramserver._proto.ps.v1.sweep_service_pb2 import *  # noqa: F401,F403
    from paramserver._proto.ps.v1.cluster_pb2 import *  # noqa: F401,F403
    from paramserver._proto.ps.v1.parameter_pb2 import *  # noqa: F401,F403
    from paramserver._proto.ps.v1.job_service_pb2_grpc import JobServiceStub  # noqa: F401
    from paramserver._proto.ps.v1.sweep_service_pb2_grpc import SweepServiceStub  # noqa: F401
    from paramserver._proto.ps.v1.cluster_pb2_grpc import ClusterServiceStub  # noqa: F401
    from paramserver._proto.ps.v1.parameter_pb2_grpc import ParameterServiceStub  # noqa: F401
except ImportError as e:  # pragma: no cover - a source checkout without a build
    raise ImportError(
        "paramserver's Protobuf stubs are generated at build time and are "
        "missing: build the project (scripts/build.sh) and put build/python "
        "on PYTHONPATH, or install the package with `pip install ./python` "
        f"({e})") from e

del DESCRIPTOR  # noqa: F821 - the last module's, meaningless here
