#include "checkpoint/params_file.h"

#include <climits>
#include <cstring>

#include <nlohmann/json.hpp>

#include "checkpoint/files.h"
#include "checkpoint/json_fields.h"
#include "checkpoint/model_record.h"
#include "core/error.h"
#include "model/param_layout.h"

namespace mg {

namespace {

using json = nlohmann::json;
constexpr const char* kFormat = "megatron-cpp-params";

}  // namespace

void write_params_file(const std::string& path, const std::vector<float>& flat,
                       const GPTConfig& cfg) {
  ckpt::AtomicFileWriter w(path);
  w.write(flat.data(), flat.size() * sizeof(float));
  w.commit();
  json params = json::array();
  const ParamLayout layout = gpt_param_layout(cfg);
  for (const ParamSpec& p : layout.params())
    params.push_back({{"name", p.name}, {"shape", p.global_shape}, {"offset", p.offset}});
  const json manifest = {{"format", kFormat},
                         {"version", kParamsFileVersion},
                         {"model", model_record(cfg)},
                         {"dtype", "f32"},
                         {"bytes", w.bytes()},
                         {"crc32", w.crc()},
                         {"params", params}};
  ckpt::write_file_atomic(path + ".json", manifest.dump(1) + "\n");
}

void read_params_file(const std::string& path, const GPTConfig& cfg, float* params) {
  const std::string mpath = path + ".json";
  const std::string what = "--load-params: '" + mpath + "'";
  const std::string text = ckpt::read_text_file(mpath);
  MG_USER_CHECK(text.find_first_not_of(" \t\r\n") == std::string::npos ||
                    text[text.find_first_not_of(" \t\r\n")] != '[',
                what,
                " is the bare parameter list of an older megatron-cpp, which records neither "
                "the model nor a checksum: write the file again with train --dump-final-params");
  const json j = ckpt::JsonFields::parse_object(text, what);
  const ckpt::JsonFields f(j, what);
  MG_USER_CHECK(f.has("format") && f.raw("format") == kFormat, what,
                " is not the description of a --dump-final-params file");
  f.integer("version", kParamsFileVersion, kParamsFileVersion);
  f.one_of("dtype", {"f32"});
  MG_USER_CHECK(f.raw("model").is_object(), f.name("model"), " must be an object");
  check_model_record(model_from_record(f.raw("model"), what), cfg, "--load-params '" + path + "'");

  const ParamLayout layout = gpt_param_layout(cfg);
  const std::vector<ckpt::JsonFields> listed = f.objects("params");
  MG_USER_CHECK(listed.size() == layout.params().size(), what, " lists ", listed.size(),
                " parameters but this model has ", layout.params().size(),
                "; pass the model flags it was trained with");
  for (size_t i = 0; i < listed.size(); ++i) {
    const ParamSpec& p = layout.params()[i];
    const std::string name = listed[i].string("name");
    const Shape shape = listed[i].integers("shape", 0, INT_MAX);
    MG_USER_CHECK(name == p.name && shape == p.global_shape &&
                      listed[i].integer("offset", 0) == p.offset,
                  what, ": parameter ", i, " is '", name, "' of shape ", shape_str(shape),
                  " but this model's is '", p.name, "' of shape ", shape_str(p.global_shape),
                  "; pass the model flags it was trained with");
  }
  const uint64_t bytes = uint64_t(layout.total_numel()) * sizeof(float);
  MG_USER_CHECK(uint64_t(f.integer("bytes", 0)) == bytes, what, " records ", f.integer("bytes", 0),
                " bytes but this model's parameters take ", bytes);
  const ckpt::MappedFile data(path);
  MG_USER_CHECK(data.size() == bytes, "--load-params: '", path, "' has ", data.size(),
                " bytes but should hold ", layout.total_numel(), " fp32 values (truncated?)");
  MG_USER_CHECK(ckpt::crc32_of(data.data(), data.size()) == f.crc("crc32"), "--load-params: '",
                path, "' is corrupt or does not belong to '", mpath, "' (CRC-32 mismatch)");
  if (bytes > 0) std::memcpy(params, data.data(), bytes);
}

}  // namespace mg
