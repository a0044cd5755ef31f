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

__all__ = ["open_channel", "auth_metadata", "call_metadata", "api_key_from_env",
           "add_api_key_argument", "add_tls_arguments", "check_tls_arguments",
           "open_channel_from_args", "connection_hint", "describe_rpc_error", "API_KEY_ENV",
           "AUTHORIZATION_METADATA_KEY", "grpc", "health_pb2", "health_pb2_grpc",
           "generation_pb2", "generation_pb2_grpc", "prefix_pb2", "prefix_pb2_grpc",
           "session_pb2", "session_pb2_grpc"]


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


def add_tls_arguments(parser):
    """Adds --tls-ca-file, --tls-cert-file, --tls-key-file and --tls-server-name to an argparse
    parser, as kvctl has them (check them with check_tls_arguments)."""
    parser.add_argument("--tls-ca-file", default=None,
                        help="CA certificates (PEM) verifying the server; with it, TLS")
    parser.add_argument("--tls-cert-file", default=None,
                        help="client certificate chain (PEM) for mutual TLS")
    parser.add_argument("--tls-key-file", default=None,
                        help="private key (PEM) of --tls-cert-file")
    parser.add_argument("--tls-server-name", default=None,
                        help="name the server's certificate must carry (default: the host)")


def check_tls_arguments(parser, args):
    """Exits through parser.error (exit 2) when the TLS flags do not go together."""
    if (args.tls_cert_file is None) != (args.tls_key_file is None):
        parser.error("--tls-cert-file and --tls-key-file go together")
    if args.tls_ca_file is None and (args.tls_cert_file or args.tls_server_name):
        parser.error("--tls-cert-file and --tls-server-name need --tls-ca-file")


def open_channel_from_args(args):
    """open_channel(args.target, ...) with the flags of add_tls_arguments; OSError when a file
    cannot be read."""
    return open_channel(args.target, args.tls_ca_file, args.tls_cert_file, args.tls_key_file,
                        args.tls_server_name)


# gRPC's words for a peer that closed a connection being established: what a client sees when
# the server ends a TLS handshake it does not accept (a refused client certificate included:
# that comes after the client's side of a TLS 1.3 handshake is done). connection_hint takes
# them only with "failed to connect ...": a connection dropped during a call says nothing
# about TLS.
_CLOSED = ("Socket closed", "Connection reset by peer", "Broken pipe", "Handshake read failed")


def connection_hint(error, ca_file=None, cert_file=None):
    """What most likely happened when `error` (a grpc.RpcError) is a connection that failed in
    or right after its handshake, given how the channel was secured (`ca_file`: TLS,
    `cert_file`: a client certificate), as one sentence naming the flags to give; "" for any
    other error. gRPC reports a plaintext client on a TLS port, a missing client certificate
    and an untrusted one alike (UNAVAILABLE ... Socket closed); the client knows which it was."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:
        return ""
    details = error.details() or ""
    if ca_file and "is not in peer certificate" in details:
        return ("the server's certificate does not name the --target host: give the name it "
                "carries as --tls-server-name")
    if ca_file and ("certificate verify failed" in details
                    or "CERTIFICATE_VERIFY_FAILED" in details):
        return ("the server's certificate is not signed by a CA of --tls-ca-file "
                "(or has expired)")
    if ca_file and ("wrong version number" in details or "WRONG_VERSION_NUMBER" in details):
        return ("the server does not serve TLS on this port (it answered in plaintext): leave "
                "out the --tls-* flags")
    connecting = ("failed to connect to all addresses" in details
                  or "connections to all backends failing" in details)
    if not connecting or not any(words in details for words in _CLOSED):
        return ""
    if not ca_file:
        return ("most likely the server requires TLS and this client spoke plaintext: give "
                "--tls-ca-file (and --tls-cert-file, --tls-key-file where it requires client "
                "certificates)")
    if not cert_file:
        return ("most likely the server requires a client certificate (mutual TLS): give "
                "--tls-cert-file and --tls-key-file")
    return ("most likely the server does not trust the client certificate: the CA that signed "
            "--tls-cert-file is not among its --tls-client-ca-file")


def describe_rpc_error(error, args):
    """ "CODE: details" of a grpc.RpcError, with connection_hint's sentence after " -- " when
    there is one; `args` holds the flags of add_tls_arguments."""
    text = f"{error.code().name}: {error.details()}"
    hint = connection_hint(error, args.tls_ca_file, args.tls_cert_file)
    return f"{text} -- {hint}" if hint else text
