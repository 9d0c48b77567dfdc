// Reading user JSON files field by field: every malformed document or field is a UsageError
// naming the file and the field's path, never a json.exception.
#include "core/json_fields.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

namespace mg {
namespace {

using json = nlohmann::json;
using Fields = JsonFields<json>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT A USAGE ERROR: ") + e.what();
  }
  return "(no error)";
}

const json kDoc = json::parse(R"({"n_embd": 768, "eps": 1e-5, "name": "gpt2", "tied": true,
  "shape": [4, 8], "big": 18446744073709551615, "neg": -1, "half": 0.5, "nested": {"k": 3},
  "list": [{"a": 1}, {"a": "x"}], "nothing": null})");

TEST(JsonFields, ReadsTypedFields) {
  const Fields f(kDoc, "config.json");
  EXPECT_EQ(f.integer("n_embd", 1), 768);
  EXPECT_DOUBLE_EQ(f.number("eps", 0.0), 1e-5);
  EXPECT_EQ(f.string("name"), "gpt2");
  EXPECT_TRUE(f.boolean("tied"));
  EXPECT_EQ(f.integers("shape"), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(f.at("nested").integer("k"), 3);
  EXPECT_EQ(f.integer_or("nothing", 7), 7);
  EXPECT_EQ(f.integer_or("absent", 9), 9);
  EXPECT_EQ(f.objects("list")[0].integer("a"), 1);
}

TEST(JsonFields, EveryBadFieldNamesFileAndField) {
  const Fields f(kDoc, "config.json");
  EXPECT_EQ(error_of([&] { f.integer("absent"); }), "config.json: field 'absent' is missing");
  EXPECT_EQ(error_of([&] { f.integer("name"); }),
            "config.json: field 'name' must be an integer in [0, 4611686018427387904], got "
            "\"gpt2\"");
  EXPECT_EQ(error_of([&] { f.integer("half"); }),
            "config.json: field 'half' must be an integer in [0, 4611686018427387904], got 0.5");
  // 2^64 - 1 does not wrap to -1.
  EXPECT_NE(error_of([&] { f.integer("big", -5); }).find("field 'big' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.integer("neg"); }).find("got -1"), std::string::npos);
  EXPECT_NE(error_of([&] { f.number("eps", 1.0); }).find("field 'eps' must be a finite number"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { f.string("n_embd"); }),
            "config.json: field 'n_embd' must be a string, got 768");
  EXPECT_EQ(error_of([&] { f.boolean("name"); }),
            "config.json: field 'name' must be true or false, got \"gpt2\"");
  EXPECT_NE(error_of([&] { f.integers("shape", 5); }).find("field 'shape[0]' must be an integer"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { f.at("nested").string("k"); }),
            "config.json: field 'nested.k' must be a string, got 3");
  EXPECT_EQ(error_of([&] { f.objects("list")[1].integer("a"); }).substr(0, 38),
            "config.json: field 'list[1].a' must be");
  EXPECT_NE(error_of([&] { f.at("name"); }).find("field 'name' must be a JSON object"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.objects("name"); }).find("field 'name' must be an array"),
            std::string::npos);
}

TEST(JsonFields, DocumentsThatAreNotObjectsOrNotJson) {
  EXPECT_EQ(error_of([] { Fields(json::parse("[1, 2]"), "m.json"); }),
            "m.json: must be a JSON object, got [1,2]");
  EXPECT_EQ(error_of([] { parse_json_text<json>("{\"a\": ", "m.json"); }),
            "m.json: not valid JSON (parse error at line 1, column 7: syntax error while parsing "
            "value - unexpected end of input; expected '[', '{', or a literal)");
  EXPECT_EQ(error_of([] { parse_json_text<json>("", "m.json"); }).substr(0, 37),
            "m.json: not valid JSON (parse error a");
  // A long value is cut in the message; invalid UTF-8 in it does not throw.
  const json long_text = {{"s", std::string(200, 'a') + "\xff"}};
  const std::string m = error_of([&] { Fields(long_text, "m.json").integer("s"); });
  EXPECT_LT(m.size(), 160u) << m;
  EXPECT_EQ(m.substr(m.size() - 3), "...");
}

}  // namespace
}  // namespace mg
