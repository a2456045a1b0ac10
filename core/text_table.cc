#include "core/text_table.h"

#include <algorithm>

namespace sluice {

TextTable::TextTable(std::vector<std::string> header) : header_(std::move(header)) {}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(header_.size());
  lines_.push_back({std::move(cells), ""});
}

void TextTable::AddNote(std::string line) { lines_.push_back({{}, std::move(line)}); }

void TextTable::Print(std::ostream& out) const {
  std::vector<size_t> width(header_.size());
  const auto measure = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) width[i] = std::max(width[i], cells[i].size());
  };
  measure(header_);
  for (const Line& l : lines_) measure(l.cells);
  const auto print = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      line += cells[i];
      if (i + 1 < cells.size()) line.append(width[i] - cells[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  print(header_);
  for (const Line& l : lines_) {
    if (l.cells.empty()) {
      out << l.note << "\n";
    } else {
      print(l.cells);
    }
  }
}

}  // namespace sluice
