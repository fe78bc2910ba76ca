"""Produce vLLM KV-event fixtures with vLLM's own structures and publisher.

Usage (vLLM source is NOT part of this repository; point at an unpacked vLLM wheel):
    python generate.py VLLM_ROOT OUTDIR [OLD_VLLM_ROOT]
VLLM_ROOT is the folder holding the `vllm/` package of the release being captured
(0.33.0 for the committed files); OLD_VLLM_ROOT optionally an older release (0.23.0)
whose array-tagged encoding is captured for the same batches (its hashing.py is taken
from VLLM_ROOT; the old wheel's hash chain is not what is being captured).

What is vLLM's and what is stubbed:
- vllm/distributed/kv_events.py, vllm/config/kv_events.py and vllm/utils/hashing.py are
  loaded unmodified from VLLM_ROOT.
- Stubbed (vLLM-internal imports they need, nothing on the encoding path):
  vllm.logger.init_logger (-> logging.getLogger), vllm.config.utils.config
  (-> dataclasses.dataclass), vllm.utils.network_utils (only used to bind tcp://*:0),
  vllm.v1.core.kv_cache_utils (only the ExternalBlockHash alias, `bytes | int`, as upstream),
  and the `cbor2` module imported by hashing.py (sha256_cbor is not used).
- Block hashes follow vLLM's default chain (kv_cache_utils.hash_block_tokens with
  hashing.sha256, NONE_HASH = sha256("vllm-none-hash")) and are published as ints the way
  maybe_convert_block_hash does with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1 (the default).
"""

import dataclasses
import importlib.util
import json
import logging
import os
import struct
import sys
import tempfile
import time
import types

import msgspec
import zmq

