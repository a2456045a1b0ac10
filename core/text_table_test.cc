#include "core/text_table.h"

#include <sstream>

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(TextTable, ColumnsAreAsWideAsTheirWidestCell) {
  TextTable t({"SINK", "TYPE", "PART"});
  t.AddRow({"cache", "redis", "0"});
  t.AddRow({"search", "elasticsearch", "1"});
  t.AddNote("  search last error: refused");
  t.AddRow({"a-much-longer-sink-name", "kafka", "12"});
  std::ostringstream out;
  t.Print(out);
  EXPECT_EQ(out.str(),
            "SINK                     TYPE           PART\n"
            "cache                    redis          0\n"
            "search                   elasticsearch  1\n"
            "  search last error: refused\n"
            "a-much-longer-sink-name  kafka          12\n");
}

TEST(TextTable, MissingCellsAreEmptyAndNoLineEndsInSpaces) {
  TextTable t({"ID", "ERROR"});
  t.AddRow({"1"});
  t.AddRow({"22", "too long"});
  std::ostringstream out;
  t.Print(out);
  EXPECT_EQ(out.str(), "ID  ERROR\n1\n22  too long\n");
}

}  // namespace
}  // namespace sluice
