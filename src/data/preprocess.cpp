#include "data/preprocess.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "core/timer.h"
#include "data/indexed_dataset.h"

namespace mg {

namespace {

struct Doc {
  int64_t line = 0;
  bool bad = false;
  std::string error;
  std::vector<std::vector<int32_t>> ids, lengths;  // per json key
};

Doc encode_line_unchecked(const std::string& line, int64_t line_no, const PreprocessConfig& cfg,
                          Tokenizer& tok);

// Runs on worker threads: nothing may escape (a thread's exception would terminate the
// process), so any failure becomes a bad line with its message.
Doc encode_line(const std::string& line, int64_t line_no, const PreprocessConfig& cfg,
                Tokenizer& tok) {
  try {
    return encode_line_unchecked(line, line_no, cfg, tok);
  } catch (const std::exception& e) {
    Doc d;
    d.line = line_no;
    d.bad = true;
    d.error = e.what();
    return d;
  }
}

Doc encode_line_unchecked(const std::string& line, int64_t line_no, const PreprocessConfig& cfg,
                          Tokenizer& tok) {
  Doc d;
  d.line = line_no;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    d.bad = true;
    d.error = str_cat("malformed JSON (", e.what(), ")");
    return d;
  }
  for (const std::string& key : cfg.json_keys) {
    if (!j.is_object() || !j.contains(key) || !(j[key].is_string() || j[key].is_array())) {
      d.bad = true;
      d.error = str_cat("no string (or list of strings) under key '", key, "'");
      return d;
    }
    std::vector<std::string> sentences;
    if (j[key].is_string()) {
      sentences.push_back(j[key].get<std::string>());
    } else {
      for (const auto& s : j[key]) {
        if (!s.is_string()) {
          d.bad = true;
          d.error = str_cat("key '", key, "' holds a list with a non-string element");
          return d;
        }
        sentences.push_back(s.get<std::string>());
      }
    }
    std::vector<int32_t> ids, lengths;
    for (const std::string& s : sentences) {
      const std::vector<int32_t> t = tok.encode(s);
      if (t.empty()) continue;
      ids.insert(ids.end(), t.begin(), t.end());
      lengths.push_back(int32_t(t.size()));
    }
    if (cfg.append_eod && !lengths.empty()) {
      ids.push_back(tok.eod());
      lengths.back() += 1;
    }
    d.ids.push_back(std::move(ids));
    d.lengths.push_back(std::move(lengths));
  }
  return d;
}

std::string human_time(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%d:%02d", int(s) / 60, int(s) % 60);
  return buf;
}

}  // namespace

void PreprocessConfig::validate() const {
  MG_USER_CHECK(!input.empty(), "--input is required (a JSON-lines file)");
  MG_USER_CHECK(!output_prefix.empty(), "--output-prefix is required");
  MG_USER_CHECK(!json_keys.empty(), "--json-keys needs at least one key");
  // Each worker holds a tokenizer copy and a share of each batch: more than 1024 is a typo.
  MG_USER_CHECK(workers >= 1 && workers <= 1024, "--workers must be in [1, 1024] (got ", workers,
                ")");
  std::error_code ec;  // an unusable name (too long, no permission) is the user's, too
  MG_USER_CHECK(std::filesystem::is_regular_file(input, ec), "--input '", input,
                "' does not exist or is not a file", ec ? " (" + ec.message() + ")" : "");
}

