// A journald writer in C++, built from proto/journald/v1/journal.proto and docs/protocol.md
// alone: no journald client library. It is the repository's check that the protocol page
// is enough to write a correct client in a language journald has no client for.
//
//   journald-conformance <socket path> <run id>
//
// It opens a new run (docs/protocol.md#open-and-the-lease), journals one model call with a
// tool_use, the tool's result and the final answer plus a terminal record, each at
// last_seq + 1 with its own timestamp (#seq-rules, #timestamps); predicts every record's
// stored bytes and hash from the stored form and the canonical JSON rules and compares them
// with the daemon's acks (#stored-record-form, #canonical-json, #hash-chain); retries one
// append and expects a duplicate (#retries); provokes two refusals and reads them from the
// journald-error-bin trailer (#admission-rules, #reading-an-error); then releases the lease
// (#release). Exit status 0 means every expectation held; anything else is printed.

#include <grpcpp/grpcpp.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "journald/v1/journal.grpc.pb.h"

namespace v1 = journald::v1;

namespace {

// --- canonical JSON (docs/protocol.md#canonical-json) -----------------------------------

struct Json {
  enum Kind { kString, kInt, kBool, kArray, kObject } kind = kString;
  std::string str;
  long long num = 0;
  bool flag = false;
  std::vector<Json> items;
  std::map<std::string, Json> fields;  // std::map orders UTF-8 keys by code point

  static Json S(std::string s) { Json j; j.kind = kString; j.str = std::move(s); return j; }
  static Json I(long long n) { Json j; j.kind = kInt; j.num = n; return j; }
  static Json B(bool b) { Json j; j.kind = kBool; j.flag = b; return j; }
  static Json A(std::vector<Json> v) { Json j; j.kind = kArray; j.items = std::move(v); return j; }
  static Json O(std::map<std::string, Json> m) {
    Json j; j.kind = kObject; j.fields = std::move(m); return j;
  }
};

void Quote(const std::string& s, std::string& out) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += static_cast<char>(c);  // '/', '<', '>', '&' and UTF-8 stay literal
        }
    }
  }
  out += '"';
}

void Encode(const Json& j, std::string& out) {
  switch (j.kind) {
    case Json::kString: Quote(j.str, out); break;
    case Json::kInt: out += std::to_string(j.num); break;
    case Json::kBool: out += j.flag ? "true" : "false"; break;
    case Json::kArray: {
      out += '[';
      for (size_t i = 0; i < j.items.size(); ++i) {
        if (i) out += ',';
        Encode(j.items[i], out);
      }
      out += ']';
      break;
    }
    case Json::kObject: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : j.fields) {
        if (!first) out += ',';
        first = false;
        Quote(key, out);
        out += ':';
        Encode(value, out);
      }
      out += '}';
      break;
    }
  }
}

std::string Canonical(const Json& j) {
  std::string out;
  Encode(j, out);
  return out;
}

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

// RFC 3339 UTC with six fraction digits and a literal Z (docs/protocol.md#timestamps).
std::string NowTs() {
  auto now = std::chrono::system_clock::now();
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, us % 1000000);
  return buf;
}

void Expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// --- the records this writer journals --------------------------------------------------

const char* kToolUseId = "toolu_1";
const char* kToolInput = "{\"a\": 2, \"b\": 3}";  // raw model JSON travels as a string

Json TextBlock(const std::string& text) {
  return Json::O({{"type", Json::S("text")}, {"text", Json::S(text)}});
}

// One record to append: its proto form and its predicted stored form.
struct Planned {
  v1::Record proto;
  std::string kind;
  Json payload;  // the stored payload in normal form (docs/protocol.md#payloads)
};

Planned Assistant(uint64_t seq, const std::vector<Json>& content, uint64_t iteration,
                  const std::string& stop, uint64_t in, uint64_t out) {
  Planned p;
  p.kind = "assistant";
  p.proto.set_seq(seq);
  p.proto.set_ts(NowTs());
  auto* a = p.proto.mutable_assistant();
  a->mutable_message()->set_role("assistant");
  a->mutable_message()->set_content_json(Canonical(Json::A(content)));
  a->set_iteration(iteration);
  a->set_stop_reason(stop);
  a->mutable_usage()->set_input_tokens(in);
  a->mutable_usage()->set_output_tokens(out);
  p.payload = Json::O({
      {"message", Json::O({{"role", Json::S("assistant")}, {"content", Json::A(content)}})},
      {"iteration", Json::I(static_cast<long long>(iteration))},
      {"stop_reason", Json::S(stop)},
      {"usage", Json::O({{"input_tokens", Json::I(static_cast<long long>(in))},
                         {"output_tokens", Json::I(static_cast<long long>(out))},
                         {"cache_read_tokens", Json::I(0)},
                         {"cache_creation_tokens", Json::I(0)}})},
  });
  return p;
}

