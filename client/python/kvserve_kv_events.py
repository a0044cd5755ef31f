"""A router's view of kvserve replicas' prefix caches, rebuilt from KV events alone.

kvserve serves the vLLM engine protocol (vllm.grpc.engine.VllmEngine, stubs generated into
<build>/proto/python from proto/vllm and proto/smg): SubscribeKvEvents streams batches of
"blocks stored" (16 tokens each, chained by hash to a parent), "blocks removed" and "all
cleared". BlockIndex applies them; block_hashes() computes the hash chain of any token ids
(FNV-1a 64, server/kv_event_publisher.h), so a router can ask how many leading blocks of a
prompt a replica holds. KvEventSubscriber keeps one replica's index current from a thread.
"""
import struct
import threading

import grpc
from smg.grpc.common import common_pb2
from vllm.grpc.engine import vllm_engine_pb2, vllm_engine_pb2_grpc

BLOCK_SIZE = 16
GAP_METADATA = "kvserve-kv-events-gap"
_FNV_OFFSET = 0xcbf29ce484222325
_FNV_PRIME = 0x100000001b3
_MASK = (1 << 64) - 1

__all__ = ["BLOCK_SIZE", "GAP_METADATA", "BlockIndex", "KvEventSubscriber", "block_hashes",
           "namespace_seed", "common_pb2", "vllm_engine_pb2", "vllm_engine_pb2_grpc"]


def _fnv(h, data):
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


def _signed(h):
    return h - (1 << 64) if h >= 1 << 63 else h


def namespace_seed(space):
    """The chain's seed of a namespace ("" is the shared one; a tenant's is its name)."""
    return _signed(_fnv(_FNV_OFFSET, space.encode("utf-8")))


def block_hashes(tokens, space=""):
    """The hashes of the whole 16-token blocks of `tokens` in namespace `space`, first first."""
    hashes = []
    parent = namespace_seed(space)
    for start in range(0, len(tokens) - BLOCK_SIZE + 1, BLOCK_SIZE):
        data = struct.pack("<q", parent) + struct.pack(f"<{BLOCK_SIZE}I", *[
            t & 0xFFFFFFFF for t in tokens[start:start + BLOCK_SIZE]])
        parent = _signed(_fnv(_FNV_OFFSET, data))
        hashes.append(parent)
    return hashes


class BlockIndex:
    """The blocks one replica holds: {hash: (parent hash or None, tokens)}, from events."""

    def __init__(self):
        self.blocks = {}
        self.last_sequence = 0
        self.batches = 0
        self.cleared = 0

    def apply(self, batch):
        """Applies one KvEventBatch (in order)."""
        for event in batch.events:
            kind = event.WhichOneof("data")
            if kind == "cleared":
                self.blocks.clear()
                self.cleared += 1
            elif kind == "stored":
                parent = (event.stored.parent_block_hash
                          if event.stored.HasField("parent_block_hash") else None)
                for block in event.stored.blocks:
                    if block.block_size != BLOCK_SIZE or len(block.token_ids) != BLOCK_SIZE:
                        raise AssertionError(f"block of {len(block.token_ids)} tokens")
                    if parent is not None and parent not in self.blocks:
                        raise AssertionError(f"block {block.block_hash}: parent {parent} unknown")
                    self.blocks[block.block_hash] = (parent, tuple(block.token_ids))
                    parent = block.block_hash
            elif kind == "removed":
                for h in event.removed.block_hashes:
                    if self.blocks.pop(h, None) is None:
                        raise AssertionError(f"removed block {h} was not held")
        self.last_sequence = batch.sequence_number
        self.batches += 1

    def prefix_tokens(self, block_hash):
        """The tokens from the chain's start to the end of `block_hash`."""
        tokens = []
        while block_hash is not None:
            parent, own = self.blocks[block_hash]
            tokens[:0] = own
            block_hash = parent
        return tuple(tokens)

    def match_blocks(self, tokens, space=""):
        """How many leading whole blocks of `tokens` (in `space`) the replica holds."""
        n = 0
        for h in block_hashes(tokens, space):
            if h not in self.blocks:
                break
            n += 1
        return n


class KvEventSubscriber:
    """Subscribes to one replica from a thread and applies its batches to `index`.

    start(sequence) opens the stream (0: from the current state); the thread ends when the
    stream does (a closed channel, a stopped server). `gap` is the server's report of
    batches it could no longer replay (its initial metadata), None when none."""

    def __init__(self, channel, metadata=None, index=None):
        self.stub = vllm_engine_pb2_grpc.VllmEngineStub(channel)
        self.metadata = metadata
        self.index = index if index is not None else BlockIndex()
        self.cond = threading.Condition()
        self.gap = None
        self.first_sequence = None
        self.first_events = None
        self.error = None
        self.call = None
        self.thread = None

    def start(self, start_sequence=0):
        self.gap = None
        self.first_sequence = None
        self.error = None
        self.call = self.stub.SubscribeKvEvents(
            common_pb2.SubscribeKvEventsRequest(start_sequence_number=start_sequence),
            metadata=self.metadata)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        try:
            for key, value in self.call.initial_metadata():
                if key == GAP_METADATA:
                    self.gap = value
            for batch in self.call:
                with self.cond:
                    if self.first_sequence is None:
                        self.first_sequence = batch.sequence_number
                        self.first_events = [e.WhichOneof("data") for e in batch.events]
                    self.index.apply(batch)
                    self.cond.notify_all()
        except grpc.RpcError as error:  # cancelled, or the server went away
            self.error = error
        except AssertionError as error:
            self.error = error
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, sequence, timeout_s):
        """Waits until batch `sequence` (or a later one) is applied; False on timeout."""
        with self.cond:
            return self.cond.wait_for(
                lambda: self.index.last_sequence >= sequence or not self.thread.is_alive(),
                timeout_s) and self.index.last_sequence >= sequence

    def stop(self):
        if self.call is not None:
            self.call.cancel()
        if self.thread is not None:
            self.thread.join(10)
