// The librdkafka the binaries load is the one they were compiled against
// (CMake takes the library from beside the header it found; the binaries
// find it by their RUNPATH), and under CI, where scripts/bootstrap built
// it, one without 2.0.2's main loop that spins (about 2 ms of CPU per Kafka
// transaction, fixed in 2.4.0).
#include <librdkafka/rdkafka.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

TEST(Librdkafka, TheLoadedLibraryIsTheOneCompiledAgainst) {
  EXPECT_EQ(rd_kafka_version() >> 8, RD_KAFKA_VERSION >> 8)
      << "loaded " << rd_kafka_version_str() << ", compiled against 0x" << std::hex << RD_KAFKA_VERSION;
}

TEST(Librdkafka, UnderCiItIsNotTheOneWhoseMainLoopSpins) {
  const char* ci = std::getenv("CI");
  if (ci == nullptr || std::string(ci) != "true") GTEST_SKIP() << "not CI: the system's librdkafka is allowed";
  EXPECT_GE(rd_kafka_version(), 0x020400ff) << "loaded " << rd_kafka_version_str()
                                            << "; scripts/bootstrap builds 2.8.0 into .local/librdkafka/";
}

}  // namespace
