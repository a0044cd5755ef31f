#!/usr/bin/python3
"""Checks reference_forward.py against a slow token-by-token implementation.

The slow path shares nothing with the reference but the definitions: it takes the weights
straight from make_numpy_model (no safetensors parsing), decodes one token at a time with an
explicit key/value cache, rotates each (i, i + d/2) pair by its own angle instead of using
rotate_half, and selects attended keys by position rules instead of a mask matrix. Both run
in float64, so they must agree to rounding.
"""

import json
import math
import os
import struct
import sys
import tempfile
import unittest

import numpy as np

sys.dont_write_bytecode = True  # keep the source tree clean when ctest runs this

import make_numpy_model  # noqa: E402
import reference_forward  # noqa: E402

IDS = [5, 17, 42, 3, 96, 0, 11, 64, 8, 8, 23, 57, 90, 1]


def _rms(x, weight, eps):
    return x / math.sqrt(float(np.dot(x, x)) / len(x) + eps) * weight


def _inv_freq(config, rotary_dim):
    theta = config.get("rope_theta", 10000.0)
    rope = config.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    out = []
    for i in range(rotary_dim // 2):
        f = theta ** (-(2.0 * i) / rotary_dim)
        if kind == "linear":
            f /= rope["factor"]
        elif kind == "llama3":
            factor, old = rope["factor"], rope["original_max_position_embeddings"]
            low, high = rope["low_freq_factor"], rope["high_freq_factor"]
            wavelen = 2 * math.pi / f
            if wavelen < old / high:
                pass  # high frequency: unchanged
            elif wavelen > old / low:
                f /= factor  # low frequency: fully scaled
            else:
                s = (old / wavelen - low) / (high - low)
                f = (1 - s) * f / factor + s * f
        out.append(f)
    return out


def _rotate(vec, pos, inv_freq):
    out = vec.copy()
    half = len(inv_freq)
    for i, f in enumerate(inv_freq):
        c, s = math.cos(pos * f), math.sin(pos * f)
        a, b = vec[i], vec[i + half]
        out[i] = a * c - b * s
        out[i + half] = b * c + a * s
    return out


def _layer_rule(config, layer):
    types = config.get("layer_types")
    if types:
        kind = types[layer]
        if kind == "sliding_attention":
            return "sliding", config["sliding_window"]
        if kind == "chunked_attention":
            return "chunked", config["attention_chunk_size"]
        return "full", 0
    if config["model_type"] in ("mistral", "phi3") and config.get("sliding_window"):
        return "sliding", config["sliding_window"]
    if config["model_type"] in ("qwen2", "qwen3") and config.get("use_sliding_window"):
        if layer >= config.get("max_window_layers", config["num_hidden_layers"]):
            return "sliding", config["sliding_window"]
    return "full", 0


def slow_logits(config, weights, ids):
    """Logits [len(ids), vocab] by incremental decoding with a cache, one token at a time."""
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    heads, kv_heads, d = (
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["head_dim"],
    )
    inter = config["intermediate_size"]
    eps = config["rms_norm_eps"]
    rotary_dim = int(d * config.get("partial_rotary_factor", 1.0))
    inv_freq = _inv_freq(config, rotary_dim)
    mt = config["model_type"]
    cache = [[] for _ in range(config["num_hidden_layers"])]  # per layer: (pos, k, v)
    rows = []
    for pos, token in enumerate(ids):
        x = w["model.embed_tokens.weight"][token].copy()
        for layer in range(config["num_hidden_layers"]):
            p = f"model.layers.{layer}."
            xn = _rms(x, w[p + "input_layernorm.weight"], eps)
            if mt == "phi3":
                qkv = w[p + "self_attn.qkv_proj.weight"] @ xn
                q, k, v = np.split(qkv, [heads * d, heads * d + kv_heads * d])
            else:
                q = w[p + "self_attn.q_proj.weight"] @ xn
                k = w[p + "self_attn.k_proj.weight"] @ xn
                v = w[p + "self_attn.v_proj.weight"] @ xn
            if p + "self_attn.q_proj.bias" in w:
                q = q + w[p + "self_attn.q_proj.bias"]
                k = k + w[p + "self_attn.k_proj.bias"]
                v = v + w[p + "self_attn.v_proj.bias"]
            q_heads, k_heads, v_heads = [], [], []
            for h in range(heads):
                qh = q[h * d : (h + 1) * d]
                if mt == "qwen3":
                    qh = _rms(qh, w[p + "self_attn.q_norm.weight"], eps)
                q_heads.append(np.concatenate([_rotate(qh[:rotary_dim], pos, inv_freq),
                                               qh[rotary_dim:]]))
            for h in range(kv_heads):
                kh = k[h * d : (h + 1) * d]
                if mt == "qwen3":
                    kh = _rms(kh, w[p + "self_attn.k_norm.weight"], eps)
                k_heads.append(np.concatenate([_rotate(kh[:rotary_dim], pos, inv_freq),
                                               kh[rotary_dim:]]))
                v_heads.append(v[h * d : (h + 1) * d])
            cache[layer].append((pos, k_heads, v_heads))
            kind, window = _layer_rule(config, layer)
            visible = []
            for kpos, kh, vh in cache[layer]:
                if kind == "sliding" and kpos <= pos - window:
                    continue
                if kind == "chunked" and kpos // window != pos // window:
                    continue
                visible.append((kh, vh))
            attn = []
            for h in range(heads):
                g = h * kv_heads // heads
                scores = [float(np.dot(q_heads[h], kh[g])) / math.sqrt(d) for kh, _ in visible]
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                total = sum(e)
                attn.append(sum((ei / total) * vh[g] for ei, (_, vh) in zip(e, visible)))
            out = w[p + "self_attn.o_proj.weight"] @ np.concatenate(attn)
            if p + "self_attn.o_proj.bias" in w:
                out = out + w[p + "self_attn.o_proj.bias"]
            x = x + out
            xn = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
            if mt == "phi3":
                gate_up = w[p + "mlp.gate_up_proj.weight"] @ xn
                gate, up = gate_up[:inter], gate_up[inter:]
            else:
                gate = w[p + "mlp.gate_proj.weight"] @ xn
                up = w[p + "mlp.up_proj.weight"] @ xn
            act = np.array([g / (1 + math.exp(-g)) for g in gate]) * up
            x = x + w[p + "mlp.down_proj.weight"] @ act
        x = _rms(x, w["model.norm.weight"], eps)
        head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
        rows.append(head @ x)
    return np.stack(rows)


class ReferenceMatchesSlowPath(unittest.TestCase):
    CASES = {
        "llama": dict(model_type="llama"),
        "llama_tied_bias": dict(model_type="llama", tie_word_embeddings=True, attention_bias=True),
        "llama_linear_rope": dict(
            model_type="llama", rope_scaling={"rope_type": "linear", "factor": 4.0}
        ),
        "llama_llama3_rope": dict(
            model_type="llama",
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
        "llama_chunked": dict(
            model_type="llama",
            attention_chunk_size=4,
            layer_types=["chunked_attention", "full_attention"],
        ),
        "mistral_window5": dict(model_type="mistral"),
        "qwen2": dict(model_type="qwen2"),
        "qwen2_sliding_top_layer": dict(
            model_type="qwen2", use_sliding_window=True, sliding_window=3, max_window_layers=1
        ),
        "qwen3": dict(model_type="qwen3", head_dim=12),
        "phi3": dict(model_type="phi3"),
        "phi3_partial_rotary": dict(model_type="phi3", partial_rotary_factor=0.5),
    }

    def test_all_positions_match(self):
        for name, overrides in self.CASES.items():
            with self.subTest(name), tempfile.TemporaryDirectory() as tmp:
                overrides = dict(overrides)
                model_type = overrides.pop("model_type")
                config = make_numpy_model.write_model(tmp, model_type, seed=3, **overrides)
                weights = make_numpy_model.make_weights(config, 3)
                expected = slow_logits(config, weights, IDS)
                got = reference_forward.Model(tmp).forward(IDS)
                self.assertEqual(got.shape, (len(IDS), config["vocab_size"]))
                np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)

    def test_window_and_bias_change_the_result(self):
        # Guards against a rule that is silently ignored on both sides.
        with tempfile.TemporaryDirectory() as tmp:
            make_numpy_model.write_model(tmp, "mistral", seed=3)
            windowed = reference_forward.Model(tmp).forward(IDS)[-1]
            make_numpy_model.write_model(tmp, "mistral", seed=3, sliding_window=None)
            full = reference_forward.Model(tmp).forward(IDS)[-1]
            self.assertGreater(np.abs(windowed - full).max(), 1e-3)


class SafetensorsReader(unittest.TestCase):
    def _write_raw(self, path, header, data):
        header_bytes = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(header_bytes)) + header_bytes + data)

    def test_known_bit_patterns(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.safetensors")
            bf16 = struct.pack("<3H", 0x3F80, 0xC020, 0x3EAB)  # 1, -2.5, 0.333984375
            f16 = struct.pack("<3H", 0x3C00, 0xC100, 0x3555)  # 1, -2.5, 0.333251953125
            f32 = struct.pack("<2f", 0.1, -7.0)
            self._write_raw(
                path,
                {
                    "a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
                    "b": {"dtype": "F16", "shape": [3, 1], "data_offsets": [6, 12]},
                    "c": {"dtype": "F32", "shape": [1, 2], "data_offsets": [12, 20]},
                },
                bf16 + f16 + f32,
            )
            t = reference_forward.read_safetensors(path)
            self.assertEqual(t["a"].tolist(), [1.0, -2.5, 0.333984375])
            self.assertEqual(t["b"].reshape(-1).tolist(), [1.0, -2.5, 0.333251953125])
            self.assertEqual(t["b"].shape, (3, 1))
            self.assertEqual(t["c"].tolist(), [[np.float32(0.1), -7.0]])

    def test_malformed_files_are_errors(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad.safetensors")
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", 1000) + b"{}")
            with self.assertRaisesRegex(reference_forward.ReferenceError, "past the end"):
                reference_forward.read_safetensors(path)
            self._write_raw(path, {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
                            b"\0" * 12)
            with self.assertRaisesRegex(reference_forward.ReferenceError, "offsets"):
                reference_forward.read_safetensors(path)
            self._write_raw(path, {"a": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]}},
                            b"\0")
            with self.assertRaisesRegex(reference_forward.ReferenceError, "dtype"):
                reference_forward.read_safetensors(path)

    def test_half_precision_and_shards_give_the_rounded_weights(self):
        with tempfile.TemporaryDirectory() as tmp:
            config = make_numpy_model.write_model(tmp + "/f32", "qwen2", seed=5)
            weights = make_numpy_model.make_weights(config, 5)
            f32 = reference_forward.read_checkpoint(tmp + "/f32")
            self.assertEqual(sorted(f32), sorted(weights))
            for name in weights:
                np.testing.assert_array_equal(f32[name], weights[name])
            make_numpy_model.write_model(tmp + "/f16", "qwen2", seed=5, dtype="F16")
            f16 = reference_forward.read_checkpoint(tmp + "/f16")
            for name in weights:
                np.testing.assert_array_equal(
                    f16[name], weights[name].astype(np.float16).astype(np.float32)
                )
            make_numpy_model.write_model(tmp + "/bf16", "qwen2", seed=5, dtype="BF16")
            bf16 = reference_forward.read_checkpoint(tmp + "/bf16")
            for name in weights:
                np.testing.assert_allclose(bf16[name], weights[name], rtol=2**-8, atol=0)
                # Exactly representable in bfloat16: the low 16 bits are zero.
                self.assertFalse(np.any(bf16[name].view(np.uint32) & 0xFFFF))
            make_numpy_model.write_model(tmp + "/sharded", "qwen2", seed=5, shards=2)
            self.assertFalse(os.path.exists(tmp + "/sharded/model.safetensors"))
            np.testing.assert_array_equal(
                reference_forward.Model(tmp + "/sharded").forward(IDS),
                reference_forward.Model(tmp + "/f32").forward(IDS),
            )


class CommandLine(unittest.TestCase):
    def test_writes_last_position_logits(self):
        with tempfile.TemporaryDirectory() as tmp:
            config = make_numpy_model.write_model(tmp, "llama", seed=1)
            out = os.path.join(tmp, "logits.txt")
            rc = reference_forward.main(
                ["--model", tmp, "--ids", ",".join(map(str, IDS)), "--out", out]
            )
            self.assertEqual(rc, 0)
            with open(out) as f:
                written = np.array([float(line) for line in f])
            self.assertEqual(len(written), config["vocab_size"])
            expected = reference_forward.Model(tmp).forward(IDS)[-1]
            np.testing.assert_allclose(written, expected, rtol=1e-8, atol=1e-12)
            # float32 arithmetic stays well inside the comparison tolerance.
            rc = reference_forward.main(
                ["--model", tmp, "--ids", ",".join(map(str, IDS)), "--out", out,
                 "--dtype", "float32"]
            )
            self.assertEqual(rc, 0)
            with open(out) as f:
                as_f32 = np.array([float(line) for line in f])
            self.assertLess(np.abs(as_f32 - expected).max(), 1e-5)

    def test_refusals_name_the_problem(self):
        with tempfile.TemporaryDirectory() as tmp:
            make_numpy_model.write_model(tmp, "llama", seed=1)
            cases = [
                ({"model_type": "gpt2"}, "gpt2.*supported: llama"),
                ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "yarn"),
                ({"num_hidden_layers": 3}, "model.layers.2"),
                ({"tie_word_embeddings": True}, "ignore.*lm_head"),
            ]
            with open(os.path.join(tmp, "config.json")) as f:
                base = json.load(f)
            for change, pattern in cases:
                with self.subTest(pattern), open(os.path.join(tmp, "config.json"), "w") as f:
                    json.dump(dict(base, **change), f)
                with self.subTest(pattern), self.assertRaisesRegex(
                    reference_forward.ReferenceError, pattern
                ):
                    reference_forward.Model(tmp)
            with self.assertRaisesRegex(reference_forward.ReferenceError, "ids"):
                with open(os.path.join(tmp, "config.json"), "w") as f:
                    json.dump(base, f)
                reference_forward.Model(tmp).forward([base["vocab_size"]])


if __name__ == "__main__":
    unittest.main(verbosity=1)
