#include "checkpoint/model_record.h"

#include <cfloat>
#include <climits>

#include <nlohmann/json.hpp>

#include "checkpoint/json_fields.h"
#include "core/error.h"
#include "model/fields.h"

namespace mg {

namespace {

using json = nlohmann::json;

// A field's value as the flags that give it: "--num-layers 4", "--swiglu", "no --swiglu".
std::string as_flags(const ModelField& f, const json& v) {
  if (f.metavar[0] != '\0')
    return std::string(f.flag) + " " + (v.is_string() ? v.get<std::string>() : v.dump());
  const bool on = v.get<bool>() != f.negated;
  return (on ? "" : "no ") + std::string(f.flag);
}

}  // namespace

json model_record(const GPTConfig& model) {
  const GPTConfig c = model.resolved();
  json j;
  for (const ModelField& f : model_fields()) std::visit([&](auto m) { j[f.key] = c.*m; }, f.member);
  j["padded_vocab_size"] = c.padded_vocab_size();
  return j;
}

GPTConfig model_from_record(const json& record, const std::string& what) {
  MG_USER_CHECK(record.is_object(), what, ": field 'model' must be an object");
  const ckpt::JsonFields r(record, what, "model.");
  GPTConfig c;
  // A record written before dropout existed holds no rates: that model trained without it, so
  // a resumed run that does not give them continues without it (not at the 0.1 defaults).
  c.hidden_dropout = c.attention_dropout = 0.f;
  for (const ModelField& f : model_fields()) {
    if (!r.has(f.key)) continue;
    std::visit(
        [&](auto m) {
          auto& v = c.*m;
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) v = r.string(f.key);
          else if constexpr (std::is_same_v<T, bool>) v = r.boolean(f.key);
          else if constexpr (std::is_same_v<T, float>)
            v = float(r.number(f.key, -FLT_MAX, FLT_MAX));
          else  // sizes and counts: no real model comes near 2^31
            v = r.integer(f.key, 0, INT_MAX);
        },
        f.member);
  }
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw UsageError(what + ": the model record is invalid: " + e.what());
  }
  if (r.has("padded_vocab_size")) {
    const int64_t padded = r.integer("padded_vocab_size", 1, INT_MAX);
    MG_USER_CHECK(padded >= c.vocab_size && padded % c.make_vocab_size_divisible_by == 0,
                  r.name("padded_vocab_size"),
                  " must be a multiple of make_vocab_size_divisible_by ",
                  c.make_vocab_size_divisible_by, " and >= vocab_size ", c.vocab_size, ", got ",
                  padded);
  }
  return c;
}

void check_model_record(const GPTConfig& saved, const GPTConfig& c, const std::string& where) {
  const json now = model_record(c), was = model_record(saved);
  std::string diff;
  for (const ModelField& f : model_fields()) {
    if (!f.structural || was.at(f.key) == now.at(f.key)) continue;
    diff += str_cat(diff.empty() ? "" : "; ", f.key, ": checkpoint ", as_flags(f, was.at(f.key)),
                    ", this run ", as_flags(f, now.at(f.key)));
  }
  MG_USER_CHECK(diff.empty(), where, " holds another model (", diff,
                "); pass the model flags it was trained with");
}

}  // namespace mg