PreprocessSummary run_preprocess(const PreprocessConfig& cfg) {
  cfg.validate();
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(make_tokenizer(cfg.tokenizer));
  for (int w = 1; w < cfg.workers; ++w) toks.push_back(toks[0]->clone());
  const TokenDType dtype = optimal_token_dtype(toks[0]->vocab_size());
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const std::string& key : cfg.json_keys)
    writers.push_back(std::make_unique<IndexedDatasetWriter>(
        cfg.output_prefix + "_" + key + "_document", dtype));

  std::ifstream in(cfg.input, std::ios::binary);
  MG_USER_CHECK(in.good(), "--input: cannot read '", cfg.input, "'");
  const double total_bytes = double(std::filesystem::file_size(cfg.input));
  const bool tty = isatty(fileno(stderr));
  PreprocessSummary sum;
  Timer timer;
  double last_progress = 0;
  // Rounds of `batch` lines per worker: read, tokenize in parallel, write in input order.
  const size_t batch = 256;
  std::vector<std::string> lines;
  int64_t line_no = 0;
  bool eof = false;
  while (!eof) {
    lines.clear();
    std::string line;
    while (lines.size() < batch * size_t(cfg.workers)) {
      if (!std::getline(in, line)) {
        eof = true;
        break;
      }
      sum.bytes += int64_t(line.size()) + 1;
      lines.push_back(std::move(line));
    }
    std::vector<Doc> docs(lines.size());
    std::vector<std::thread> pool;
    for (int w = 0; w < cfg.workers; ++w)
      pool.emplace_back([&, w] {
        for (size_t i = size_t(w); i < lines.size(); i += size_t(cfg.workers))
          docs[i] = encode_line(lines[i], line_no + int64_t(i) + 1, cfg, *toks[size_t(w)]);
      });
    for (auto& t : pool) t.join();
    for (size_t i = 0; i < docs.size(); ++i) {
      const Doc& d = docs[i];
      const bool blank = lines[i].find_first_not_of(" \t\r") == std::string::npos;
      if (blank) continue;  // empty lines are not documents
      if (d.bad) {
        MG_USER_CHECK(cfg.skip_bad_lines, "--input '", cfg.input, "' line ", d.line, ": ", d.error,
                      "; fix the line or pass --skip-bad-lines");
        ++sum.bad_lines;
        continue;
      }
      for (size_t k = 0; k < writers.size(); ++k) {
        writers[k]->add_document(d.ids[k], d.lengths[k]);
        sum.tokens += int64_t(d.ids[k].size());
      }
      ++sum.documents;
    }
    line_no += int64_t(lines.size());
    const double t = timer.seconds();
    if (tty && t - last_progress > 0.5) {
      last_progress = t;
      const double mbps = double(sum.bytes) / 1e6 / t;
      const double eta = mbps > 0 ? (total_bytes - double(sum.bytes)) / 1e6 / mbps : 0;
      std::fprintf(stderr, "\r preprocess: %lld documents (%.0f docs/s, %.2f MB/s), ETA %s   ",
                   (long long)sum.documents, double(sum.documents) / t, mbps,
                   human_time(std::max(0.0, eta)).c_str());
    }
  }
  for (auto& w : writers) w->finalize();
  sum.seconds = timer.seconds();
  if (tty) std::fprintf(stderr, "\n");
  return sum;
}

int run_merge_datasets(const MergeConfig& cfg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  MG_USER_CHECK(fs::is_directory(cfg.input, ec), "--input '", cfg.input,
                "' is not a directory of .bin/.idx pairs");
  MG_USER_CHECK(!cfg.output_prefix.empty(), "--output-prefix is required");
  std::vector<std::string> prefixes;
  for (fs::directory_iterator it(cfg.input, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".idx") continue;
    fs::path bin = it->path();
    bin.replace_extension(".bin");
    MG_USER_CHECK(fs::exists(bin, ec), "'", it->path().string(), "' has no matching .bin");
    prefixes.push_back((it->path().parent_path() / it->path().stem()).string());
  }
  MG_USER_CHECK(!ec, "--input '", cfg.input, "': cannot list the directory: ", ec.message());
  std::sort(prefixes.begin(), prefixes.end());
  MG_USER_CHECK(!prefixes.empty(), "--input '", cfg.input, "' holds no .idx files");
  // The output replaces its files by rename at the end: were one of them an input (by any path,
  // symlink or hard link), that input would be lost.
  for (const std::string& p : prefixes)
    for (const char* ext : {".bin", ".idx"}) {
      const std::string out = cfg.output_prefix + ext, in = p + ext;
      MG_USER_CHECK(!fs::equivalent(out, in, ec), "--output-prefix '", cfg.output_prefix, "': its ",
                    ext, " file '", out, "' is the input '", in,
                    "'; choose an output prefix outside the inputs");
    }
  IndexedDatasetWriter out(cfg.output_prefix, IndexedDataset(prefixes[0]).dtype());
  for (const std::string& p : prefixes) out.add_index(p);
  out.finalize();
  return int(prefixes.size());
}

}  // namespace mg
