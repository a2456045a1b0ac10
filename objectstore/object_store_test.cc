#include "objectstore/object_store_test.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace sluice::objectstore {

void ObjectStoreContractTest::SetUp() {
  made_ = GetParam().make();
  if (made_.store == nullptr) GTEST_SKIP() << GetParam().name << " is not available";
  store_ = made_.store.get();
}

void ObjectStoreContractTest::TearDown() {
  // Leave the bucket (or directory) as we found it.
  if (store_ == nullptr) return;
  auto all = store_->List("");
  if (!all.ok()) return;
  for (const ObjectInfo& o : *all) store_->Delete(o.key).IgnoreError();
}

namespace {

std::vector<std::string> Keys(const std::vector<ObjectInfo>& objects) {
  std::vector<std::string> keys;
  for (const ObjectInfo& o : objects) keys.push_back(o.key);
  return keys;
}

std::string Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

TEST_P(ObjectStoreContractTest, PutGetListDeleteRoundTrip) {
  const std::string key = "segments/orders/p003/00000000000000000001-00000000000000001000.seg";
  ASSERT_TRUE(store_->Put(key, "hello").ok());
  auto got = store_->Get(key);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "hello");
  auto listed = store_->List("");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, key);
  EXPECT_EQ((*listed)[0].size, 5u);
  ASSERT_TRUE(store_->Delete(key).ok());
  EXPECT_EQ(store_->Get(key).status().code(), StatusCode::kNotFound);
  listed = store_->List("");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(listed->empty());
  EXPECT_TRUE(CheckObjectStore(*store_).ok());
}

TEST_P(ObjectStoreContractTest, KeepsEveryByteValue) {
  std::string bytes;
  for (int round = 0; round < 3; ++round) {
    for (int b = 0; b < 256; ++b) bytes += static_cast<char>(b);
  }
  bytes += std::string(5, '\0') + "\xff\xff";
  ASSERT_TRUE(store_->Put("binary/all-bytes", bytes).ok());
  auto got = store_->Get("binary/all-bytes");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->size(), bytes.size());
  EXPECT_TRUE(*got == bytes);
}

TEST_P(ObjectStoreContractTest, EmptyObject) {
  ASSERT_TRUE(store_->Put("empty", "").ok());
  auto got = store_->Get("empty");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->empty());
  auto listed = store_->List("");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].size, 0u);
}

TEST_P(ObjectStoreContractTest, TwentyMegabyteObject) {
  const std::string big = Bytes(20 << 20, 7);
  Status put = store_->Put("big/segment.seg", big);
  ASSERT_TRUE(put.ok()) << put.ToString();
  auto got = store_->Get("big/segment.seg");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->size(), big.size());
  EXPECT_TRUE(*got == big);
  auto listed = store_->List("big/");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].size, uint64_t{20} << 20);
}

