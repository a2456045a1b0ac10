// A plain-text table for operator output (`sluice status`, `sluice
// deadletters list`): each column as wide as its widest cell, so that long
// names (an "elasticsearch" type, a 64-character sink name) never push the
// columns after them out of line. A value object; use from one thread.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace sluice {

class TextTable {
 public:
  // The header row; it fixes the number of columns.
  explicit TextTable(std::vector<std::string> header);

  // A row of cells (missing cells are empty; extra cells are an error the
  // caller must not make).
  void AddRow(std::vector<std::string> cells);
  // A line printed as it is after the rows added so far (a sink's last error).
  void AddNote(std::string line);

  // Every row with its cells padded to the column width plus two spaces; the
  // last column is not padded, and no line ends in spaces.
  void Print(std::ostream& out) const;

 private:
  struct Line {
    std::vector<std::string> cells;  // empty for a note
    std::string note;
  };
  std::vector<std::string> header_;
  std::vector<Line> lines_;
};

}  // namespace sluice
