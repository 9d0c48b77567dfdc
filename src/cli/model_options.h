// The model flags of `megatron train` and `megatron generate`, generated from the model config's
// field list (model/fields.h), so the CLI, the checkpoint record and its check cannot drift.
#pragma once
#include <vector>

#include "cli/option_table.h"
#include "model/fields.h"

namespace mg {

template <typename Config, typename ModelOf>
std::vector<Option<Config>> model_options(ModelOf model_of) {
  std::vector<Option<Config>> out;
  for (const ModelField& f : model_fields()) {
    const bool is_switch = f.metavar[0] == '\0';
    out.push_back({f.flag, f.metavar, f.help,
                   [f, model_of, is_switch](Config& c, const std::vector<std::string>& values) {
                     set_field(model_of(c), f,
                               is_switch ? (f.negated ? "false" : "true") : values.at(0));
                   },
                   [f, model_of](const Config& c) {
                     return field_text(model_of(const_cast<Config&>(c)), f);
                   }});
  }
  // Megatron's switch: no learned position table (RoPE, if chosen, stays on), whatever the order.
  out.push_back({"--no-position-embedding", "",
                 "no learned position table (with --position-embedding-type rope, RoPE stays on)",
                 [model_of](Config& c, const std::vector<std::string>&) {
                   model_of(c).no_position_embedding = true;
                 },
                 [](const Config&) { return std::string(); }});
  return out;
}

}  // namespace mg
