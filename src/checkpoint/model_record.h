// The model record that checkpoints and --dump-final-params files keep: every field of
// model/fields.cpp with its resolved value (GPTConfig::resolved(): F, HD, query groups, the
// position table as the run used them) plus the padded vocabulary. Reading one back validates
// each field's type and range, and the check against a run names every difference as flags.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/config.h"

namespace mg {

// The model record of cfg (every field, resolved).
nlohmann::json model_record(const GPTConfig& cfg);
// A model record back into a validated config. A field missing from the record (an older
// checkpoint) keeps its default, which is what version-1 (GPT-2) checkpoints were trained with.
// `what` names the file in messages ("checkpoint metadata 'PATH'").
GPTConfig model_from_record(const nlohmann::json& record, const std::string& what);
// Stops with one message listing every structural field on which the saved model (read by
// model_from_record) and cfg disagree, as the flags that give each; `where` names the file
// ("checkpoint 'DIR'").
void check_model_record(const GPTConfig& saved, const GPTConfig& cfg, const std::string& where);

}  // namespace mg
