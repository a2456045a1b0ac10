# Helpers that keep each module's declaration to a few lines.
#
#   sluice_cc_library(NAME core SRCS a.cc b.cc DEPS nlohmann_json::nlohmann_json)
#   sluice_cc_test(NAME core_test SRCS a_test.cc DEPS sluice_core LABELS unit)
#
# Every library is STATIC, named sluice_<NAME>, and sees the repository root
# as its include root so that code includes "core/status.h" and the like.

function(sluice_cc_library)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  set(target sluice_${A_NAME})
  add_library(${target} STATIC ${A_SRCS})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${target} PUBLIC ${A_DEPS})
endfunction()

# A GoogleTest executable whose cases are registered with CTest one by one
# (at test time, so building never needs a server) and carry LABELS.
function(sluice_cc_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 600)
  endif()
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_options(${A_NAME} PRIVATE ${SLUICE_TEST_COMPILE_OPTIONS})
  gtest_discover_tests(${A_NAME}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT})
endfunction()

# A text file (a Lua script, say) compiled in as a string_view, regenerated
# whenever the file changes; appends the generated source to the list OUT.
#
#   sluice_embed_text(OUT srcs FILE version_check.lua
#                     NAMESPACE sluice::connectors::redis SYMBOL kVersionCheckScript)
#
# Declare the symbol in a header of your own: `extern const std::string_view kVersionCheckScript;`.
function(sluice_embed_text)
  cmake_parse_arguments(A "" "OUT;FILE;NAMESPACE;SYMBOL" "" ${ARGN})
  set(input ${CMAKE_CURRENT_SOURCE_DIR}/${A_FILE})
  get_filename_component(stem ${A_FILE} NAME_WE)
  set(output ${CMAKE_CURRENT_BINARY_DIR}/${stem}_embedded.cc)
  add_custom_command(
    OUTPUT ${output}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${input} -DOUTPUT=${output}
            -DNAMESPACE=${A_NAMESPACE} -DSYMBOL=${A_SYMBOL}
            -P ${PROJECT_SOURCE_DIR}/cmake/EmbedText.cmake
    DEPENDS ${input} ${PROJECT_SOURCE_DIR}/cmake/EmbedText.cmake
    COMMENT "Embedding ${A_FILE}"
    VERBATIM)
  set(${A_OUT} ${${A_OUT}} ${output} PARENT_SCOPE)
endfunction()