BLOCK_SIZE = 16
TOPIC = "kv-events"


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_vllm(root, tag, hashing_root=None):
    """Import vLLM's kv_events module from ROOT under a private package name."""
    for key in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        del sys.modules[key]
    for pkg in ("vllm", "vllm.config", "vllm.utils", "vllm.v1", "vllm.v1.core", "vllm.distributed"):
        _module(pkg, __path__=[])
    _module("vllm.logger", init_logger=logging.getLogger)
    _module("vllm.config.utils", config=dataclasses.dataclass)
    _module(
        "vllm.utils.network_utils",
        get_ip=lambda: "127.0.0.1",
        get_tcp_uri=lambda ip, port: f"tcp://{ip}:{port}",
        is_valid_ipv6_address=lambda ip: False,
        split_zmq_path=lambda p: ("tcp", p.rsplit(":", 1)[0], p.rsplit(":", 1)[1]),
    )
    _module("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int)
    _module("vllm.envs", VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=True)
    _module("cbor2", dumps=None)
    if os.path.exists(os.path.join(root, "vllm/config/kv_events.py")):
        _load("vllm.config.kv_events", os.path.join(root, "vllm/config/kv_events.py"))
    hashing = _load("vllm.utils.hashing", os.path.join(hashing_root or root, "vllm/utils/hashing.py"))
    events = _load(f"vllm_kv_events_{tag}", os.path.join(root, "vllm/distributed/kv_events.py"))
    return events, hashing


class Chain:
    """vLLM's default block-hash chain: sha256(pickle((parent, tokens, extra_keys)))."""

    def __init__(self, hashing):
        self.sha256 = hashing.sha256
        self.none_hash = hashing.sha256("vllm-none-hash")

    def hashes(self, token_ids, extra_keys=None):
        out, parent = [], self.none_hash
        for i in range(0, len(token_ids) - len(token_ids) % BLOCK_SIZE, BLOCK_SIZE):
            parent = self.sha256((parent, tuple(token_ids[i : i + BLOCK_SIZE]), extra_keys))
            out.append(parent)
        return out

    @staticmethod
    def external(h):
        return int.from_bytes(h, byteorder="big") & ((1 << 64) - 1)


def scenario(ev, chain):
    """The batches a small shared-prefix run would publish (one list per engine step)."""
    sys_prompt = list(range(1000, 1032))  # 2 shared blocks
    req_a = sys_prompt + list(range(2000, 2016)) + list(range(2100, 2116))  # 4 blocks
    req_b = sys_prompt + list(range(3000, 3016))  # shares 2 blocks with A
    req_c = list(range(4000, 4032))  # unrelated, 2 blocks
    ha = [chain.external(h) for h in chain.hashes(req_a)]
    hb = [chain.external(h) for h in chain.hashes(req_b)]
    hc = [chain.external(h) for h in chain.hashes(req_c)]
    lora_keys = (("lora", "sql-adapter", "/adapters/sql"),)
    lora_tokens = list(range(5000, 5016))
    hl = [chain.external(h) for h in chain.hashes(lora_tokens, lora_keys)]

    def stored(hashes, parent, tokens, lora=None, **kw):
        return ev.BlockStored(
            block_hashes=hashes,
            parent_block_hash=parent,
            token_ids=tokens,
            block_size=BLOCK_SIZE,
            lora_id=1 if lora else None,
            medium="GPU",
            lora_name=lora,
            extra_keys=[(lora,) if lora else None for _ in hashes],
            group_idx=0,
            **kw,
        )

    return [
        # step 0: request A prefilled 3 full blocks (the 4th is still partial)
        [stored(ha[:3], None, req_a[:48])],
        # step 1: B hits A's 2 shared blocks and stores 1 new block; A's 4th block fills up
        [stored(hb[2:3], hb[1], req_b[32:48]), stored(ha[3:4], ha[2], req_a[48:64])],
        # step 2: pool pressure: A's tail blocks evicted (one BlockRemoved per hash), C stored
        [
            ev.BlockRemoved(block_hashes=[ha[3]], medium="GPU", group_idx=0),
            ev.BlockRemoved(block_hashes=[ha[2]], medium="GPU", group_idx=0),
            stored(hc, None, req_c),
        ],
        # step 3: a LoRA request (extra_keys carry the adapter name, untagged)
        [stored(hl, None, lora_tokens, lora="sql-adapter")],
        # step 4: reset_prefix_cache
        [ev.AllBlocksCleared()],
        # step 5: A's first block comes back after the reset (same hash as in step 0)
        [stored(ha[:1], None, req_a[:16])],
    ]


def frames_bytes(frames):
    """Length-prefixed multipart: u32 BE frame count, then per frame u32 BE length + bytes."""
    out = struct.pack(">I", len(frames))
    for f in frames:
        out += struct.pack(">I", len(f)) + f
    return out


def to_jsonable(obj):
    return json.loads(msgspec.json.encode(obj))


def write(out, name, frames, decoded, note):
    with open(os.path.join(out, name + ".zmq"), "wb") as f:
        f.write(frames_bytes(frames))
    payload = frames[-1]
    if payload:
        with open(os.path.join(out, name + ".msgpack"), "wb") as f:
            f.write(payload)
    doc = {
        "note": note,
        "frames_hex": [fr.hex() for fr in frames[:-1]] + ["<payload>"],
        "payload_len": len(payload),
        "decoded": decoded,
    }
    if payload:
        doc["payload_generic"] = to_jsonable(msgspec.msgpack.decode(payload))
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def recv_all(sock, timeout_ms):
    got = []
    while sock.poll(timeout_ms):
        got.append(sock.recv_multipart())
    return got


def capture_live(ev, out):
    """Publish the scenario through vLLM's ZmqEventPublisher and record what a subscriber sees."""
    tmp = tempfile.mkdtemp(prefix="kvev")
    pub_ep, replay_ep = f"ipc://{tmp}/pub", f"ipc://{tmp}/replay"
    publisher = ev.ZmqEventPublisher(
        data_parallel_rank=0, endpoint=pub_ep, replay_endpoint=replay_ep, buffer_steps=100, topic=TOPIC
    )
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt_string(zmq.SUBSCRIBE, TOPIC)
    sub.connect(pub_ep)
    time.sleep(0.5)  # PUB/SUB slow joiner
    batches = scenario(ev, Chain(HASHING))
    ts0 = 1767225600.0  # fixed timestamps keep the bytes reproducible
    for i, events in enumerate(batches):
        publisher.publish(ev.KVEventBatch(ts=ts0 + i * 0.25, events=events))
    live = recv_all(sub, 1000)
    assert len(live) == len(batches), len(live)
    decoder = msgspec.msgpack.Decoder(type=ev.KVEventBatch)
    for frames in live:
        seq = int.from_bytes(frames[1], "big")
        write(
            out,
            f"pub_seq{seq}",
            frames,
            to_jsonable(decoder.decode(frames[2])),
            "PUB multipart (topic, 8-byte big-endian seq, msgpack KVEventBatch)",
        )
    # replay: a DEALER sends (empty delimiter, start seq) like a REQ would; the ROUTER answers
    for start in (2, 99):
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(replay_ep)
        dealer.send_multipart((b"", (start).to_bytes(8, "big")))
        got = recv_all(dealer, 1000)
        dealer.close(linger=0)
        for k, frames in enumerate(got):
            end = frames[-2] == ev.ZmqEventPublisher.END_SEQ
            dec = None if end else to_jsonable(decoder.decode(frames[-1]))
            note = (
                "replay end marker as received on a DEALER (delimiter, empty topic, seq -1, empty)"
                if end
                else "replayed batch as received on a DEALER (delimiter, topic, seq, payload)"
            )
            write(out, f"replay_from{start}_{k}", frames, dec, note)
    publisher.shutdown()
    sub.close(linger=0)
    return batches


def encode_payloads(ev, out, prefix, batches, dp_rank):
    enc = msgspec.msgpack.Encoder()
    decoder = msgspec.msgpack.Decoder(type=ev.KVEventBatch)
    for i, events in enumerate(batches):
        payload = enc.encode(
            ev.KVEventBatch(ts=1767225600.0 + i * 0.25, events=events, data_parallel_rank=dp_rank)
        )
        with open(os.path.join(out, f"{prefix}_batch{i}.msgpack"), "wb") as f:
            f.write(payload)
        with open(os.path.join(out, f"{prefix}_batch{i}.json"), "w") as f:
            json.dump(
                {
                    "decoded": to_jsonable(decoder.decode(payload)),
                    "payload_generic": to_jsonable(msgspec.msgpack.decode(payload)),
                },
                f,
                indent=1,
            )
            f.write("\n")


if __name__ == "__main__":
    root, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    EV, HASHING = load_vllm(root, "new")
    capture_live(EV, out)
    encode_payloads(EV, out, "dp1", scenario(EV, Chain(HASHING))[:2], dp_rank=1)
    if len(sys.argv) > 3:
        OLD, HASHING = load_vllm(sys.argv[3], "old", hashing_root=root)
        old_batches = scenario(OLD, Chain(HASHING))
        encode_payloads(OLD, out, "v0_23_array", old_batches, dp_rank=0)
