#include "core/thread_slice.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace sluice {
namespace {

using namespace std::chrono_literals;

// Runs `body` on a thread of its own, so that the test runner's threads keep
// their scheduling.
template <typename F>
void OnNewThread(F body) {
  std::thread t(body);
  t.join();
}

// Linux 6.12 and later report a normal thread's slice; earlier kernels
// report 0 and ignore a requested one, which leaves nothing to check here.
class ThreadSliceReported : public ::testing::Test {
 protected:
  void SetUp() override {
    const Result<std::chrono::nanoseconds> reported = CurrentThreadSlice();
    ASSERT_TRUE(reported.ok()) << reported.status().ToString();
    if (reported.value().count() == 0) GTEST_SKIP() << "this kernel reports no slices (Linux 6.12 and later do)";
  }
};

TEST_F(ThreadSliceReported, TheKernelReportsTheSliceAskedForAndKeepsTheNiceValue) {
  OnNewThread([] {
    const Result<std::chrono::nanoseconds> before = CurrentThreadSlice();
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    // Raising one's own nice value needs no privilege.
    const auto tid = static_cast<id_t>(gettid());
    errno = 0;
    const int nice_before = getpriority(PRIO_PROCESS, tid);
    ASSERT_EQ(errno, 0);
    const int nice = std::min(nice_before + 1, 19);
    ASSERT_EQ(setpriority(PRIO_PROCESS, tid, nice), 0);

    const Result<std::chrono::nanoseconds> set = SetCurrentThreadSlice(250us);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    EXPECT_EQ(getpriority(PRIO_PROCESS, tid), nice);
    EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
    EXPECT_NE(before.value(), 250us) << "the default slice should differ from the one asked for";
    EXPECT_EQ(set.value(), 250us);
    const Result<std::chrono::nanoseconds> after = CurrentThreadSlice();
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after.value(), 250us);
  });
}

TEST_F(ThreadSliceReported, TheKernelClampsATooShortSliceAndOtherThreadsKeepTheirs) {
  const Result<std::chrono::nanoseconds> mine = CurrentThreadSlice();
  ASSERT_TRUE(mine.ok());
  OnNewThread([] {
    const Result<std::chrono::nanoseconds> set = SetCurrentThreadSlice(20us);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    EXPECT_EQ(set.value(), 100us);
  });
  const Result<std::chrono::nanoseconds> still = CurrentThreadSlice();
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still.value(), mine.value());
}

TEST_F(ThreadSliceReported, ThreadsStartedAfterwardsInheritTheSlice) {
  OnNewThread([] {
    const Result<std::chrono::nanoseconds> set = SetCurrentThreadSlice(300us);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    ASSERT_EQ(set.value(), 300us);
    OnNewThread([] {
      const Result<std::chrono::nanoseconds> child = CurrentThreadSlice();
      ASSERT_TRUE(child.ok()) << child.status().ToString();
      EXPECT_EQ(child.value(), 300us);
    });
  });
}

TEST_F(ThreadSliceReported, AResetOnForkFlagIsKept) {
  const Result<std::chrono::nanoseconds> default_slice = CurrentThreadSlice();
  ASSERT_TRUE(default_slice.ok());
  ASSERT_NE(default_slice.value(), 300us);
  OnNewThread([&] {
    // Setting the flag needs no privilege; clearing it would.
    const sched_param param{};
    ASSERT_EQ(sched_setscheduler(0, SCHED_OTHER | SCHED_RESET_ON_FORK, &param), 0) << std::strerror(errno);
    const Result<std::chrono::nanoseconds> set = SetCurrentThreadSlice(300us);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    EXPECT_EQ(set.value(), 300us);
    EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER | SCHED_RESET_ON_FORK);
    OnNewThread([&] {
      const Result<std::chrono::nanoseconds> child = CurrentThreadSlice();
      ASSERT_TRUE(child.ok()) << child.status().ToString();
      EXPECT_EQ(child.value(), default_slice.value());
    });
  });
}

TEST(ThreadSlice, AThreadOutsideTheFairPoliciesIsLeftAlone) {
  OnNewThread([] {
    // Moving oneself to SCHED_IDLE needs no privilege.
    const sched_param param{};
    ASSERT_EQ(sched_setscheduler(0, SCHED_IDLE, &param), 0) << std::strerror(errno);
    const Result<std::chrono::nanoseconds> set = SetCurrentThreadSlice(250us);
    ASSERT_FALSE(set.ok());
    EXPECT_EQ(set.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(set.status().message().find("SCHED_IDLE"), std::string::npos) << set.status().message();
    EXPECT_EQ(sched_getscheduler(0), SCHED_IDLE);
    const Result<std::chrono::nanoseconds> reported = CurrentThreadSlice();
    ASSERT_TRUE(reported.ok());
    EXPECT_EQ(reported.value().count(), 0);
  });
}

TEST(ThreadSlice, ANonPositiveSliceIsRefused) {
  const Result<std::chrono::nanoseconds> zero = SetCurrentThreadSlice(0us);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(SetCurrentThreadSlice(-5us).ok());
}

}  // namespace
}  // namespace sluice