Planned ToolResult(uint64_t seq, const std::string& tool_use_id, const std::string& text) {
  Planned p;
  p.kind = "tool_result";
  p.proto.set_seq(seq);
  p.proto.set_ts(NowTs());
  auto* r = p.proto.mutable_tool_result();
  r->set_tool_use_id(tool_use_id);
  r->set_content_json(Canonical(Json::A({TextBlock(text)})));
  p.payload = Json::O({{"tool_use_id", Json::S(tool_use_id)},
                       {"content", Json::A({TextBlock(text)})},
                       {"is_error", Json::B(false)},
                       {"remote", Json::B(false)}});
  return p;
}

Planned Terminal(uint64_t seq, const std::string& reason) {
  Planned p;
  p.kind = "terminal";
  p.proto.set_seq(seq);
  p.proto.set_ts(NowTs());
  p.proto.mutable_terminal()->set_reason(reason);
  p.payload = Json::O({{"reason", Json::S(reason)}, {"message", Json::S("")}});
  return p;
}

// The stored bytes of a record (docs/protocol.md#stored-record-form).
std::string StoredBytes(const Planned& p, const std::string& prev) {
  return Canonical(Json::O({{"v", Json::I(1)},
                            {"seq", Json::I(static_cast<long long>(p.proto.seq()))},
                            {"type", Json::S("journald.v1.record." + p.kind)},
                            {"ts", Json::S(p.proto.ts())},
                            {"prev", Json::S(prev)},
                            {p.kind, p.payload}}));
}

// --- the protocol --------------------------------------------------------------------

class Writer {
 public:
  Writer(std::shared_ptr<grpc::Channel> channel, std::string run_id)
      : stub_(v1::JournalService::NewStub(channel)), run_id_(std::move(run_id)) {}

  void Open() {
    v1::OpenRequest req;
    req.set_run_id(run_id_);
    req.set_mode(v1::OPEN_MODE_CREATE);
    auto* fp = req.mutable_fingerprint();
    fp->set_provider("anthropic");
    fp->set_model("claude-sonnet-4-5");
    // docs/protocol.md#fingerprint: hashes of canonical JSON, computed here.
    fp->set_system_prompt_sha256(
        Sha256Hex(Canonical(Json::A({Json::S("You are a careful calculator.")}))));
    fp->set_tools_sha256(Sha256Hex(Canonical(Json::A({Json::O({
        {"name", Json::S("add")},
        {"description", Json::S("Add two integers")},
        {"input_schema", Json::O({{"type", Json::S("object")}})},
    })}))));
    fp->set_thinking("off");
    fp->set_max_tokens(1024);
    fp->set_max_iterations(10);
    req.set_prompt_json(Canonical(Json::A({TextBlock("What is 2 + 3?")})));
    req.set_created(NowTs());
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    req.mutable_client()->set_name("conformance-cpp");
    req.mutable_client()->set_pid(static_cast<uint32_t>(getpid()));
    req.mutable_client()->set_host(host);
    lease_stream_ = stub_->Open(&lease_ctx_, req);
    v1::OpenResponse first;
    if (!lease_stream_->Read(&first)) {
      grpc::Status st = lease_stream_->Finish();
      throw std::runtime_error("Open failed: " + Describe(st, lease_ctx_));
    }
    Expect(first.has_lease(), "the first Open message is not a lease");
    lease_ = first.lease();
    Expect(lease_.created() && lease_.last_seq() == 1, "Open did not create the run at seq 1");
    last_seq_ = lease_.last_seq();
    last_hash_ = lease_.last_hash();
  }

  // Appends `batch` at last_seq + 1 ...; checks each ack against the predicted bytes.
  v1::AppendResponse Append(const std::vector<Planned>& batch) {
    v1::AppendRequest req = Request(batch);
    v1::AppendResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->Append(&ctx, req, &resp);
    if (!st.ok()) throw std::runtime_error("Append failed: " + Describe(st, ctx));
    Expect(resp.acks_size() == static_cast<int>(batch.size()), "one ack per record");
    for (int i = 0; i < resp.acks_size(); ++i) {
      const v1::Ack& ack = resp.acks(i);
      std::string predicted = Sha256Hex(StoredBytes(batch[i], last_hash_));
      Expect(!ack.duplicate(), "a new record was answered as a duplicate");
      Expect(ack.seq() == batch[i].proto.seq(), "ack for another seq");
      Expect(ack.hash() == predicted,
             "seq " + std::to_string(ack.seq()) + ": daemon hash " + ack.hash() +
                 " differs from the hash of the predicted stored bytes " + predicted + ": " +
                 StoredBytes(batch[i], last_hash_));
      Expect(ack.durability() != v1::DURABILITY_UNSPECIFIED, "ack without durability");
      last_seq_ = ack.seq();
      last_hash_ = ack.hash();
    }
    return resp;
  }

  // Resends an already acknowledged batch, as after a lost ack (docs/protocol.md#retries).
  void Retry(const std::vector<Planned>& batch, const v1::AppendResponse& first) {
    v1::AppendResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->Append(&ctx, Request(batch), &resp);
    if (!st.ok()) throw std::runtime_error("retry failed: " + Describe(st, ctx));
    for (int i = 0; i < resp.acks_size(); ++i) {
      Expect(resp.acks(i).duplicate(), "a retried record was not answered as a duplicate");
      Expect(resp.acks(i).hash() == first.acks(i).hash(), "a retry changed the hash");
    }
  }