TEST_P(ObjectStoreContractTest, KeysWithSpacesPlusPercentAndUnicode) {
  const std::vector<std::string> keys = {
      "odd/with space.seg",     "odd/plus+sign.seg",          "odd/percent%20not-a-space",
      "odd/100%.seg",           "odd/\xc3\xa9t\xc3\xa9/\xe2\x82\xac.seg",  // été/€
      "odd/\xf0\x9f\x90\x9f",   "odd/q?a=1&b=2#frag",         "odd/tilde~star*(paren)!$',;:@=",
      "odd/-_.~unreserved",     "odd/tab\there",
  };
  for (const std::string& key : keys) {
    Status put = store_->Put(key, "v:" + key);
    ASSERT_TRUE(put.ok()) << key << ": " << put.ToString();
  }
  for (const std::string& key : keys) {
    auto got = store_->Get(key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
    EXPECT_EQ(*got, "v:" + key);
  }
  auto listed = store_->List("odd/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  std::vector<std::string> want = keys;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Keys(*listed), want);
  // A prefix with the odd characters in it.
  listed = store_->List("odd/with sp");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(Keys(*listed), std::vector<std::string>{"odd/with space.seg"});
  listed = store_->List("odd/plus+");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(Keys(*listed), std::vector<std::string>{"odd/plus+sign.seg"});
  for (const std::string& key : keys) ASSERT_TRUE(store_->Delete(key).ok()) << key;
  listed = store_->List("odd/");
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
}

// More keys than one ListObjectsV2 page (1,000), written by several threads
// at once (the store is called from several threads).
TEST_P(ObjectStoreContractTest, ListsMoreThanOnePageSorted) {
  constexpr int kKeys = 1100;
  constexpr int kThreads = 4;
  std::vector<std::string> want;
  std::map<std::string, uint64_t> sizes;
  for (int i = 0; i < kKeys; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "many/p%d/%05d.seg", i % 3, (i * 7919) % kKeys);
    want.push_back(name);
    sizes[name] = static_cast<uint64_t>(i % 17);
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kKeys; i += kThreads) {
        if (!store_->Put(want[i], std::string(sizes.at(want[i]), 'x')).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  ASSERT_TRUE(store_->Put("manz", "after").ok());
  ASSERT_TRUE(store_->Put("man", "before").ok());
  std::sort(want.begin(), want.end());
  auto listed = store_->List("many/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), want.size());
  EXPECT_EQ(Keys(*listed), want);
  for (const ObjectInfo& o : *listed) EXPECT_EQ(o.size, sizes.at(o.key)) << o.key;
  auto all = store_->List("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), want.size() + 2);
  EXPECT_TRUE(std::is_sorted(all->begin(), all->end(),
                             [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; }));
  auto one_dir = store_->List("many/p1/");
  ASSERT_TRUE(one_dir.ok());
  EXPECT_EQ(one_dir->size(), static_cast<size_t>((kKeys + 1) / 3));
}

TEST_P(ObjectStoreContractTest, ListMatchesPrefixesNotDirectories) {
  for (const char* key : {"a/b/c", "a/bc", "ab", "b", "a/b/d/e"}) ASSERT_TRUE(store_->Put(key, key).ok()) << key;
  auto keys = [&](const std::string& prefix) {
    auto listed = store_->List(prefix);
    EXPECT_TRUE(listed.ok()) << prefix << ": " << listed.status().ToString();
    return listed.ok() ? Keys(*listed) : std::vector<std::string>{};
  };
  EXPECT_EQ(keys(""), (std::vector<std::string>{"a/b/c", "a/b/d/e", "a/bc", "ab", "b"}));
  EXPECT_EQ(keys("a"), (std::vector<std::string>{"a/b/c", "a/b/d/e", "a/bc", "ab"}));
  EXPECT_EQ(keys("a/"), (std::vector<std::string>{"a/b/c", "a/b/d/e", "a/bc"}));
  EXPECT_EQ(keys("a/b"), (std::vector<std::string>{"a/b/c", "a/b/d/e", "a/bc"}));
  EXPECT_EQ(keys("a/b/"), (std::vector<std::string>{"a/b/c", "a/b/d/e"}));
  EXPECT_EQ(keys("a/b/c"), (std::vector<std::string>{"a/b/c"}));
  EXPECT_EQ(keys("zzz"), std::vector<std::string>{});
  EXPECT_EQ(keys("nothing/here/"), std::vector<std::string>{});
}

TEST_P(ObjectStoreContractTest, MissingKeyIsNotFoundAndDeletingItIsOk) {
  auto got = store_->Get("no/such/key.seg");
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << got.status().ToString();
  EXPECT_TRUE(store_->Delete("no/such/key.seg").ok());
  ASSERT_TRUE(store_->Put("no/such/key.seg", "x").ok());
  EXPECT_TRUE(store_->Delete("no/such/key.seg").ok());
  EXPECT_TRUE(store_->Delete("no/such/key.seg").ok());
  EXPECT_EQ(store_->Get("no/such/key.seg").status().code(), StatusCode::kNotFound);
  // A "directory" that holds objects is not an object itself.
  ASSERT_TRUE(store_->Put("dir/inner", "x").ok());
  EXPECT_EQ(store_->Get("dir").status().code(), StatusCode::kNotFound);
}

TEST_P(ObjectStoreContractTest, OverwriteReplacesTheWholeObject) {
  ASSERT_TRUE(store_->Put("seg", std::string(1000, 'a')).ok());
  ASSERT_TRUE(store_->Put("seg", "short").ok());
  auto got = store_->Get("seg");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "short");
  ASSERT_TRUE(store_->Put("seg", std::string(3000, 'b')).ok());
  got = store_->Get("seg");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, std::string(3000, 'b'));
  auto listed = store_->List("");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].size, 3000u);
}

// Readers racing an overwriting writer see one version or the other, whole.
TEST_P(ObjectStoreContractTest, ReadersNeverSeeAPartialObject) {
  const std::string a(1 << 20, 'a');
  const std::string b(2 << 20, 'b');
  ASSERT_TRUE(store_->Put("racy", a).ok());
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::atomic<int> reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!done) {
        auto got = store_->Get("racy");
        if (!got.ok()) {
          ++torn;
          continue;
        }
        ++reads;
        if (*got != a && *got != b) ++torn;
      }
    });
  }
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store_->Put("racy", i % 2 == 0 ? b : a).ok());
  done = true;
  for (auto& th : readers) th.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(reads.load(), 0);
}

TEST_P(ObjectStoreContractTest, BadKeysAreRefusedByEveryCall) {
  const std::vector<std::string> bad = {"",     "/abs",   "a/../b", "..",          "a//b",
                                        "a\\b", "a/",     "./a",    "a/./b",       std::string("a\0b", 3),
                                        "x/.sluice-tmp-1"};
  for (const std::string& key : bad) {
    SCOPED_TRACE("key \"" + key + "\"");
    EXPECT_EQ(store_->Put(key, "x").code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Get(key).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Delete(key).code(), StatusCode::kInvalidArgument);
  }
  for (const std::string& prefix : {std::string("/abs"), std::string("a/../"), std::string("a\\"),
                                    std::string("a//")}) {
    EXPECT_EQ(store_->List(prefix).status().code(), StatusCode::kInvalidArgument) << prefix;
  }
  auto listed = store_->List("");
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
}

}  // namespace
}  // namespace sluice::objectstore
