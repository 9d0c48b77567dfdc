#include "data/preprocess.h"

#include <algorithm>
#include <atomic>
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

// The input lines (0-based) one partition takes: Megatron deals them round-robin, or, with
// --keep-sequential-samples, in consecutive runs of `run` lines.
struct Partition {
  int index = 0, count = 1;
  int64_t run = 0;  // 0: round-robin
  std::string prefix;
  bool owns(int64_t line) const { return run > 0 ? line / run == index : line % count == index; }
};

int64_t count_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MG_USER_CHECK(in.good(), "--input: cannot read '", path, "'");
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

std::string document_prefix(const std::string& prefix, const std::string& key) {
  return prefix + "_" + key + "_document";
}

// Tokenizes the partition's lines with `toks.size()` threads into <part.prefix>_<key>_document.
// Stops early (leaving no output) once `stop` is set by a failing sibling partition.
PreprocessSummary tokenize_partition(const PreprocessConfig& cfg, const Partition& part,
                                     std::vector<std::unique_ptr<Tokenizer>>& toks,
                                     const std::atomic<bool>& stop) {
  const int workers = int(toks.size());
  const TokenDType dtype = optimal_token_dtype(toks[0]->vocab_size());
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const std::string& key : cfg.json_keys)
    writers.push_back(
        std::make_unique<IndexedDatasetWriter>(document_prefix(part.prefix, key), dtype));

  std::ifstream in(cfg.input, std::ios::binary);
  MG_USER_CHECK(in.good(), "--input: cannot read '", cfg.input, "'");
  PreprocessSummary sum;
  Timer timer;
  int64_t processed = 0;  // documents handled (written or skipped as bad): the log's count
  // Rounds of `batch` lines per worker: read, tokenize in parallel, write in input order.
  const size_t batch = 256;
  std::vector<std::string> lines;
  std::vector<int64_t> line_nos;  // 1-based, in the whole input
  int64_t line_no = 0;
  bool eof = false;
  while (!eof && !stop) {
    lines.clear();
    line_nos.clear();
    std::string line;
    while (lines.size() < batch * size_t(workers)) {
      if (!std::getline(in, line)) {
        eof = true;
        break;
      }
      if (!part.owns(line_no++)) continue;
      lines.push_back(std::move(line));
      line_nos.push_back(line_no);
    }
    std::vector<Doc> docs(lines.size());
    std::vector<std::thread> pool;
    for (int w = 0; w < workers; ++w)
      pool.emplace_back([&, w] {
        for (size_t i = size_t(w); i < lines.size(); i += size_t(workers))
          docs[i] = encode_line(lines[i], line_nos[i], cfg, *toks[size_t(w)]);
      });
    for (auto& t : pool) t.join();
    for (size_t i = 0; i < docs.size(); ++i) {
      const Doc& d = docs[i];
      sum.bytes += int64_t(lines[i].size()) + 1;
      const bool blank = lines[i].find_first_not_of(" \t\r") == std::string::npos;
      if (blank) continue;  // empty lines are not documents
      if (++processed % cfg.log_interval == 0) {
        const double t = std::max(timer.seconds(), 1e-9);
        std::fprintf(stderr, "Processed %lld documents (%.1f docs/s, %.2f MB/s).\n",
                     (long long)processed, double(processed) / t, double(sum.bytes) / 1e6 / t);
      }
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
  }
  if (stop) return sum;
  for (auto& w : writers) w->finalize();
  sum.seconds = timer.seconds();
  return sum;
}

}  // namespace