  // Expects the batch to be refused with `code`; returns the status.
  grpc::StatusCode Refused(const std::vector<Planned>& batch, const std::string& code) {
    v1::AppendResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->Append(&ctx, Request(batch), &resp);
    Expect(!st.ok(), "expected " + code + ", the append succeeded");
    v1::ErrorDetail detail = Detail(ctx);
    Expect(detail.code() == code, "expected " + code + ", got " + Describe(st, ctx));
    // docs/protocol.md#enum-words: the word maps to the enum by the naming rule.
    std::string name = "ERROR_CODE_";
    for (char c : detail.code()) name += static_cast<char>(std::toupper(c));
    v1::ErrorCode parsed;
    Expect(v1::ErrorCode_Parse(name, &parsed), code + " is not a word of ErrorCode");
    return st.error_code();
  }

  void Release() {
    v1::ReleaseRequest req;
    req.set_run_id(run_id_);
    req.set_lease_id(lease_.lease_id());
    v1::ReleaseResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->Release(&ctx, req, &resp);
    if (!st.ok()) throw std::runtime_error("Release failed: " + Describe(st, ctx));
    Expect(resp.released(), "Release did not end a live lease");
    v1::OpenResponse last;
    while (lease_stream_->Read(&last)) {
      if (last.has_ended()) Expect(last.ended().reason() == "released", "lease ended oddly");
    }
    lease_stream_->Finish();
  }

  uint64_t last_seq() const { return last_seq_; }
  const std::string& last_hash() const { return last_hash_; }

 private:
  v1::AppendRequest Request(const std::vector<Planned>& batch) const {
    v1::AppendRequest req;
    req.set_run_id(run_id_);
    req.set_lease_id(lease_.lease_id());
    for (const Planned& p : batch) *req.add_records() = p.proto;
    return req;
  }

  static v1::ErrorDetail Detail(const grpc::ClientContext& ctx) {
    v1::ErrorDetail detail;
    const auto& trailers = ctx.GetServerTrailingMetadata();
    auto it = trailers.find("journald-error-bin");
    if (it != trailers.end()) {
      detail.ParseFromString(std::string(it->second.data(), it->second.size()));
    }
    return detail;
  }

  static std::string Describe(const grpc::Status& st, const grpc::ClientContext& ctx) {
    v1::ErrorDetail d = Detail(ctx);
    return "status " + std::to_string(st.error_code()) + " code " + d.code() + ": " +
           (d.message().empty() ? st.error_message() : d.message());
  }

  std::unique_ptr<v1::JournalService::Stub> stub_;
  std::string run_id_;
  grpc::ClientContext lease_ctx_;
  std::unique_ptr<grpc::ClientReader<v1::OpenResponse>> lease_stream_;
  v1::Lease lease_;
  uint64_t last_seq_ = 0;
  std::string last_hash_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <socket path> <run id>\n", argv[0]);
    return 2;
  }
  try {
    auto channel = grpc::CreateChannel(std::string("unix:") + argv[1],
                                       grpc::InsecureChannelCredentials());
    Expect(channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)),
           "cannot connect to the daemon's socket");
    Writer w(channel, argv[2]);
    w.Open();

    // The model asked for a tool: journal its turn before the tool runs.
    Json call = Json::O({{"type", Json::S("tool_use")},
                         {"id", Json::S(kToolUseId)},
                         {"name", Json::S("add")},
                         {"input", Json::S(kToolInput)}});
    w.Append({Assistant(w.last_seq() + 1, {TextBlock("Let me add."), call}, 1, "tool_use",
                        25, 12)});

    // The tool finished: its result. Then the ack is "lost" and the append retried.
    std::vector<Planned> result = {ToolResult(w.last_seq() + 1, kToolUseId, "5")};
    v1::AppendResponse acked = w.Append(result);
    w.Retry(result, acked);

    // A result answers an open call once; a seq ahead of the journal is a gap.
    Expect(w.Refused({ToolResult(w.last_seq() + 1, kToolUseId, "5 again")}, "invalid_record") ==
               grpc::StatusCode::INVALID_ARGUMENT,
           "invalid_record is not INVALID_ARGUMENT");
    Expect(w.Refused({Terminal(w.last_seq() + 3, "completed")}, "seq_gap") ==
               grpc::StatusCode::FAILED_PRECONDITION,
           "seq_gap is not FAILED_PRECONDITION");

    // The final answer and the end of the run, as one batch.
    uint64_t next = w.last_seq() + 1;
    w.Append({Assistant(next, {TextBlock("2 + 3 = 5")}, 2, "end_turn", 40, 8),
              Terminal(next + 1, "completed")});
    w.Release();
    std::printf("conformance-cpp: run %s: last seq %llu, last hash %s\n", argv[2],
                static_cast<unsigned long long>(w.last_seq()), w.last_hash().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conformance-cpp: %s\n", e.what());
    return 1;
  }
}
