"""Imports kvserve's build-time Python stubs: kvserve.v1 (Generation, PrefixCache, Sessions)
and the gRPC health protocol.

The stubs are generated into <build>/proto/python, which must be on PYTHONPATH. The health
stubs are the module grpc_health.v1, as in the grpcio-health-checking package, so code written
for that package works unchanged.
"""
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kvserve.v1 import (generation_pb2, generation_pb2_grpc, prefix_pb2, prefix_pb2_grpc,
                        session_pb2, session_pb2_grpc)

__all__ = ["grpc", "health_pb2", "health_pb2_grpc", "generation_pb2", "generation_pb2_grpc",
           "prefix_pb2", "prefix_pb2_grpc", "session_pb2", "session_pb2_grpc"]