void PreprocessConfig::validate() const {
  MG_USER_CHECK(!input.empty(), "--input is required (a JSON-lines file)");
  MG_USER_CHECK(!output_prefix.empty(), "--output-prefix is required");
  MG_USER_CHECK(!json_keys.empty(), "--json-keys needs at least one key");
  // Each worker holds a tokenizer copy and a share of each batch: more than 1024 is a typo.
  MG_USER_CHECK(workers >= 1 && workers <= 1024, "--workers must be in [1, 1024] (got ", workers,
                ")");
  MG_USER_CHECK(partitions >= 1 && partitions <= 1024, "--partitions must be in [1, 1024] (got ",
                partitions, ")");
  MG_USER_CHECK(workers % partitions == 0, "--workers ", workers,
                " must be a multiple of --partitions ", partitions,
                " (each partition gets workers / partitions threads, as in Megatron)");
  MG_USER_CHECK(!split_sentences,
                "--split-sentences is not implemented (Megatron splits with "
                "NLTK's punkt models); pass documents, or lists of sentences under the key");
  MG_USER_CHECK(log_interval >= 1, "--log-interval must be at least 1 (got ", log_interval, ")");
  std::error_code ec;  // an unusable name (too long, no permission) is the user's, too
  MG_USER_CHECK(std::filesystem::is_regular_file(input, ec), "--input '", input,
                "' does not exist or is not a file", ec ? " (" + ec.message() + ")" : "");
}

PreprocessSummary run_preprocess(const PreprocessConfig& cfg) {
  cfg.validate();
  Timer startup;
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(make_tokenizer(cfg.tokenizer));
  for (int w = 1; w < cfg.workers; ++w) toks.push_back(toks[0]->clone());
  const double startup_seconds = startup.seconds();
  // The rates count from here, as Megatron's do (its startup time is reported apart).
  Timer timer;
  std::atomic<bool> stop{false};
  if (cfg.partitions == 1) {
    PreprocessSummary sum = tokenize_partition(cfg, {0, 1, 0, cfg.output_prefix}, toks, stop);
    sum.seconds = timer.seconds();
    sum.startup_seconds = startup_seconds;
    return sum;
  }
  // Megatron's --partitions: each partition (workers / partitions threads) writes
  // <prefix>_<i>_<key>_document, then they are merged, in partition order, into
  // <prefix>_<key>_document. The partition files stay, as Megatron leaves them.
  const int per = cfg.workers / cfg.partitions;
  int64_t run = 0;
  if (cfg.keep_sequential_samples)
    run = std::max<int64_t>(1, (count_lines(cfg.input) + cfg.partitions - 1) / cfg.partitions);
  std::vector<Partition> parts;
  std::vector<PreprocessSummary> sums(size_t(cfg.partitions));
  std::vector<std::exception_ptr> errors(size_t(cfg.partitions));
  std::vector<std::thread> threads;
  for (int p = 0; p < cfg.partitions; ++p)
    parts.push_back({p, cfg.partitions, run, str_cat(cfg.output_prefix, "_", p)});
  for (int p = 0; p < cfg.partitions; ++p)
    threads.emplace_back([&, p] {
      try {
        std::vector<std::unique_ptr<Tokenizer>> mine;
        for (int w = 0; w < per; ++w) mine.push_back(std::move(toks[size_t(p * per + w)]));
        sums[size_t(p)] = tokenize_partition(cfg, parts[size_t(p)], mine, stop);
      } catch (...) {
        errors[size_t(p)] = std::current_exception();
        stop = true;
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  PreprocessSummary sum;
  for (const PreprocessSummary& s : sums) {
    sum.documents += s.documents;
    sum.bad_lines += s.bad_lines;
    sum.tokens += s.tokens;
    sum.bytes += s.bytes;
  }
  for (const std::string& key : cfg.json_keys) {
    const std::string first = document_prefix(parts[0].prefix, key);
    IndexedDatasetWriter out(document_prefix(cfg.output_prefix, key),
                             IndexedDataset(first).dtype());
    for (const Partition& part : parts) out.add_index(document_prefix(part.prefix, key));
    out.finalize();
  }
  sum.seconds = timer.seconds();
  sum.startup_seconds = startup_seconds;
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
