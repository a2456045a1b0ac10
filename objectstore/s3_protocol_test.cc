// The S3 store's parts that need no server: SigV4's encoding, the XML
// replies, and the checks of OpenObjectStore's s3 options.
#include "objectstore/s3_protocol.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "objectstore/object_store.h"

namespace sluice::objectstore {
namespace {

TEST(S3Protocol, UriEncodeKeepsOnlyUnreservedBytes) {
  EXPECT_EQ(s3::UriEncode("segments/orders/p003/1-2.seg", true), "segments/orders/p003/1-2.seg");
  EXPECT_EQ(s3::UriEncode("a b+c%d", true), "a%20b%2Bc%25d");
  EXPECT_EQ(s3::UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(s3::UriEncode("~_-.", false), "~_-.");
  EXPECT_EQ(s3::UriEncode("\xc3\xa9\xff", true), "%C3%A9%FF");
  EXPECT_EQ(s3::UriEncode("q?a=1&b#", true), "q%3Fa%3D1%26b%23");
  EXPECT_EQ(s3::UriEncode(std::string("\0*", 2), true), "%00%2A");
}

TEST(S3Protocol, CanonicalQuerySortsByNameAfterEncoding) {
  EXPECT_EQ(s3::CanonicalQuery({{"prefix", "a b/c"},
                                {"list-type", "2"},
                                {"max-keys", "1000"},
                                {"encoding-type", "url"},
                                {"continuation-token", "x+y=="}}),
            "continuation-token=x%2By%3D%3D&encoding-type=url&list-type=2&max-keys=1000&prefix=a%20b%2Fc");
  EXPECT_EQ(s3::CanonicalQuery({}), "");
}

TEST(S3Protocol, ParsesAListObjectsV2PageWithUrlEncodedKeys) {
  const std::string xml = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name><Prefix>p%2F</Prefix><KeyCount>3</KeyCount><MaxKeys>3</MaxKeys>
  <EncodingType>url</EncodingType>
  <IsTruncated>true</IsTruncated>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
  <Contents><Key>p/with+space%2Bplus</Key><LastModified>2026-11-21T12:00:00.000Z</LastModified>
    <ETag>&quot;abc&quot;</ETag><Size>20971520</Size><StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Key>p/%C3%A9t%C3%A9</Key><Size>0</Size></Contents>
  <Contents><Key>p/amp&amp;%25</Key><Size>5</Size></Contents>
</ListBucketResult>)";
  auto page = s3::ParseListObjectsV2(xml);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 3u);
  EXPECT_EQ(page->objects[0].key, "p/with space+plus");
  EXPECT_EQ(page->objects[0].size, 20971520u);
  EXPECT_EQ(page->objects[1].key, "p/\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(page->objects[1].size, 0u);
  EXPECT_EQ(page->objects[2].key, "p/amp&%");
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST(S3Protocol, KeysAreTakenAsTheyAreWithoutEncodingType) {
  auto page = s3::ParseListObjectsV2(
      "<ListBucketResult><IsTruncated>false</IsTruncated>"
      "<Contents><Key>a+b%20c</Key><Size>1</Size></Contents></ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].key, "a+b%20c");
  EXPECT_FALSE(page->truncated);
}

TEST(S3Protocol, RefusesWhatIsNotAListing) {
  EXPECT_EQ(s3::ParseListObjectsV2("").status().code(), StatusCode::kInternal);
  EXPECT_EQ(s3::ParseListObjectsV2("<html><body>proxy error</body>").status().code(), StatusCode::kInternal);
  EXPECT_EQ(s3::ParseListObjectsV2("<Error><Code>x</Code></Error>").status().code(), StatusCode::kInternal);
  EXPECT_EQ(s3::ParseListObjectsV2("<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents>"
                                   "</ListBucketResult>")
                .status()
                .code(),
            StatusCode::kInternal);
  // A billion laughs is refused by expat, not expanded.
  std::string bomb = "<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\">";
  std::string prev = "a";
  for (int i = 0; i < 10; ++i) {
    std::string name = "e" + std::to_string(i);
    bomb += "<!ENTITY " + name + " \"";
    for (int j = 0; j < 10; ++j) bomb += "&" + prev + ";";
    bomb += "\">";
    prev = name;
  }
  bomb += "]><ListBucketResult><Contents><Key>&" + prev + ";</Key></Contents></ListBucketResult>";
  EXPECT_EQ(s3::ParseListObjectsV2(bomb).status().code(), StatusCode::kInternal);
}

TEST(S3Protocol, ParsesErrorReplies) {
  auto e = s3::ParseErrorReply(
      R"(<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match</Message>
<Resource>/bucket/key</Resource><RequestId>1</RequestId></Error>)");
  EXPECT_EQ(e.code, "SignatureDoesNotMatch");
  EXPECT_EQ(e.message, "The request signature we calculated does not match");
  e = s3::ParseErrorReply("");
  EXPECT_TRUE(e.code.empty());
  e = s3::ParseErrorReply("<html>502 Bad Gateway</html>");
  EXPECT_TRUE(e.code.empty());
  EXPECT_TRUE(e.message.empty());
}

ObjectStoreOptions S3Options(const std::string& url) {
  ObjectStoreOptions o;
  o.url = url;
  o.endpoint = "http://127.0.0.1:18333";
  o.access_key = "AKIDEXAMPLEACCESS";
  o.secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  return o;
}

TEST(S3Options, AreCheckedWithoutTheNetwork) {
  auto ok = OpenObjectStore(S3Options("s3://my-bucket/archive/sluice/"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)->Describe(), "s3://my-bucket/archive/sluice");
  EXPECT_EQ((*OpenObjectStore(S3Options("s3://my-bucket")))->Describe(), "s3://my-bucket");

  struct Case {
    ObjectStoreOptions options;
    std::string says;
  };
  std::vector<Case> cases;
  cases.push_back({S3Options("s3://"), "bucket name"});
  cases.push_back({S3Options("s3://Upper"), "bucket name"});
  cases.push_back({S3Options("s3://ab"), "bucket name"});
  cases.push_back({S3Options("s3://bucket_x"), "bucket name"});
  cases.push_back({S3Options("s3://-bucket"), "bucket name"});
  cases.push_back({S3Options("s3://bucket/a/../b"), "prefix"});
  cases.push_back({S3Options("s3://bucket//a"), "prefix"});
  cases.push_back({S3Options("s3://AKIDEXAMPLEACCESS:pw@bucket"), "credentials"});
  Case c{S3Options("s3://bucket"), "endpoint"};
  c.options.endpoint = "127.0.0.1:18333";
  cases.push_back(c);
  c.options.endpoint = "ftp://127.0.0.1";
  cases.push_back(c);
  c.options.endpoint = "http://127.0.0.1:18333/path";
  cases.push_back(c);
  c.options.endpoint = "http://AKIDEXAMPLEACCESS:wJalrXUtnFEMI@127.0.0.1:18333";
  c.says = "credentials";
  cases.push_back(c);
  c = {S3Options("s3://bucket"), "access_key and secret_key"};
  c.options.secret_key.clear();
  cases.push_back(c);
  c = {S3Options("s3://bucket"), "access_key and secret_key"};
  c.options.access_key.clear();
  cases.push_back(c);
  c = {S3Options("s3://bucket"), "region"};
  c.options.region = "US East";
  cases.push_back(c);
  c = {S3Options("s3://bucket"), "timeout_ms"};
  c.options.timeout_ms = 0;
  cases.push_back(c);
  c = {S3Options("s3://bucket"), "tls_ca"};
  c.options.tls_ca = "/nonexistent/ca.pem";
  cases.push_back(c);
  for (const Case& k : cases) {
    auto store = OpenObjectStore(k.options);
    SCOPED_TRACE(k.options.url + " endpoint " + k.options.endpoint);
    ASSERT_EQ(store.status().code(), StatusCode::kInvalidArgument);
    const std::string m = store.status().message();
    EXPECT_NE(m.find(k.says), std::string::npos) << m;
    EXPECT_EQ(m.find("AKIDEXAMPLEACCESS"), std::string::npos) << m;
    EXPECT_EQ(m.find("wJalrXUtnFEMI"), std::string::npos) << m;
  }
}

TEST(S3Options, TheDefaultEndpointIsAwsInTheRegion) {
  ObjectStoreOptions o = S3Options("s3://bucket");
  o.endpoint.clear();
  o.region = "eu-west-1";
  auto store = OpenObjectStore(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->Describe(), "s3://bucket");
}

}  // namespace
}  // namespace sluice::objectstore
