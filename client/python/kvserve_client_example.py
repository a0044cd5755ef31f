#!/usr/bin/python3
"""Example kvserve client in Python: health check, a unary Generate and a GenerateStream.

Uses Debian's python3-grpcio and python3-protobuf and the stubs generated at build time:
  PYTHONPATH=build/proto/python /usr/bin/python3 client/python/kvserve_client_example.py \
      --target 127.0.0.1:50051 [--route KEY] [--api-key KEY]

With --route, every call carries the routing key as gRPC metadata x-kvserve-route, which a
gateway in front of several replicas hashes to pick the replica; each replica names itself in
the trailing metadata x-kvserve-replica, printed as "replica:".

With --tls-ca-file the channel is TLS, verifying the server against those CA certificates;
--tls-cert-file and --tls-key-file add a client certificate for a server that requires one
(kvserve --tls-client-ca-file). A call that cannot connect says what most likely happened (the
server requires TLS, or a client certificate, or does not trust the one given).

With --api-key KEY (default: the environment variable KVSERVE_API_KEY, which is preferable:
the flag shows in the process list), every call carries gRPC metadata
"authorization: Bearer KEY", for a server started with --api-keys-file.
"""
import argparse
import sys

from kvserve_stubs import (
    generation_pb2,
    generation_pb2_grpc,
    grpc,
    health_pb2,
    health_pb2_grpc,
    add_api_key_argument,
    add_tls_arguments,
    call_metadata,
    check_tls_arguments,
    describe_rpc_error,
    open_channel_from_args,
)


def summary(message) -> str:
    """One line of a final message's finish reason, usage and timings."""
    usage, timings = message.usage, message.timings
    return (
        f"finish_reason={generation_pb2.FinishReason.Name(message.finish_reason)} "
        f"prompt_tokens={usage.prompt_tokens} cached_tokens={usage.cached_tokens} "
        f"completion_tokens={usage.completion_tokens} ttft_ms={timings.ttft_ms:.2f} "
        f"decode_ms={timings.decode_ms:.2f} cache={message.cache_report.cache_implementation}"
    )


REPLICA_METADATA_KEY = "x-kvserve-replica"


def replica_of(call) -> str:
    """The replica that served a finished call, from its trailing metadata ("-" when none)."""
    for key, value in call.trailing_metadata() or ():
        if key == REPLICA_METADATA_KEY:
            return value
    return "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="kvserve address HOST:PORT")
    parser.add_argument("--prompt", default="Hello, my name is", help="text to continue")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per call")
    parser.add_argument("--route", default="",
                        help="routing key sent as x-kvserve-route metadata (default: none)")
    add_tls_arguments(parser)
    add_api_key_argument(parser)
    args = parser.parse_args()
    check_tls_arguments(parser, args)
    metadata = call_metadata(api_key=args.api_key, route=args.route)

    try:
        channel = open_channel_from_args(args)
    except OSError as error:
        print(f"error: cannot read a TLS file: {error}", file=sys.stderr)
        return 2
    with channel:
        try:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=args.timeout, metadata=metadata)
            print("health:", health_pb2.HealthCheckResponse.ServingStatus.Name(health.status))

            stub = generation_pb2_grpc.GenerationStub(channel)
            request = generation_pb2.GenerateRequest(
                prompt=args.prompt,
                sampling=generation_pb2.SamplingParams(max_new_tokens=args.max_new_tokens))

            response, call = stub.Generate.with_call(request, timeout=args.timeout,
                                                     metadata=metadata)
            print(f"generate: {response.text!r}")
            print(f"  token_ids: {list(response.token_ids)}")
            print(f"  {summary(response)}")
            print(f"  replica: {replica_of(call)}")

            print("stream: ", end="", flush=True)
            last = None
            stream = stub.GenerateStream(request, timeout=args.timeout, metadata=metadata)
            for message in stream:
                print(message.text, end="", flush=True)
                last = message
            print()
            if last is not None:
                print(f"  {summary(last)}")
            print(f"  replica: {replica_of(stream)}")
        except grpc.RpcError as error:
            print(f"error: {describe_rpc_error(error, args)}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
