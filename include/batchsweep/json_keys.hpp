// A parser callback for untrusted JSON (configs and reports alike): nlohmann keeps the last of a key given
// twice in one object without a word, so `{"out_features": 10, ..., "out_features": 100}` would run a model
// the user did not read, and a report's duplicated "batch" would be read as the other value.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace bsw {

// Pass to nlohmann::json::parse: calls `refuse` with the JSON path of a key given twice in one object
// ("layers[2].out_features"); `refuse` throws (the caller's error type, naming its file).
class DuplicateKeyCheck {
 public:
  using Refuse = std::function<void(const std::string& path)>;
  explicit DuplicateKeyCheck(Refuse refuse) : refuse_(std::move(refuse)) {}

  bool operator()(int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        count_element();
        frames_.push_back({event == Event::array_start, -1, {}, {}});
        break;
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        break;
      case Event::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) refuse_(path());
        break;
      }
      case Event::value:
        count_element();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool array = false;
    int64_t index = -1;  // arrays: the element being read
    std::string key;     // objects: the key being read
    std::set<std::string> keys;
  };
  void count_element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  [[nodiscard]] std::string path() const {
    std::string out;
    for (const Frame& f : frames_) {
      if (f.array)
        out += fmt::format("[{}]", f.index);
      else
        out += out.empty() ? f.key : "." + f.key;
    }
    return out;
  }

  Refuse refuse_;
  std::vector<Frame> frames_;
};

// JSON as batchsweep writes it: a byte that is not UTF-8 (a file name in `command`, from argv) becomes U+FFFD
// rather than an exception from nlohmann's strict dump(). indent -1: one line.
[[nodiscard]] inline std::string json_text(const nlohmann::json& doc, int indent = -1) {
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace bsw
