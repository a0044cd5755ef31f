#!/usr/bin/python3
"""Example kvserve structured outputs in Python: a JSON value valid under a schema, then a choice.

Sends a Generate request whose `constraint` is a JSON Schema (an object with a name, an age and a
list of up to three tags), parses the text as JSON and prints it with usage.forced_tokens (the
tokens the constraint forced: keys and punctuation), then a request constrained to one of
--choice strings. Exits 1 when an output does not parse or is not a choice (which a constraint
rules out unless max_new_tokens cuts the value: finish reason LENGTH, reported as such).

Uses Debian's python3-grpcio and python3-protobuf and the stubs generated at build time:
  PYTHONPATH=build/proto/python /usr/bin/python3 client/python/kvserve_structured_example.py \\
      --target 127.0.0.1:50051 [--schema-file FILE] [--choice yes --choice no] [--api-key KEY]
"""
import argparse
import json
import sys

from kvserve_stubs import (
    add_api_key_argument,
    add_tls_arguments,
    call_metadata,
    check_tls_arguments,
    describe_rpc_error,
    generation_pb2,
    generation_pb2_grpc,
    grpc,
    open_channel_from_args,
)

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="kvserve address HOST:PORT")
    parser.add_argument("--prompt", default="Describe a person as JSON:", help="text to continue")
    parser.add_argument("--schema-file", default="", help="a JSON Schema (default: a person)")
    parser.add_argument("--choice", action="append", default=None,
                        help="a string the second answer may be; repeat (default: yes, no)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per call")
    add_tls_arguments(parser)
    add_api_key_argument(parser)
    args = parser.parse_args()
    check_tls_arguments(parser, args)
    metadata = call_metadata(api_key=args.api_key)
    schema = PERSON
    if args.schema_file:
        with open(args.schema_file, encoding="utf-8") as f:
            schema = json.load(f)
    choices = args.choice or ["yes", "no"]

    try:
        channel = open_channel_from_args(args)
    except OSError as error:
        print(f"error: cannot read a TLS file: {error}", file=sys.stderr)
        return 2
    with channel:
        stub = generation_pb2_grpc.GenerationStub(channel)
        try:
            value = stub.Generate(generation_pb2.GenerateRequest(
                prompt=args.prompt,
                sampling=generation_pb2.SamplingParams(max_new_tokens=args.max_new_tokens),
                constraint=generation_pb2.Constraint(json_schema=json.dumps(schema))),
                timeout=args.timeout, metadata=metadata)
            answer = stub.Generate(generation_pb2.GenerateRequest(
                prompt="Is the sky blue?",
                sampling=generation_pb2.SamplingParams(max_new_tokens=8),
                constraint=generation_pb2.Constraint(
                    choice=generation_pb2.Constraint.Choice(choices=choices))),
                timeout=args.timeout, metadata=metadata)
        except grpc.RpcError as error:
            print(f"error: {describe_rpc_error(error, args)}", file=sys.stderr)
            return 1
    if value.finish_reason == generation_pb2.FINISH_REASON_LENGTH:
        print(f"cut by max_new_tokens before the value ended: {value.text!r}")
        return 1
    try:
        parsed = json.loads(value.text)
    except ValueError as error:
        print(f"error: the output is not JSON ({error}): {value.text!r}", file=sys.stderr)
        return 1
    print(f"value: {json.dumps(parsed, ensure_ascii=False)}")
    print(f"tokens: {value.usage.completion_tokens} generated, "
          f"{value.usage.forced_tokens} forced by the constraint")
    print(f"choice: {answer.text!r}")
    return 0 if answer.text in choices else 1


if __name__ == "__main__":
    sys.exit(main())
