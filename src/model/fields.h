// The model config's fields, listed once: each field's Megatron flag, its key in checkpoint
// metadata, its help text and whether a checkpoint must agree on it to load. The CLI's model
// flags, the checkpoint's "model" record and its compatibility check are all generated from
// this list (cli/, checkpoint/), so a new model field is one line here.
#pragma once
#include <string>
#include <variant>
#include <vector>

#include "model/config.h"

namespace mg {

struct ModelField {
  using Member = std::variant<int64_t GPTConfig::*, float GPTConfig::*, bool GPTConfig::*,
                              std::string GPTConfig::*>;
  const char* flag;     // "--hidden-size"
  const char* key;      // "hidden_size"
  const char* metavar;  // "H"; "" for an on/off switch
  const char* help;
  Member member;
  bool structural = true;  // shapes or math of the model: a checkpoint must agree to load
  bool negated = false;    // a switch that sets its bool field to false (--disable-bias-linear)
};

const std::vector<ModelField>& model_fields();

// A field's value as text ("768", "RMSNorm", "true"), and set from text (a flag's value) or
// from a checkpoint's JSON scalar given as text.
std::string field_text(const GPTConfig& c, const ModelField& f);
void set_field(GPTConfig& c, const ModelField& f, const std::string& text);

}  // namespace mg
