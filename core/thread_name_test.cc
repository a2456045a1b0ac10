#include "core/thread_name.h"

#include <unistd.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

// What the kernel shows to ps and top.
std::string CommOfThisThread() {
  std::ifstream in("/proc/self/task/" + std::to_string(gettid()) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

TEST(ThreadName, AStartedThreadCarriesItsNameBeforeItsBodyRuns) {
  std::string seen, comm;
  StartNamedThread("sluice-test", [&] {
    seen = CurrentThreadName();
    comm = CommOfThisThread();
  }).join();
  EXPECT_EQ(seen, "sluice-test");
  EXPECT_EQ(comm, "sluice-test");
}

TEST(ThreadName, ALongNameKeepsItsFirstFifteenBytes) {
  std::thread([] {
    SetCurrentThreadName("sluice-a-very-long-thread-name");
    EXPECT_EQ(CurrentThreadName(), "sluice-a-very-l");
    EXPECT_EQ(CommOfThisThread(), "sluice-a-very-l");
  }).join();
}

TEST(ThreadName, ThreadNamesOfCountsTheThreadsOfAProcessByName) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int started = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.push_back(StartNamedThread("sluice-count", [&] {
      std::unique_lock lock(mu);
      ++started;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    }));
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return started == 3; });
  }
  EXPECT_EQ(ThreadNamesOf()["sluice-count"], 3);
  EXPECT_EQ(ThreadNamesOf(getpid())["sluice-count"], 3);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  EXPECT_EQ(ThreadNamesOf()["sluice-count"], 0);
  EXPECT_TRUE(ThreadNamesOf(-1).empty()) << "no such process";
}

}  // namespace
}  // namespace sluice
