// The --dump-final-params file: PATH holds the single-rank model's parameters as raw little-
// endian fp32 in gpt_param_layout order (easy to read from numpy), and PATH.json describes it:
// the model record (model_record.h), every parameter's name, shape and offset, and the byte
// count and CRC-32 of PATH. `generate --load-params` checks all of them before using the values.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace mg {

constexpr int kParamsFileVersion = 2;  // 1: a bare list of parameters, no model, no checksum

// Writes PATH (atomically), then PATH.json (atomically): a crash in between leaves a PATH.json
// whose checksum does not match, which the reader reports.
void write_params_file(const std::string& path, const std::vector<float>& flat,
                       const GPTConfig& cfg);
// Reads PATH into params (cfg's single-rank layout), after checking PATH.json's model record
// against cfg (a mismatch names the flags), its parameter list, the byte count and the CRC-32.
void read_params_file(const std::string& path, const GPTConfig& cfg, float* params);

}  // namespace mg
