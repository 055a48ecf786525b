// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "ps/optimizer.h"

#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bytes.h"
#include "reduce/reduce.h"

namespace ddp::ps {

namespace {

// State serialised as a small header (the step, the arrays' sizes), then the arrays raw; Load
// checks the sizes.
std::string SaveArrays(int64_t step, const std::vector<double>& a, const std::vector<double>& b) {
  std::string out;
  ByteWriter w(&out);
  w.Put(step);
  w.Put(static_cast<uint64_t>(a.size()));
  w.Put(static_cast<uint64_t>(b.size()));
  // An empty vector's data() may be null, which no copy may be given, even of nothing.
  const auto put = [&w](const std::vector<double>& v) {
    if (!v.empty()) {
      w.PutBytes(
          absl::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double)));
    }
  };
  put(a);
  put(b);
  return out;
}

absl::Status LoadArrays(absl::string_view in, int64_t* step, std::vector<double>* a,
                        std::vector<double>* b) {
  ByteReader r(in);
  int64_t saved_step = 0;
  uint64_t na = 0;
  uint64_t nb = 0;
  if (!r.Get(&saved_step) || !r.Get(&na) || !r.Get(&nb)) {
    return absl::DataLossError("optimizer state is truncated");
  }
  *step = saved_step;
  if (na != a->size() || nb != b->size() || r.remaining() != (na + nb) * sizeof(double)) {
    return absl::DataLossError("optimizer state does not fit this partition");
  }
  // The sizes fit: both reads succeed. (As above: no null data() given, even for nothing.)
  const bool read = (na == 0 || r.GetBytes(na * sizeof(double), a->data())) &&
                    (nb == 0 || r.GetBytes(nb * sizeof(double), b->data()));
  return read ? absl::OkStatus() : absl::DataLossError("optimizer state is truncated");
}

// torch.optim.SGD: g = scale*grad + wd*p; buf = momentum*buf + g (buf = g at first);
// g = nesterov ? g + momentum*buf : buf; p -= lr*g. State kept in f64 whatever the dtype.
class Sgd final : public ServerOptimizer {
 public:
  Sgd(const OptimizerConfig& c, size_t count) : c_(c), buf_(c.momentum != 0 ? count : 0, 0.0) {}
  void Apply(float* v, const float* g, size_t n) override { Run(v, g, n); }
  void Apply(double* v, const double* g, size_t n) override { Run(v, g, n); }
  std::string SaveState() const override { return SaveArrays(steps_, buf_, {}); }
  absl::Status LoadState(absl::string_view s) override {
    std::vector<double> none;
    return LoadArrays(s, &steps_, &buf_, &none);
  }

 private:
  template <typename T>
  void Run(T* v, const T* g, size_t n) {
    const bool first = steps_ == 0;
    for (size_t i = 0; i < n; ++i) {
      double d = c_.gradient_scale * static_cast<double>(g[i]);
      if (c_.weight_decay != 0) d += c_.weight_decay * static_cast<double>(v[i]);
      if (c_.momentum != 0) {
        buf_[i] = first ? d : c_.momentum * buf_[i] + d;
        d = c_.nesterov ? d + c_.momentum * buf_[i] : buf_[i];
      }
      v[i] = static_cast<T>(static_cast<double>(v[i]) - c_.learning_rate * d);
    }
    ++steps_;
  }
  OptimizerConfig c_;
  std::vector<double> buf_;
  int64_t steps_ = 0;
};

// torch.optim.Adam (not AdamW: weight decay is added to the gradient).
class Adam final : public ServerOptimizer {
 public:
  Adam(const OptimizerConfig& c, size_t count) : c_(c), m_(count, 0.0), v_(count, 0.0) {}
  void Apply(float* v, const float* g, size_t n) override { Run(v, g, n); }
  void Apply(double* v, const double* g, size_t n) override { Run(v, g, n); }
  std::string SaveState() const override { return SaveArrays(steps_, m_, v_); }
  absl::Status LoadState(absl::string_view s) override { return LoadArrays(s, &steps_, &m_, &v_); }

 private:
  template <typename T>
  void Run(T* p, const T* g, size_t n) {
    ++steps_;
    const double c1 = 1.0 - std::pow(c_.beta1, static_cast<double>(steps_));
    const double c2 = 1.0 - std::pow(c_.beta2, static_cast<double>(steps_));
    for (size_t i = 0; i < n; ++i) {
      double d = c_.gradient_scale * static_cast<double>(g[i]);
      if (c_.weight_decay != 0) d += c_.weight_decay * static_cast<double>(p[i]);
      m_[i] = c_.beta1 * m_[i] + (1 - c_.beta1) * d;
      v_[i] = c_.beta2 * v_[i] + (1 - c_.beta2) * d * d;
      const double denom = std::sqrt(v_[i] / c2) + c_.epsilon;
      p[i] = static_cast<T>(static_cast<double>(p[i]) - c_.learning_rate * (m_[i] / c1) / denom);
    }
  }
  OptimizerConfig c_;
  std::vector<double> m_;
  std::vector<double> v_;
  int64_t steps_ = 0;
};

