#include "connectors/redis/reply_error.h"

#include <gtest/gtest.h>

namespace sluice::connectors::redis {
namespace {

TEST(ReplyError, Code) {
  EXPECT_EQ(ReplyErrorCode("WRONGTYPE Operation against a key holding the wrong kind of value"), "WRONGTYPE");
  EXPECT_EQ(ReplyErrorCode("NOSCRIPT No matching script. Please use EVAL."), "NOSCRIPT");
  EXPECT_EQ(ReplyErrorCode("ERR Error running script (call to f_0123): @user_script:4: WRONGTYPE Operation"),
            "WRONGTYPE");
  EXPECT_EQ(ReplyErrorCode("ERR unknown command"), "ERR");
  EXPECT_EQ(ReplyErrorCode("OOM"), "OOM");
}

TEST(ReplyError, Classify) {
  EXPECT_EQ(ClassifyReplyError("WRONGTYPE Operation against a key"), ReplyErrorClass::kEvent);
  EXPECT_EQ(ClassifyReplyError("ERR Error running script: @user_script:9: ERR bad"), ReplyErrorClass::kEvent);
  EXPECT_EQ(ClassifyReplyError("NOSCRIPT No matching script"), ReplyErrorClass::kNoScript);
  EXPECT_EQ(ClassifyReplyError("NOAUTH Authentication required."), ReplyErrorClass::kMisconfigured);
  EXPECT_EQ(ClassifyReplyError("WRONGPASS invalid username-password pair"), ReplyErrorClass::kMisconfigured);
  EXPECT_EQ(ClassifyReplyError("NOPERM this user has no permissions"), ReplyErrorClass::kMisconfigured);
  EXPECT_EQ(ClassifyReplyError("MOVED 3999 127.0.0.1:6381"), ReplyErrorClass::kMisconfigured);
  EXPECT_EQ(ClassifyReplyError("OOM command not allowed when used memory > 'maxmemory'."),
            ReplyErrorClass::kUnavailable);
  EXPECT_EQ(ClassifyReplyError("ERR Error running script (call to f_1): @user_script:7: OOM command not allowed"),
            ReplyErrorClass::kUnavailable);
  EXPECT_EQ(ClassifyReplyError("LOADING Redis is loading the dataset in memory"), ReplyErrorClass::kUnavailable);
  EXPECT_EQ(ClassifyReplyError("READONLY You can't write against a read only replica."),
            ReplyErrorClass::kUnavailable);
  EXPECT_EQ(ClassifyReplyError("BUSY Redis is busy running a script."), ReplyErrorClass::kUnavailable);
}

TEST(ReplyError, AdviceSaysWhatToFix) {
  EXPECT_NE(MisconfigurationAdvice("NOAUTH Authentication required.").find("redis://:PASSWORD@"), std::string::npos);
  EXPECT_NE(MisconfigurationAdvice("WRONGPASS invalid").find("password"), std::string::npos);
  EXPECT_NE(MisconfigurationAdvice("MOVED 1 h:1").find("Cluster"), std::string::npos);
}

}  // namespace
}  // namespace sluice::connectors::redis
