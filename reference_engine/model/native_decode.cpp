// A decode step's decoder stack in C++: the very ATen calls of `llama.py` and the torch
// attention backend's decode path, in the same order with the same arguments, so results are
// bit for bit those of the Python path. What it removes is Python's cost per call (argument
// parsing, module dispatch, temporaries): at batch 1 a SmolLM2 layer makes ~70 torch calls
// around 4 matmuls, and that overhead was a third of the step. See native_decode.py for when
// it applies; everything else (prefill, quantized KV caches, Triton) stays in Python.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <vector>

namespace {

// How a projection's weights are held (the Python modules it mirrors).
enum Kind : int64_t {
  kDense = 0,  // nn.Linear: F.linear(x, weight)
  kFp16 = 1,   // Fp16Linear: quantized::linear_dynamic_fp16(x, packed), float32 in and out
  kInt8 = 2,   // Int8Linear: aten::_weight_int8pack_mm on bfloat16 activations
};

struct Projection {
  int64_t kind;
  at::Tensor weight;  // dense weight, or int8 qweight
  at::Tensor scales;  // int8 scales
  c10::IValue packed;  // fbgemm's packed fp16 weight (a torchbind object)
};

at::Tensor linear_fp16(const at::Tensor& x, const c10::IValue& packed) {
  // Called boxed, as torch's Python binding calls it: the op's own kernel, whatever its C++
  // signature is in this torch release.
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_dynamic_fp16", "");
  torch::jit::Stack stack{x, packed};
  op.callBoxed(&stack);
  return stack.back().toTensor();
}

at::Tensor project(const Projection& p, const at::Tensor& x) {
  switch (p.kind) {
    case kDense:
      return at::linear(x, p.weight);
    case kFp16:
      // Fp16Linear.forward: a flat float32 batch goes straight in; anything else is widened.
      if (x.scalar_type() == at::kFloat) return linear_fp16(x, p.packed);
      return linear_fp16(x.to(at::kFloat), p.packed).to(x.scalar_type());
    default: {
      at::Tensor out = at::_weight_int8pack_mm(x.to(at::kBFloat16), p.weight, p.scales);
      return out.to(x.scalar_type());
    }
  }
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  xf = xf * at::rsqrt(at::pow(xf, 2).mean(-1, /*keepdim=*/true) + eps);
  return weight * xf.to(x.scalar_type());
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  at::Tensor xf = x.to(at::kFloat);
  const int64_t half = xf.size(-1) / 2;
  at::Tensor rotated = at::cat({at::neg(xf.slice(-1, half)), xf.slice(-1, 0, half)}, -1);
  return (xf * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)).to(x.scalar_type());
}

// torch_backend.write_kv for an unquantized cache and a batch without padding slots.
void write_kv(const at::Tensor& x, const at::Tensor& data, const at::Tensor& slots) {
  at::Tensor rows = data.view({-1, data.size(2), data.size(3)});
  rows.index_copy_(0, slots, x.to(data.scalar_type()));
}

// torch_backend._gather_pages + dequantize for an unquantized cache: [B, S, KVH, D] in fp32.
at::Tensor gather_pages(const at::Tensor& data, const at::Tensor& ids, int64_t num_seqs) {
  at::Tensor rows = data.view({data.size(0), -1}).index_select(0, ids);
  return rows.view({num_seqs, -1, data.size(2), data.size(3)}).to(at::kFloat);
}

}  // namespace

struct DecodeStack : torch::CustomClassHolder {
  int64_t num_heads, num_kv_heads, head_dim;
  double scale;
  bool fused_qkv, fused_gate_up;
  std::vector<at::Tensor> norms;  // per layer: input, post-attention
  std::vector<double> eps;
  std::vector<Projection> projections;  // per layer: q,k,v (or qkv), o, gate,up (or gate_up), down
  at::Tensor final_norm;
  double final_eps = 0.0;

  DecodeStack(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double scale, bool fused_qkv,
              bool fused_gate_up)
      : num_heads(num_heads),
        num_kv_heads(num_kv_heads),
        head_dim(head_dim),
        scale(scale),
        fused_qkv(fused_qkv),
        fused_gate_up(fused_gate_up) {}

  void add_norm(at::Tensor weight, double epsilon) {
    norms.push_back(std::move(weight));
    eps.push_back(epsilon);
  }

  void add_projection(int64_t kind, c10::optional<at::Tensor> weight, c10::optional<at::Tensor> scales,
                      c10::IValue packed) {
    TORCH_CHECK(kind == kDense || kind == kFp16 || kind == kInt8, "unknown projection kind ", kind);
    projections.push_back(
        {kind, weight.value_or(at::Tensor()), scales.value_or(at::Tensor()), std::move(packed)});
  }