// value += scale*gradient.
class Sum final : public ServerOptimizer {
 public:
  explicit Sum(const OptimizerConfig& c) : scale_(c.gradient_scale) {}
  void Apply(float* v, const float* g, size_t n) override { Run(v, g, n); }
  void Apply(double* v, const double* g, size_t n) override { Run(v, g, n); }
  std::string SaveState() const override { return ""; }
  absl::Status LoadState(absl::string_view s) override {
    return s.empty() ? absl::OkStatus() : absl::DataLossError("sum keeps no state");
  }

 private:
  template <typename T>
  void Run(T* v, const T* g, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      v[i] = static_cast<T>(static_cast<double>(v[i]) + scale_ * static_cast<double>(g[i]));
    }
  }
  double scale_;
};

std::mutex g_registry_mu;
std::map<std::string, OptimizerFactory>& Registry() {
  static auto* registry = new std::map<std::string, OptimizerFactory>();
  return *registry;
}

bool BuiltIn(const std::string& name) { return name == "sgd" || name == "adam" || name == "sum"; }

}  // namespace

absl::Status RegisterOptimizer(const std::string& name, OptimizerFactory factory) {
  if (name.empty() || name.size() >= 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer name '", name, "' must have 1 to 31 characters"));
  }
  if (BuiltIn(name)) {
    return absl::AlreadyExistsError(absl::StrCat("optimizer '", name, "' is built in"));
  }
  if (!factory) return absl::InvalidArgumentError("RegisterOptimizer: empty factory");
  std::lock_guard<std::mutex> lock(g_registry_mu);
  Registry()[name] = std::move(factory);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ServerOptimizer>> MakeOptimizer(const OptimizerConfig& config,
                                                               size_t count) {
  if (config.name == "sgd") return std::unique_ptr<ServerOptimizer>(new Sgd(config, count));
  if (config.name == "adam") return std::unique_ptr<ServerOptimizer>(new Adam(config, count));
  if (config.name == "sum") return std::unique_ptr<ServerOptimizer>(new Sum(config));
  OptimizerFactory factory;
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    auto it = Registry().find(config.name);
    if (it != Registry().end()) factory = it->second;
  }
  if (!factory) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown server optimizer '", config.name,
        "' (built in: sgd, adam, sum; others must be registered in the server's process)"));
  }
  auto made = factory(config, count);
  if (made == nullptr) {
    return absl::InternalError(absl::StrCat("optimizer factory '", config.name, "' gave nothing"));
  }
  return made;
}

void ApplyOptimizer(ServerOptimizer& optimizer, DataType type, void* value, const void* gradient,
                    size_t count) {
  switch (type) {
    case DataType::kFloat32:
      optimizer.Apply(static_cast<float*>(value), static_cast<const float*>(gradient), count);
      return;
    case DataType::kFloat64:
      optimizer.Apply(static_cast<double*>(value), static_cast<const double*>(gradient), count);
      return;
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      const bool half = type == DataType::kFloat16;
      auto* v16 = static_cast<uint16_t*>(value);
      const auto* g16 = static_cast<const uint16_t*>(gradient);
      std::vector<float> v(count);
      std::vector<float> g(count);
      for (size_t i = 0; i < count; ++i) {
        v[i] = half ? reduce::HalfToFloat(v16[i]) : reduce::BFloat16ToFloat(v16[i]);
        g[i] = half ? reduce::HalfToFloat(g16[i]) : reduce::BFloat16ToFloat(g16[i]);
      }
      optimizer.Apply(v.data(), g.data(), count);
      for (size_t i = 0; i < count; ++i) {
        v16[i] = half ? reduce::FloatToHalf(v[i]) : reduce::FloatToBFloat16(v[i]);
      }
      return;
    }
    default:
      return;  // refused at registration: async keys are floating
  }
}

OptimizerConfig OptimizerOf(const PartitionConfig& c) {
  OptimizerConfig o;
  o.name = std::string(c.optimizer, strnlen(c.optimizer, kOptimizerNameBytes));
  o.learning_rate = c.learning_rate;
  o.momentum = c.momentum;
  o.nesterov = c.nesterov != 0;
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.epsilon = c.epsilon;
  o.weight_decay = c.weight_decay;
  o.gradient_scale = c.gradient_scale;
  return o;
}

}  // namespace ddp::ps
