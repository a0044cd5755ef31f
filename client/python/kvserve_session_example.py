#!/usr/bin/python3
"""Example kvserve session in Python: a three-turn chat on one session, then a rollback.

Opens a session (Sessions.CreateSession), runs three turns with GenerateStream, each sending the
whole conversation as `messages` with the session's id (the session reuses its cache for the
common prefix, so each turn's cached_tokens covers the turns before it), rolls the last turn back
(Sessions.RollbackSession with the tokens it added) and closes the session.

Uses Debian's python3-grpcio and python3-protobuf and the stubs generated at build time:
  PYTHONPATH=build/proto/python /usr/bin/python3 client/python/kvserve_session_example.py \\
      --target 127.0.0.1:50051 [--system TEXT] [--prefix NAME] [--route KEY] \\
      [--tls-ca-file PEM [--tls-cert-file PEM --tls-key-file PEM]] [--api-key KEY]

A session lives in the memory of the replica that created it: behind a gateway, give every call
the same routing key (--route, sent as x-kvserve-route metadata).

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
    session_pb2,
    session_pb2_grpc,
)


USER_TURNS = (
    "Hello! Who are you?",
    "Tell me one short fact about the sea.",
    "Say it again in five words.",
)


def run_turn(stub, session_id, messages, args, metadata):
    """Streams one turn's answer to stdout; returns (answer text, the last stream message)."""
    request = generation_pb2.GenerateRequest(
        messages=generation_pb2.ChatMessages(messages=messages),
        session=session_id,
        sampling=generation_pb2.SamplingParams(max_new_tokens=args.max_new_tokens))
    text, last = [], None
    for message in stub.GenerateStream(request, timeout=args.timeout, metadata=metadata):
        print(message.text, end="", flush=True)
        text.append(message.text)
        if message.HasField("usage"):
            last = message
    print()
    return "".join(text), last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="kvserve address HOST:PORT")
    parser.add_argument("--system", default="You are a helpful assistant. Answer briefly.",
                        help="the system message (empty: none)")
    parser.add_argument("--prefix", default="",
                        help="a registered prefix the conversation starts with (default: none)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
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
        sessions = session_pb2_grpc.SessionsStub(channel)
        generation = generation_pb2_grpc.GenerationStub(channel)
        session = None
        try:
            session = sessions.CreateSession(
                session_pb2.CreateSessionRequest(
                    options=session_pb2.SessionOptions(prefix=args.prefix)),
                timeout=args.timeout, metadata=metadata)
            print(f"session: {session.id} ({session.num_tokens} tokens, "
                  f"cache {session.options.cache.cache_implementation})")

            messages = []
            if args.system:
                messages.append(generation_pb2.ChatMessage(role="system", content=args.system))
            # The session's history after each turn, by the turns' usage: the tokens a rollback
            # of the last turn drops are the difference of the last two.
            history = [session.num_tokens]
            for number, user_text in enumerate(USER_TURNS, start=1):
                messages.append(generation_pb2.ChatMessage(role="user", content=user_text))
                print(f"user: {user_text}")
                print("assistant: ", end="", flush=True)
                answer, last = run_turn(generation, session.id, messages, args, metadata)
                messages.append(generation_pb2.ChatMessage(role="assistant", content=answer))
                usage = last.usage
                history.append(usage.prompt_tokens + usage.completion_tokens)
                line = (f"  turn {number}: prompt_tokens={usage.prompt_tokens} "
                        f"cached_tokens={usage.cached_tokens} "
                        f"completion_tokens={usage.completion_tokens} "
                        f"ttft_ms={last.timings.ttft_ms:.2f}")
                if last.cache_report.session_recompute_reason:
                    line += f" recomputed: {last.cache_report.session_recompute_reason}"
                print(line)

            # Forget the last exchange: drop its messages and the tokens it added.
            n = history[-1] - history[-2]
            del messages[-2:]
            if n > 0:
                rolled_back = sessions.RollbackSession(
                    session_pb2.RollbackSessionRequest(id=session.id, n=n),
                    timeout=args.timeout, metadata=metadata)
                print(f"rolled back the last turn: {n} tokens dropped, the session holds "
                      f"{rolled_back.num_tokens} tokens "
                      f"({session_pb2.SessionState.Name(rolled_back.state)})")
            else:
                print("rolled back the last turn: it added no tokens")
        except grpc.RpcError as error:
            print(f"error: {describe_rpc_error(error, args)}", file=sys.stderr)
            exit_code = 1
        else:
            exit_code = 0
        if session is not None:
            try:
                sessions.CloseSession(session_pb2.CloseSessionRequest(id=session.id),
                                      timeout=args.timeout, metadata=metadata)
                print(f"closed {session.id}")
            except grpc.RpcError as error:
                print(f"error: {describe_rpc_error(error, args)}", file=sys.stderr)
                exit_code = 1
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
