#!/usr/bin/python3
"""Example kvserve beam search in Python: several sequences with scores and log-probabilities.

Sends one request with num_beams beams, asking for the best num_return_sequences of them and
each generated token's log-probability with the top_logprobs most likely tokens at its
position, then prints every returned sequence (index, score, finish reason, text) and, per
token, its id, log-probability and the top list. With --stream the same request goes through
GenerateStream: beam search streams nothing until it ends, then each final sequence whole in one
message (`index`, `score`, `logprobs`), which the example gathers by index.

Uses Debian's python3-grpcio and python3-protobuf and the stubs generated at build time:
  PYTHONPATH=build/proto/python /usr/bin/python3 client/python/kvserve_beams_example.py \\
      --target 127.0.0.1:50051 [--num-beams 4] [--num-return-sequences 2] [--top-logprobs 3] \\
      [--stream] [--route KEY] [--tls-ca-file PEM [--tls-cert-file PEM --tls-key-file PEM]] \\
      [--api-key KEY]

--tls-ca-file (TLS), --tls-cert-file and --tls-key-file (mutual TLS) and --tls-server-name
secure the channel as kvserve_client_example.py's do. --api-key KEY (default: the environment
variable KVSERVE_API_KEY, preferable since the flag shows in the process list) sends
"authorization: Bearer KEY" metadata on every call.
"""
import argparse
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

EARLY_STOPPING = {
    "true": generation_pb2.EARLY_STOPPING_TRUE,
    "false": generation_pb2.EARLY_STOPPING_FALSE,
    "never": generation_pb2.EARLY_STOPPING_NEVER,
}


def print_sequence(sequence):
    """One returned sequence: a header line, its text, then one line per generated token."""
    score = f" score={sequence.score:.4f}" if sequence.HasField("score") else ""
    finish = generation_pb2.FinishReason.Name(sequence.finish_reason)
    print(f"[sequence {sequence.index}{score} finish={finish}]")
    print(f"  text: {sequence.text!r}")
    for position in sequence.logprobs:
        top = ", ".join(f"{t.token_id}:{t.logprob:.4f}" for t in position.top)
        print(f"  token {position.chosen.token_id:>6} logprob {position.chosen.logprob:8.4f}"
              + (f"  top [{top}]" if top else ""))


def gather_stream(messages):
    """Builds Sequence messages from a GenerateStream's messages, by index; and the last one
    (which carries usage and timings)."""
    sequences, last = {}, None
    for message in messages:
        sequence = sequences.setdefault(message.index,
                                        generation_pb2.Sequence(index=message.index))
        sequence.text += message.text
        sequence.token_ids.extend(message.token_ids)
        sequence.logprobs.extend(message.logprobs)
        if message.HasField("score"):
            sequence.score = message.score
        if message.finish_reason != generation_pb2.FINISH_REASON_UNSPECIFIED:
            sequence.finish_reason = message.finish_reason
        if message.HasField("usage"):
            last = message
    return [sequences[i] for i in sorted(sequences)], last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="kvserve address HOST:PORT")
    parser.add_argument("--prompt", default="The capital of France is", help="text to continue")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--num-return-sequences", type=int, default=2,
                        help="the best N beams, best first (<= --num-beams)")
    parser.add_argument("--early-stopping", choices=sorted(EARLY_STOPPING), default=None,
                        help="when beam search ends (default: the server's, false)")
    parser.add_argument("--length-penalty", type=float, default=None,
                        help="score = sum of logprobs / length^X (default: the server's, 1.0)")
    parser.add_argument("--top-logprobs", type=int, default=3,
                        help="most likely tokens listed at each position, 0..20")
    parser.add_argument("--stream", action="store_true", help="use GenerateStream")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per call")
    parser.add_argument("--route", default="",
                        help="routing key sent as x-kvserve-route metadata (default: none)")
    add_tls_arguments(parser)
    add_api_key_argument(parser)
    args = parser.parse_args()
    check_tls_arguments(parser, args)
    metadata = call_metadata(api_key=args.api_key, route=args.route)

    sampling = generation_pb2.SamplingParams(
        max_new_tokens=args.max_new_tokens,
        num_beams=args.num_beams,
        num_return_sequences=args.num_return_sequences,
        logprobs=True,
        top_logprobs=args.top_logprobs)
    if args.early_stopping is not None:
        sampling.early_stopping = EARLY_STOPPING[args.early_stopping]
    if args.length_penalty is not None:
        sampling.length_penalty = args.length_penalty
    request = generation_pb2.GenerateRequest(prompt=args.prompt, sampling=sampling)

    try:
        channel = open_channel_from_args(args)
    except OSError as error:
        print(f"error: cannot read a TLS file: {error}", file=sys.stderr)
        return 2
    with channel:
        stub = generation_pb2_grpc.GenerationStub(channel)
        try:
            if args.stream:
                sequences, last = gather_stream(
                    stub.GenerateStream(request, timeout=args.timeout, metadata=metadata))
                usage = last.usage if last is not None else generation_pb2.Usage()
            else:
                response = stub.Generate(request, timeout=args.timeout, metadata=metadata)
                sequences, usage = list(response.sequences), response.usage
        except grpc.RpcError as error:
            print(f"error: {describe_rpc_error(error, args)}", file=sys.stderr)
            return 1
    for sequence in sequences:
        print_sequence(sequence)
    print(f"prompt_tokens={usage.prompt_tokens} cached_tokens={usage.cached_tokens} "
          f"completion_tokens={usage.completion_tokens}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
