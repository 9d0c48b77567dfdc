#include "plan/device_profile.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace mg {

namespace {

using json = nlohmann::json;

// The calibration constants, fitted on the first half of docs/reference/formulas.md's weak-scaling table
// with the H100's datasheet figures (docs/planner.md, bench/plan_weak_scaling.py;
// attention.efficiency and exposed_comm_fraction held fixed there). The A100 and H200
// profiles reuse them: no published table calibrates those separately.
constexpr const char* kCalibration = R"json({
  "gemm_efficiency": {"max": 0.94, "half_dim": 3072},
  "attention": {"efficiency": 0.5, "half_dim": 0, "causal_fraction": 0.5, "fp32_compute": false,
                "causal_block": 0, "dropout_ns_per_element": 0},
  "elementwise_efficiency": 1,
  "exposed_comm_fraction": 0.3,
  "dp_exposed_fraction": 0.25
})json";

// Datasheet peaks, memory and links of each built-in, completed by kCalibration.
const std::map<std::string, std::string>& builtins() {
  static const std::map<std::string, std::string> profiles = [] {
    const std::map<std::string, const char*> hardware = {
        {"h100-sxm", R"json({
  "name": "h100-sxm",
  "description": "NVIDIA H100 SXM5 80GB; NVLink 4 inside 8-GPU nodes, 8 x 400 Gb/s InfiniBand",
  "peak_tflops": {"fp32": 67, "bf16": 989, "fp16": 989},
  "memory_bandwidth_gbs": 3350,
  "memory_gib": 80,
  "intra_node": {"bandwidth_gbs": 450, "latency_us": 5},
  "inter_node": {"bandwidth_gbs": 50, "latency_us": 10},
  "devices_per_node": 8
})json"},
        {"h200", R"json({
  "name": "h200",
  "description": "NVIDIA H200 SXM 141GB; H100 arithmetic with 4.8 TB/s HBM3e; NVLink 4, 8 x 400 Gb/s InfiniBand",
  "peak_tflops": {"fp32": 67, "bf16": 989, "fp16": 989},
  "memory_bandwidth_gbs": 4800,
  "memory_gib": 131.3,
  "intra_node": {"bandwidth_gbs": 450, "latency_us": 5},
  "inter_node": {"bandwidth_gbs": 50, "latency_us": 10},
  "devices_per_node": 8
})json"},
        {"a100-80gb", R"json({
  "name": "a100-80gb",
  "description": "NVIDIA A100 SXM4 80GB; NVLink 3 inside 8-GPU nodes, 8 x 200 Gb/s InfiniBand (Selene)",
  "peak_tflops": {"fp32": 19.5, "bf16": 312, "fp16": 312},
  "memory_bandwidth_gbs": 2039,
  "memory_gib": 80,
  "intra_node": {"bandwidth_gbs": 300, "latency_us": 5},
  "inter_node": {"bandwidth_gbs": 25, "latency_us": 10},
  "devices_per_node": 8
})json"},
    };
    std::map<std::string, std::string> out;
    for (const auto& [name, text] : hardware) {
      json j = json::parse(text);
      j.merge_patch(json::parse(kCalibration));
      out[name] = j.dump(2);
    }
    return out;
  }();
  return profiles;
}

// The field at `path` ("a.b") as a positive number; UsageError naming source and field.
double number(const json& j, const std::string& path, const std::string& source,
              bool allow_zero = false) {
  const json* at = &j;
  std::string walked;
  std::istringstream parts(path);
  for (std::string key; std::getline(parts, key, '.');) {
    walked += (walked.empty() ? "" : ".") + key;
    MG_USER_CHECK(at->is_object() && at->contains(key), "device profile ", source,
                  ": missing field \"", walked, "\" (docs/planner.md lists a profile's fields)");
    at = &(*at)[key];
  }
  MG_USER_CHECK(at->is_number(), "device profile ", source, ": field \"", path,
                "\" must be a number, not ", at->dump());
  const double v = at->get<double>();
  MG_USER_CHECK(std::isfinite(v) && (v > 0 || (allow_zero && v == 0)) && v <= 1e9,
                "device profile ", source, ": field \"", path, "\" must be ",
                allow_zero ? "non-negative" : "positive", " and at most 1e9, not ", at->dump());
  return v;
}

}  // namespace

double DeviceProfile::peak(DType t) const {
  return t == DType::BF16 ? peak_bf16 : t == DType::F16 ? peak_fp16 : peak_fp32;
}

double DeviceProfile::gemm_seconds(int64_t M, int64_t N, int64_t K, DType t) const {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  // The shape's size: the harmonic mean of its dimensions (a cube's side; a small one weighs).
  const double d = 3.0 / (1.0 / double(M) + 1.0 / double(N) + 1.0 / double(K));
  const double efficiency = gemm_max_efficiency * d / (d + gemm_half_dim);
  return 2.0 * double(M) * double(N) * double(K) / (peak(t) * efficiency);
}

double DeviceProfile::attention_fraction(int64_t S_keys) const {
  return std::min(1.0, attention_causal_fraction + attention_causal_block / (2.0 * double(S_keys)));
}

std::vector<std::string> builtin_profile_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : builtins()) names.push_back(name);
  names.push_back("cpu");
  return names;
}

