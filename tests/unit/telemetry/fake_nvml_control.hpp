// Test access to the fake NVML's control functions (tests/fake_nvml/fake_nvml.cpp), found with dlsym in the
// same library image that Telemetry dlopens, so both see one scripted state.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

namespace bsw::testing {

class FakeNvml {
 public:
  explicit FakeNvml(const char* path) : path_(path) {
    handle_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      ADD_FAILURE() << "cannot load the fake NVML " << path << ": " << dlerror();
      return;
    }
    reset_ = lookup<void (*)()>("fake_nvml_reset");
    set_ = lookup<int (*)(const char*, double)>("fake_nvml_set");
    get_ = lookup<double (*)(const char*)>("fake_nvml_get");
    fail_ = lookup<void (*)(const char*, int)>("fake_nvml_fail");
    add_process_ = lookup<void (*)(unsigned, unsigned long long)>("fake_nvml_add_process");
  }
  ~FakeNvml() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;

  [[nodiscard]] bool loaded() const { return add_process_ != nullptr; }
  [[nodiscard]] const std::string& path() const { return path_; }
  void reset() { reset_(); }
  void set(const char* key, double value) { EXPECT_EQ(set_(key, value), 0) << "fake NVML key " << key; }
  [[nodiscard]] double get(const std::string& key) { return get_(key.c_str()); }
  void fail(const char* symbol, int nvml_return) { fail_(symbol, nvml_return); }
  void add_process(unsigned pid, unsigned long long used_bytes) { add_process_(pid, used_bytes); }

 private:
  template <typename Fn>
  Fn lookup(const char* name) {
    auto fn = reinterpret_cast<Fn>(dlsym(handle_, name));
    if (fn == nullptr) ADD_FAILURE() << path_ << " does not export " << name;
    return fn;
  }

  std::string path_;
  void* handle_ = nullptr;
  void (*reset_)() = nullptr;
  int (*set_)(const char*, double) = nullptr;
  double (*get_)(const char*) = nullptr;
  void (*fail_)(const char*, int) = nullptr;
  void (*add_process_)(unsigned, unsigned long long) = nullptr;
};

}  // namespace bsw::testing
