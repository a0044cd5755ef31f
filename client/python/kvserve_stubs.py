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

__all__ = ["open_channel", "grpc", "health_pb2", "health_pb2_grpc", "generation_pb2", "generation_pb2_grpc",
           "prefix_pb2", "prefix_pb2_grpc", "session_pb2", "session_pb2_grpc"]


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def open_channel(target, ca_file=None, cert_file=None, key_file=None, server_name=None):
    """A channel to `target`: TLS verified against the PEM CA certificates in `ca_file` when it
    is given (with the client certificate `cert_file` and key `key_file` for mutual TLS, and
    `server_name` as the name the server's certificate must carry instead of the target's
    host); plaintext otherwise."""
    if ca_file is None:
        if cert_file or key_file or server_name:
            raise ValueError("a client certificate or server name needs a CA file (TLS)")
        return grpc.insecure_channel(target)
    if bool(cert_file) != bool(key_file):
        raise ValueError("the client certificate and key go together (both or neither)")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(ca_file),
        private_key=_read(key_file) if key_file else None,
        certificate_chain=_read(cert_file) if cert_file else None)
    options = (("grpc.ssl_target_name_override", server_name),) if server_name else ()
    return grpc.secure_channel(target, credentials, options=options)
