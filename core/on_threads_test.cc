#include "core/on_threads.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(OnThreads, RunsEachWorkOnceAtTheSameTimeTheFirstOnTheCallingThread) {
  constexpr size_t kN = 6;
  std::vector<std::atomic<int>> runs(kN);
  std::vector<std::thread::id> ran_on(kN);
  std::atomic<size_t> arrived{0};
  std::atomic<bool> all_at_once{true};
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  OnThreads(kN, [&](size_t k) {
    ++runs[k];
    ran_on[k] = std::this_thread::get_id();
    // Every work waits here for the others: done one after another, the
    // first would wait for ever (bounded: each gives up and says so).
    ++arrived;
    while (arrived.load() < kN) {
      if (std::chrono::steady_clock::now() > until) {
        all_at_once = false;
        return;
      }
      std::this_thread::yield();
    }
  });
  EXPECT_TRUE(all_at_once) << "the works did not run at the same time";
  for (size_t k = 0; k < kN; ++k) EXPECT_EQ(runs[k].load(), 1) << "work " << k;
  EXPECT_EQ(ran_on[0], std::this_thread::get_id());
  EXPECT_EQ(std::set<std::thread::id>(ran_on.begin(), ran_on.end()).size(), kN);
}

TEST(OnThreads, NoWorkNoCall) {
  int calls = 0;
  OnThreads(0, [&](size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

#ifdef SLUICE_FAILPOINTS
// No thread can be started (a failpoint stands in for the process's limit,
// which root does not meet): every work still runs, once, on the calling
// thread. In a process of its own, where the failpoint is read.
TEST(OnThreads, WithoutThreadsEveryWorkRunsOnTheCallingThread) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("SLUICE_FAILPOINTS", "on_threads.start=error", 1);
        std::vector<size_t> order;  // unguarded: only the calling thread may touch it
        const auto caller = std::this_thread::get_id();
        bool elsewhere = false;
        OnThreads(4, [&](size_t k) {
          if (std::this_thread::get_id() != caller) elsewhere = true;
          order.push_back(k);
        });
        std::exit(!elsewhere && order == std::vector<size_t>{1, 2, 3, 0} ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}
#endif

}  // namespace
}  // namespace sluice
