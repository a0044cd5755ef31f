"""Checks that the build-time Python stubs of kvserve.v1 import and behave (proto3 optional)."""
import sys

import grpc
from kvserve.v1 import generation_pb2, generation_pb2_grpc, prefix_pb2, prefix_pb2_grpc


def main() -> int:
    request = generation_pb2.GenerateRequest(prompt="hello")
    assert request.WhichOneof("input") == "prompt", request
    assert not request.sampling.HasField("temperature")
    request.sampling.temperature = 0.0
    assert request.sampling.HasField("temperature")
    parsed = generation_pb2.GenerateRequest.FromString(request.SerializeToString())
    assert parsed.sampling.HasField("temperature") and parsed.prompt == "hello"

    prefix = prefix_pb2.RegisterPrefixRequest(name="sys", text="You are helpful.")
    assert prefix.WhichOneof("content") == "text"
    assert not prefix.options.HasField("pinned")

    channel = grpc.insecure_channel("127.0.0.1:1")
    for stub_class in (generation_pb2_grpc.GenerationStub, prefix_pb2_grpc.PrefixCacheStub):
        stub_class(channel)
    assert hasattr(generation_pb2_grpc, "GenerationServicer")
    assert hasattr(prefix_pb2_grpc, "add_PrefixCacheServicer_to_server")
    channel.close()
    print("kvserve.v1 Python stubs OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
