#include "core/thread_name.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

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

}  // namespace
}  // namespace sluice
