// The calibration cache: `batchsweep devices --calibrate` keeps what it measured in a JSON file, so a later
// `batchsweep run` on the same GPU uses the measured GEMM rate for MFU instead of the spec sheet. An entry
// serves only the GPU it was measured on, with the same driver and cuBLASLt (a new driver or library can move
// the rate); a newer measurement of that GPU replaces it.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include "backends/cuda/calibration.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/files.hpp"
#include "batchsweep/json_keys.hpp"

namespace bsw::cuda {
namespace {

constexpr const char* kFormatKey = "batchsweep_calibration";
constexpr int kFormatVersion = 1;

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32] = {};
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// A string field of an object, or "" when it is missing or not a string: the cache is a file anyone can edit,
// and nothing in it may take a run down.
std::string text_field(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return {};
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The file's entries, or none when it is missing or not a cache this version wrote (it is then rewritten).
nlohmann::json read_entries(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return nlohmann::json::array();
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return nlohmann::json::array();
  const auto version = doc.find(kFormatKey);
  const auto entries = doc.find("entries");
  if (version == doc.end() || !version->is_number_integer() || version->get<int64_t>() != kFormatVersion ||
      entries == doc.end() || !entries->is_array())
    return nlohmann::json::array();
  return *entries;
}

// Serialises read-merge-write of the cache between processes (two GPUs of one machine calibrating at once).
class CacheLock {
 public:
  explicit CacheLock(const std::filesystem::path& file) {
    fd_ = ::open((file.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) static_cast<void>(::flock(fd_, LOCK_EX));  // without the lock the save still happens
  }
  ~CacheLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::optional<std::filesystem::path> calibration_cache_file() {
  const auto env = [](const char* name) -> std::optional<std::filesystem::path> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::filesystem::path(v);
  };
  if (auto dir = env("BATCHSWEEP_CACHE_DIR")) return *dir / "calibration.json";
  if (auto dir = env("XDG_CACHE_HOME")) return *dir / "batchsweep" / "calibration.json";
  if (auto home = env("HOME")) return *home / ".cache" / "batchsweep" / "calibration.json";
  return std::nullopt;
}

nlohmann::json calibration_identity(const nlohmann::json& device, const nlohmann::json& versions) {
  return {{"name", device.value("name", std::string())},
          {"uuid", device.value("uuid", std::string())},
          {"cuda_driver", versions.value("cuda_driver", std::string())},
          {"cublaslt", versions.value("cublaslt", std::string())}};
}

nlohmann::json select_calibration(const nlohmann::json& entries, const nlohmann::json& identity) {
  if (!entries.is_array()) return nullptr;
  for (const nlohmann::json& e : entries)
    if (e.is_object() && e.contains("identity") && e["identity"] == identity && e.contains("result") &&
        e["result"].is_object())
      return e;
  return nullptr;
}

nlohmann::json merge_calibration(const nlohmann::json& entries, const nlohmann::json& identity,
                                 const nlohmann::json& result, const std::string& measured_at) {
  nlohmann::json out = nlohmann::json::array();
  if (entries.is_array())
    for (const nlohmann::json& e : entries) {
      if (!e.is_object() || !e.contains("identity")) continue;  // not an entry: dropped
      const nlohmann::json& id = e["identity"];
      const bool same_gpu = text_field(id, "uuid") == text_field(identity, "uuid") &&
                            text_field(id, "name") == text_field(identity, "name");
      if (!same_gpu) out.push_back(e);
    }
  out.push_back({{"identity", identity}, {"measured_at", measured_at}, {"result", result}});
  return out;
}

std::string save_calibration(const nlohmann::json& identity, const nlohmann::json& result) {
  const auto file = calibration_cache_file();
  if (!file) return "not saved: none of BATCHSWEEP_CACHE_DIR, XDG_CACHE_HOME, HOME is set";
  std::error_code ec;
  std::filesystem::create_directories(file->parent_path(), ec);
  if (ec) return fmt::format("not saved: cannot create {}: {}", file->parent_path().string(), ec.message());
  const CacheLock lock(*file);
  const nlohmann::json doc = {
      {kFormatKey, kFormatVersion},
      {"entries", merge_calibration(read_entries(*file), identity, result, utc_now())}};
  // Written next to the file and renamed over it: a reader never sees half a cache.
  try {
    write_file_atomic(file->string(), json_text(doc, 2) + "\n");
  } catch (const InputError& e) {
    return fmt::format("not saved: {}", e.what());
  }
  return fmt::format("saved to {}", file->string());
}

std::optional<nlohmann::json> load_calibration(const nlohmann::json& identity) {
  const auto file = calibration_cache_file();
  if (!file) return std::nullopt;
  const nlohmann::json entry = select_calibration(read_entries(*file), identity);
  if (entry.is_null()) return std::nullopt;
  nlohmann::json result = entry["result"];
  const std::string when = text_field(entry, "measured_at");
  result["measured_at"] = when.empty() ? std::string("an unknown time") : when;
  result["cache_file"] = file->string();
  return result;
}

}  // namespace bsw::cuda
