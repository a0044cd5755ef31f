"""Imports kvserve's build-time Python stubs: kvserve.v1 (Generation, PrefixCache, Sessions)
and the gRPC health protocol.

The stubs are generated into <build>/proto/python, which must be on PYTHONPATH. The health
stubs are the module grpc_health.v1, as in the grpcio-health-checking package, so code written
for that package works unchanged.
"""
import os

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kvserve.v1 import (generation_pb2, generation_pb2_grpc, prefix_pb2, prefix_pb2_grpc,
                        session_pb2, session_pb2_grpc)

__all__ = ["open_channel", "auth_metadata", "call_metadata", "api_key_from_env", "add_api_key_argument",
           "API_KEY_ENV", "AUTHORIZATION_METADATA_KEY", "grpc", "health_pb2", "health_pb2_grpc", "generation_pb2", "generation_pb2_grpc",
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


# The metadata that carries a client's API key, as "Bearer KEY" (kvserve --api-keys-file).
AUTHORIZATION_METADATA_KEY = "authorization"
# The environment variable the examples take the API key from when --api-key is not given.
API_KEY_ENV = "KVSERVE_API_KEY"


def auth_metadata(api_key):
    """The metadata tuple that presents `api_key` to kvserve: (("authorization", "Bearer KEY"),);
    an empty tuple when `api_key` is empty or None. Pass it as `metadata=` on every call."""
    if not api_key:
        return ()
    return ((AUTHORIZATION_METADATA_KEY, f"Bearer {api_key}"),)


def call_metadata(api_key=None, route=None):
    """The metadata of one call: the API key's (auth_metadata) and the routing key as
    x-kvserve-route; None when there is neither (gRPC's default)."""
    metadata = auth_metadata(api_key)
    if route:
        metadata += (("x-kvserve-route", route),)
    return metadata or None


def api_key_from_env():
    """$KVSERVE_API_KEY when set and not empty, else None."""
    return os.environ.get(API_KEY_ENV) or None


def add_api_key_argument(parser):
    """Adds --api-key to an argparse parser, defaulting to $KVSERVE_API_KEY."""
    parser.add_argument(
        "--api-key", default=api_key_from_env(),
        help=f"API key sent as 'authorization: Bearer KEY' metadata on every call (default: "
             f"${API_KEY_ENV}; prefer it, the flag shows in the process list; --api-key= "
             f"sends none)")
