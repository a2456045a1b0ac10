#include "config/redact.h"

#include <gtest/gtest.h>

namespace sluice::config {
namespace {

TEST(RedactUrl, KeepsWhereItPointsAndHidesCredentials) {
  EXPECT_EQ(RedactUrl("redis://:s3cret@cache:6379/0"), "redis://:***@cache:6379/0");
  EXPECT_EQ(RedactUrl("https://user:s3cret@es.internal:9200/prefix"), "https://***:***@es.internal:9200/prefix");
  EXPECT_EQ(RedactUrl("http://tok3n@es:9200"), "http://***@es:9200");
  EXPECT_EQ(RedactUrl("http://es:9200/p?token=t0k&pretty"), "http://es:9200/p?token=***&***");
  EXPECT_EQ(RedactUrl("http://es:9200/p#s3cret"), "http://es:9200/p#***");
  EXPECT_EQ(RedactUrl("http://u:p@es:9200/?a=1#f"), "http://***:***@es:9200/?a=***#***");
}

TEST(RedactUrl, APasswordHoldingSeparatorsIsHiddenWhole) {
  // The user info ends at the last '@': a password may hold '@', ':' and '/'.
  EXPECT_EQ(RedactUrl("redis://:p@ss:w/rd@cache:6379/1"), "redis://:***@cache:6379/1");
  EXPECT_EQ(RedactUrl("redis://:a?b#c@cache"), "redis://:***@cache");
}

TEST(RedactUrl, TextWithoutCredentialsIsUnchanged) {
  EXPECT_EQ(RedactUrl("http://127.0.0.1:19200/prefix"), "http://127.0.0.1:19200/prefix");
  EXPECT_EQ(RedactUrl("redis://cache:6379/0"), "redis://cache:6379/0");
  EXPECT_EQ(RedactUrl(""), "");
  // Not a URL at all: still nothing after an '@' or '?' survives.
  EXPECT_EQ(RedactUrl("user:pw@host"), "***:***@host");
}

TEST(IsSecretName, NamesOfSecretsMatchWhateverTheirSpelling) {
  for (const char* name : {"sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
                           "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config", "sasl.jaas.config",
                           "sasl.kerberos.keytab", "api_key", "apiKey", "API-KEY", "access_token", "token",
                           "private_key", "aws_secret_access_key", "credentials", "Authorization", "passphrase"}) {
    EXPECT_TRUE(IsSecretName(name)) << name;
  }
  for (const char* name : {"linger.ms", "compression.type", "sasl.username", "sasl.mechanism", "key", "path",
                           "fsync", "url", "ssl.ca.location", "security.protocol", "partition_key"}) {
    EXPECT_FALSE(IsSecretName(name)) << name;
  }
}

}  // namespace
}  // namespace sluice::config
