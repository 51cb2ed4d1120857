// The CPU backend's memory: physical memory, or a container's or address-space limit where one is smaller,
// read from a cgroup tree made here.
#include "backends/cpu/memory_limit.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace bsw::cpu {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "bsw_cgroup_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  void put(const std::filesystem::path& relative, const std::string& text) const {
    std::filesystem::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << text;
  }
  [[nodiscard]] MemorySources sources(const std::string& proc_self_cgroup) const {
    MemorySources s;
    s.physical_bytes = 64 * kGiB;
    s.cgroup_root = root_;
    s.proc_self_cgroup = proc_self_cgroup;
    return s;
  }
  std::filesystem::path root_;
};

TEST_F(CgroupTree, NoLimitIsPhysicalMemory) {
  put("memory.max", "max\n");
  const MemoryLimit m = memory_limit(sources("0::/\n"));
  EXPECT_EQ(m.bytes, 64 * kGiB);
  EXPECT_EQ(m.source, "physical memory");
  EXPECT_EQ(memory_limit(sources("")).bytes, 64 * kGiB);  // no /proc/self/cgroup to read
}

// cgroup v2: the smallest memory.max from this process's cgroup up to the root (a parent's limit binds).
TEST_F(CgroupTree, CgroupV2TakesTheSmallestLimitOnThePath) {
  put("memory.max", "max\n");
  put("ci/memory.max", std::to_string(8 * kGiB) + "\n");
  put("ci/job/memory.max", std::to_string(12 * kGiB) + "\n");
  const MemoryLimit m = memory_limit(sources("0::/ci/job\n"));
  EXPECT_EQ(m.bytes, 8 * kGiB);
  EXPECT_EQ(m.source, "cgroup memory.max");
  // Inside a cgroup namespace the process sees its own cgroup as the root.
  put("memory.max", std::to_string(3 * kGiB));
  EXPECT_EQ(memory_limit(sources("0::/\n")).bytes, 3 * kGiB);
}

// cgroup v1: the memory controller's hierarchy, joined with others or not; "unlimited" is 2^63 less a page.
TEST_F(CgroupTree, CgroupV1ReadsTheMemoryController) {
  put("memory/memory.limit_in_bytes", "9223372036854771712\n");
  put("memory/docker/abc/memory.limit_in_bytes", std::to_string(2 * kGiB) + "\n");
  const MemoryLimit m = memory_limit(sources("12:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n"));
  EXPECT_EQ(m.bytes, 2 * kGiB);
  EXPECT_EQ(m.source, "cgroup memory.limit_in_bytes");
  EXPECT_EQ(memory_limit(sources("4:memory:/elsewhere\n")).bytes, 64 * kGiB);
  put("cpu,memory/memory.limit_in_bytes", std::to_string(5 * kGiB));
  EXPECT_EQ(memory_limit(sources("3:cpu,memory:/\n")).bytes, 5 * kGiB);
}

// ulimit -v: what is left of the address space once what is mapped (code, libraries, BLAS buffers) is
// taken; never nothing at all.
TEST_F(CgroupTree, AnAddressSpaceLimitCountsWhatIsMappedAlready) {
  MemorySources s = sources("0::/\n");
  s.address_space_limit = 4 * kGiB;
  s.mapped_bytes = 1 * kGiB;
  MemoryLimit m = memory_limit(s);
  EXPECT_EQ(m.bytes, 3 * kGiB);
  EXPECT_EQ(m.source, "ulimit -v (address space left)");
  s.mapped_bytes = 5 * kGiB;
  EXPECT_EQ(memory_limit(s).bytes, 4096u);
  // A cgroup limit smaller still wins.
  put("memory.max", std::to_string(kGiB / 2));
  s.mapped_bytes = 0;
  EXPECT_EQ(memory_limit(s).bytes, kGiB / 2);
}

// MemAvailable is what a plan may take now; a plan above it is refused with both sizes named, not allocated
// (the allocation would succeed and touching it would swap or bring the OOM killer).
TEST(MemoryLimit, APlanOverWhatIsAvailableNowIsRefused) {
  MemorySources s;
  s.physical_bytes = 24 * kGiB;
  s.proc_meminfo = "MemTotal:       24597396 kB\nMemFree:         1000000 kB\nMemAvailable:   10485760 kB\n";
  ASSERT_EQ(available_memory(s), std::optional<uint64_t>(10 * kGiB));
  EXPECT_EQ(over_available_memory(10 * kGiB, s), std::nullopt);
  const std::optional<std::string> why = over_available_memory(12 * kGiB, s);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why,
            "the plan needs 12.00 GiB (12884901888 bytes), more than the 10.00 GiB of memory available now "
            "(MemAvailable: other processes hold the rest); touching it would push the machine into swap or "
            "its OOM killer");
  // A kernel that does not say (before 3.14, or no /proc): nothing refused.
  s.proc_meminfo = "MemTotal:       24597396 kB\nMemFree:         1000000 kB\n";
  EXPECT_EQ(available_memory(s), std::nullopt);
  EXPECT_EQ(over_available_memory(100 * kGiB, s), std::nullopt);
  s.proc_meminfo = "MemAvailable:   lots\n";
  EXPECT_EQ(available_memory(s), std::nullopt);
}

TEST(MemoryLimit, ThisProcessHasOne) {
  const MemoryLimit m = memory_limit(this_process_memory());
  EXPECT_GT(m.bytes, 0u);
  EXPECT_GT(available_memory(this_process_memory()).value_or(0), 0u);
  EXPECT_FALSE(m.source.empty());
}

}  // namespace
}  // namespace bsw::cpu