  void set_final_norm(at::Tensor weight, double epsilon) {
    final_norm = std::move(weight);
    final_eps = epsilon;
  }

  int64_t projections_per_layer() const { return (fused_qkv ? 1 : 3) + 1 + (fused_gate_up ? 1 : 2) + 1; }

  // paged_decode_attention for an unquantized cache, every query row a sequence of its own.
  at::Tensor attention(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                       const at::Tensor& ids, const at::Tensor& bias, int64_t num_seqs) const {
    at::Tensor k = gather_pages(key_cache, ids, num_seqs);
    at::Tensor v = gather_pages(value_cache, ids, num_seqs);
    const int64_t group = num_heads / num_kv_heads;
    at::Tensor q = query.slice(0, 0, num_seqs).to(at::kFloat).view({num_seqs, num_kv_heads, group, head_dim});
    at::Tensor attended;
    if (num_seqs == 1) {
      at::Tensor k0 = k.select(0, 0), v0 = v.select(0, 0);
      const int64_t seq = k0.size(0);
      at::Tensor scores = at::baddbmm(bias.expand({num_kv_heads, group, seq}), q.select(0, 0),
                                      k0.permute({1, 2, 0}), /*beta=*/1, /*alpha=*/scale);
      attended = at::bmm(at::softmax(scores, -1), v0.transpose(0, 1));
    } else {
      attended = at::empty({num_seqs, num_kv_heads, group, head_dim}, query.options().dtype(at::kFloat));
      for (int64_t h = 0; h < num_kv_heads; ++h) {
        at::Tensor scores = at::baddbmm(bias, q.select(1, h), k.select(2, h).transpose(1, 2),
                                        /*beta=*/1, /*alpha=*/scale);
        at::Tensor out = attended.select(1, h);
        at::bmm_out(out, at::softmax(scores, -1), v.select(2, h));
      }
    }
    return attended.view({num_seqs, num_heads, head_dim}).to(query.scalar_type());
  }

  // Every layer and the final norm, for hidden states `x` [B, hidden] of B decoding sequences.
  at::Tensor forward(at::Tensor x, at::Tensor cos, at::Tensor sin, std::vector<at::Tensor> keys,
                     std::vector<at::Tensor> values, at::Tensor slots, at::Tensor ids, at::Tensor bias) {
    const int64_t layers = static_cast<int64_t>(norms.size()) / 2;
    TORCH_CHECK(static_cast<int64_t>(keys.size()) == layers && static_cast<int64_t>(values.size()) == layers,
                "expected ", layers, " KV caches");
    TORCH_CHECK(static_cast<int64_t>(projections.size()) == layers * projections_per_layer(),
                "projections do not match the layers");
    const int64_t t = x.size(0), h = num_heads, kvh = num_kv_heads, d = head_dim;
    size_t p = 0;
    for (int64_t l = 0; l < layers; ++l) {
      at::Tensor normed = rms_norm(x, norms[2 * l], eps[2 * l]);
      at::Tensor q, k, v;
      if (fused_qkv) {
        at::Tensor qkv = project(projections[p++], normed).view({t, h + 2 * kvh, d});
        at::Tensor rotated = apply_rope(qkv.slice(1, 0, h + kvh), cos, sin);
        q = rotated.slice(1, 0, h);
        k = rotated.slice(1, h, h + kvh);
        v = qkv.slice(1, h + kvh);
      } else {
        q = apply_rope(project(projections[p++], normed).reshape({t, h, d}), cos, sin);
        k = apply_rope(project(projections[p++], normed).reshape({t, kvh, d}), cos, sin);
        v = project(projections[p++], normed).reshape({t, kvh, d});
      }
      write_kv(k, keys[l], slots);
      write_kv(v, values[l], slots);
      at::Tensor attended = attention(q, keys[l], values[l], ids, bias, t);
      x = x + project(projections[p++], attended.reshape({t, h * d}).to(x.scalar_type()));
      normed = rms_norm(x, norms[2 * l + 1], eps[2 * l + 1]);
      at::Tensor gate, up;
      if (fused_gate_up) {
        auto halves = project(projections[p++], normed).chunk(2, -1);
        gate = halves[0];
        up = halves[1];
      } else {
        gate = project(projections[p++], normed);
        up = project(projections[p++], normed);
      }
      x = x + project(projections[p++], at::silu(gate) * up);
    }
    return rms_norm(x, final_norm, final_eps);
  }
};

TORCH_LIBRARY(kvscope, m) {
  m.class_<DecodeStack>("DecodeStack")
      .def(torch::init<int64_t, int64_t, int64_t, double, bool, bool>())
      .def("add_norm", &DecodeStack::add_norm)
      .def("add_projection", &DecodeStack::add_projection)
      .def("set_final_norm", &DecodeStack::set_final_norm)
      .def("forward", &DecodeStack::forward);
}
