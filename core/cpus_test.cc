#include "core/cpus.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(CpusUnderQuota, AQuotaRoundsUpAndNeverExceedsTheCpus) {
  EXPECT_EQ(CpusUnderQuota("200000 100000\n", 64), 2u);
  EXPECT_EQ(CpusUnderQuota("150000 100000", 64), 2u);
  EXPECT_EQ(CpusUnderQuota("50000 100000", 64), 1u);
  EXPECT_EQ(CpusUnderQuota("800000 100000", 4), 4u);
}

TEST(CpusUnderQuota, NoQuotaOrUnreadableTextKeepsTheCpus) {
  EXPECT_EQ(CpusUnderQuota("max 100000\n", 8), 8u);
  EXPECT_EQ(CpusUnderQuota("", 8), 8u);
  EXPECT_EQ(CpusUnderQuota("garbage", 8), 8u);
  EXPECT_EQ(CpusUnderQuota("0 100000", 8), 8u);
}

// A cgroup tree under a temporary directory.
class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::path(::testing::TempDir()) / ("cgroups-" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  std::filesystem::path root_;
};

TEST_F(CgroupTree, V2TakesTheSmallestQuotaOfTheCgroupAndItsParents) {
  Write("system.slice/cpu.max", "300000 100000\n");  // the slice: 3
  Write("system.slice/sluice.service/cpu.max", "max 100000\n");
  EXPECT_EQ(CpusUnderCgroupQuotas(root_.string(), "0::/system.slice/sluice.service\n", 64), 3u);
  Write("system.slice/sluice.service/cpu.max", "150000 100000\n");  // the unit: 2
  EXPECT_EQ(CpusUnderCgroupQuotas(root_.string(), "0::/system.slice/sluice.service\n", 64), 2u);
  EXPECT_EQ(CpusUnderCgroupQuotas(root_.string(), "0::/system.slice/sluice.service\n", 1), 1u);
}

TEST_F(CgroupTree, V2InsideItsOwnNamespaceReadsTheRoot) {
  Write("cpu.max", "200000 100000\n");  // a container: its cgroup is the root it sees
  EXPECT_EQ(CpusUnderCgroupQuotas(root_.string(), "0::/\n", 32), 2u);
  EXPECT_EQ(CpusUnderCgroupQuotas(root_.string(), "", 32), 2u);  // /proc/self/cgroup unreadable: the root
  EXPECT_EQ(CpusUnderCgroupQuotas(root_.string(), "0::/../elsewhere\n", 32), 2u);  // outside the namespace
}

TEST_F(CgroupTree, V1ReadsTheCpuControllersQuota) {
  Write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
  Write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  Write("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  Write("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  const std::string self = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n";
  EXPECT_EQ(CpusUnderCgroupQuotas(root_.string(), self, 16), 3u);
  EXPECT_EQ(CpusUnderCgroupQuotas(root_.string(), "4:cpu,cpuacct:/\n", 16), 16u);  // -1: none
}

TEST(UsableCpus, AtLeastOne) { EXPECT_GE(UsableCpus(), 1u); }

}  // namespace
}  // namespace sluice
