// Internal to handlers/: JavaScript values and errors to and from the C++
// side (JSON text, UTF-8 strings, thrown values as messages), and running a
// piece of source, for js_runtime.cc. Every function works in the calling
// thread's context and the realm it has entered.
#pragma once

#include <js/RootingAPI.h>
#include <js/TypeDecls.h>
#include <js/Value.h>

#include <optional>
#include <string>
#include <string_view>

namespace sluice::handlers {

// JSON.stringify(v) as UTF-8; "" when JSON.stringify gives undefined.
bool Stringify(JSContext* cx, JS::MutableHandleValue v, std::string* out);
// A JavaScript string of UTF-8 text; ASCII is copied as it is, without decoding.
JSString* NewString(JSContext* cx, std::string_view text);
// JSON.parse(text).
bool ParseText(JSContext* cx, std::string_view text, JS::MutableHandleValue v);
std::string ToUtf8(JSContext* cx, JS::HandleString s);
// The message of a thrown value: an Error as "message" (plain Error) or
// "Name: message"; anything else as String(value).
std::string ThrownMessage(JSContext* cx, JS::HandleValue v, bool name_plain_error = false);
// The line an Error object was made at, or 0.
unsigned ErrorLine(JSContext* cx, JS::HandleValue v);
// Takes the pending exception (none: the call was terminated).
bool TakeException(JSContext* cx, JS::MutableHandleValue v);
// "file:LINE: Name: message" (LINE when the error knows it).
std::string LocatedMessage(JSContext* cx, JS::HandleValue v, const std::string& file);
// Compiles and runs `source` as `file`.
bool Evaluate(JSContext* cx, const char* file, std::string_view source);
// Runs the jobs promises queued, so that an async function finishes within
// its call; then a returned promise stands for its result.
bool SettleValue(JSContext* cx, JS::MutableHandleValue v);
// The length in UTF-16 units of the JavaScript string of `text`; nullopt
// when it is not well-formed UTF-8 (which JS_NewStringCopyUTF8N refuses).
std::optional<size_t> Utf16Length(std::string_view text);

}  // namespace sluice::handlers