DeviceProfile parse_device_profile(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw UsageError(str_cat("device profile ", source, " is not valid JSON: ", e.what()));
  }
  MG_USER_CHECK(j.is_object(), "device profile ", source, " must be a JSON object");
  DeviceProfile p;
  for (const char* key : {"name", "description"})
    MG_USER_CHECK(!j.contains(key) || j[key].is_string(), "device profile ", source, ": field \"",
                  key, "\" must be a string");
  p.name = j.value("name", source);
  p.description = j.value("description", "");
  p.peak_fp32 = number(j, "peak_tflops.fp32", source) * 1e12;
  p.peak_bf16 = number(j, "peak_tflops.bf16", source) * 1e12;
  p.peak_fp16 = number(j, "peak_tflops.fp16", source) * 1e12;
  p.gemm_max_efficiency = number(j, "gemm_efficiency.max", source);
  p.gemm_half_dim = number(j, "gemm_efficiency.half_dim", source, true);
  p.attention_efficiency = number(j, "attention.efficiency", source);
  p.attention_causal_fraction = number(j, "attention.causal_fraction", source);
  p.attention_half_dim = number(j, "attention.half_dim", source, true);
  p.attention_causal_block = number(j, "attention.causal_block", source, true);
  MG_USER_CHECK(j["attention"].contains("fp32_compute") &&
                    j["attention"]["fp32_compute"].is_boolean(),
                "device profile ", source,
                ": field \"attention.fp32_compute\" must be true or "
                "false (whether the attention kernel computes in fp32 whatever the model dtype)");
  p.attention_fp32 = j["attention"]["fp32_compute"].get<bool>();
  p.attention_dropout_seconds = number(j, "attention.dropout_ns_per_element", source, true) * 1e-9;
  p.memory_bandwidth = number(j, "memory_bandwidth_gbs", source) * 1e9;
  p.elementwise_efficiency = number(j, "elementwise_efficiency", source);
  p.memory_bytes = int64_t(number(j, "memory_gib", source) * double(int64_t(1) << 30));
  p.intra_node = {number(j, "intra_node.bandwidth_gbs", source) * 1e9,
                  number(j, "intra_node.latency_us", source, true) * 1e-6};
  p.inter_node = {number(j, "inter_node.bandwidth_gbs", source) * 1e9,
                  number(j, "inter_node.latency_us", source, true) * 1e-6};
  const double per_node = number(j, "devices_per_node", source);
  MG_USER_CHECK(per_node >= 1 && per_node == std::floor(per_node), "device profile ", source,
                ": field \"devices_per_node\" must be a whole number of at least 1, not ",
                per_node);
  p.devices_per_node = int64_t(per_node);
  p.exposed_comm_fraction = number(j, "exposed_comm_fraction", source, true);
  p.dp_exposed_fraction = number(j, "dp_exposed_fraction", source, true);
  MG_USER_CHECK(p.gemm_max_efficiency <= 1 && p.attention_efficiency <= 1 &&
                    p.elementwise_efficiency <= 1 && p.attention_causal_fraction <= 1 &&
                    p.exposed_comm_fraction <= 1 && p.dp_exposed_fraction <= 1,
                "device profile ", source, ": efficiencies and fractions are at most 1");
  return p;
}

DeviceProfile load_device_profile(const std::string& name_or_file) {
  if (const auto it = builtins().find(name_or_file); it != builtins().end())
    return parse_device_profile(it->second, name_or_file);
  std::ifstream in(name_or_file);
  if (!in) {
    std::string names;
    for (const std::string& n : builtin_profile_names()) names += " " + n;
    throw UsageError(str_cat("--device-profile ", name_or_file, ": neither a built-in profile (",
                             names.substr(1),
                             ") nor a readable file; `megatron plan --profile-device --output "
                             "FILE` measures one for this machine"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_device_profile(text.str(), name_or_file);
}

std::string device_profile_json(const DeviceProfile& p) {
  const json j = {
      {"name", p.name},
      {"description", p.description},
      {"peak_tflops",
       {{"fp32", p.peak_fp32 / 1e12}, {"bf16", p.peak_bf16 / 1e12}, {"fp16", p.peak_fp16 / 1e12}}},
      {"gemm_efficiency", {{"max", p.gemm_max_efficiency}, {"half_dim", p.gemm_half_dim}}},
      {"attention",
       {{"efficiency", p.attention_efficiency},
        {"half_dim", p.attention_half_dim},
        {"causal_fraction", p.attention_causal_fraction},
        {"causal_block", p.attention_causal_block},
        {"fp32_compute", p.attention_fp32},
        {"dropout_ns_per_element", p.attention_dropout_seconds * 1e9}}},
      {"memory_bandwidth_gbs", p.memory_bandwidth / 1e9},
      {"elementwise_efficiency", p.elementwise_efficiency},
      {"memory_gib", double(p.memory_bytes) / double(int64_t(1) << 30)},
      {"intra_node",
       {{"bandwidth_gbs", p.intra_node.bandwidth / 1e9},
        {"latency_us", p.intra_node.latency * 1e6}}},
      {"inter_node",
       {{"bandwidth_gbs", p.inter_node.bandwidth / 1e9},
        {"latency_us", p.inter_node.latency * 1e6}}},
      {"devices_per_node", p.devices_per_node},
      {"exposed_comm_fraction", p.exposed_comm_fraction},
      {"dp_exposed_fraction", p.dp_exposed_fraction}};
  return j.dump(2) + "\n";
}

}  // namespace mg
