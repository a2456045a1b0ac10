#include "core/thread_slice.h"

#include <sys/resource.h>
#include <unistd.h>

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

TEST(ThreadSlice, TheKernelReportsTheSliceAskedForAndKeepsTheNiceValue) {
  OnNewThread([] {
    const Result<std::chrono::nanoseconds> before = CurrentThreadSlice();
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    // Raising one's own nice value needs no privilege.
    ASSERT_EQ(setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 5), 0);

    const Result<std::chrono::nanoseconds> set = SetCurrentThreadSlice(250us);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(gettid())), 5);
    if (before.value().count() == 0) {
      // A kernel before 6.12 reports no slice and ignores the request.
      EXPECT_EQ(set.value().count(), 0);
      return;
    }
    EXPECT_NE(before.value(), 250us) << "the default slice should differ from the one asked for";
    EXPECT_EQ(set.value(), 250us);
    const Result<std::chrono::nanoseconds> after = CurrentThreadSlice();
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after.value(), 250us);
  });
}

TEST(ThreadSlice, TheKernelClampsATooShortSliceAndOtherThreadsKeepTheirs) {
  const Result<std::chrono::nanoseconds> mine = CurrentThreadSlice();
  ASSERT_TRUE(mine.ok());
  OnNewThread([] {
    const Result<std::chrono::nanoseconds> set = SetCurrentThreadSlice(20us);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    if (set.value().count() != 0) {
      EXPECT_EQ(set.value(), 100us);
    }
  });
  const Result<std::chrono::nanoseconds> still = CurrentThreadSlice();
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still.value(), mine.value());
}

TEST(ThreadSlice, ANonPositiveSliceIsRefused) {
  const Result<std::chrono::nanoseconds> zero = SetCurrentThreadSlice(0us);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(SetCurrentThreadSlice(-5us).ok());
}

}  // namespace
}  // namespace sluice
