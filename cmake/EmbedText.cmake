# Script mode (cmake -P): writes OUTPUT, a C++ source that defines
# `extern const std::string_view NAMESPACE::SYMBOL` holding the bytes of INPUT.
# Called by sluice_embed_text (SluiceModule.cmake) at build time, so the
# generated source is rewritten whenever INPUT changes.
file(READ "${INPUT}" text)
string(FIND "${text}" ")embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains )embed\", which would end the raw string literal")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by cmake/EmbedText.cmake; edit that file instead.\n"
  "#include <string_view>\n\n"
  "namespace ${NAMESPACE} {\n"
  "extern const std::string_view ${SYMBOL};\n"
  "const std::string_view ${SYMBOL} = R\"embed(${text})embed\";\n"
  "}  // namespace ${NAMESPACE}\n")
# Only a changed text touches OUTPUT, so an unchanged file recompiles nothing.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
