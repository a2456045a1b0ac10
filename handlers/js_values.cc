#include "handlers/js_values.h"

#include <js/CompilationAndEvaluation.h>
#include <js/Conversions.h>
#include <js/ErrorReport.h>
#include <js/Exception.h>
#include <js/JSON.h>
#include <js/Promise.h>
#include <js/PropertyAndElement.h>
#include <js/SourceText.h>
#include <js/String.h>
#include <jsapi.h>
#include <jsfriendapi.h>

#include <optional>

namespace sluice::handlers {
namespace {

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// JS_Stringify's output, UTF-16 in pieces, as UTF-8. JSON.stringify escapes
// lone surrogates, so a high surrogate is only ever followed by a low one,
// possibly in the next piece.
struct Utf8Sink {
  std::string text;
  char16_t high = 0;

  static bool Append(const char16_t* buf, uint32_t len, void* data) {
    auto* sink = static_cast<Utf8Sink*>(data);
    for (uint32_t i = 0; i < len; ++i) {
      const char16_t c = buf[i];
      if (sink->high != 0) {
        const char16_t h = sink->high;
        sink->high = 0;
        if (c >= 0xDC00 && c < 0xE000) {
          AppendUtf8(0x10000 + ((char32_t{h} - 0xD800) << 10) + (c - 0xDC00), &sink->text);
          continue;
        }
        AppendUtf8(0xFFFD, &sink->text);
      }
      if (c >= 0xD800 && c < 0xDC00) {
        sink->high = c;
      } else if (c >= 0xDC00 && c < 0xE000) {
        AppendUtf8(0xFFFD, &sink->text);
      } else if (c < 0x80) {
        sink->text.push_back(static_cast<char>(c));
      } else {
        AppendUtf8(c, &sink->text);
      }
    }
    return true;
  }
};

}  // namespace

// JSON.stringify(v) as UTF-8; "" when JSON.stringify gives undefined.
bool Stringify(JSContext* cx, JS::MutableHandleValue v, std::string* out) {
  Utf8Sink sink;
  if (!JS_Stringify(cx, v, nullptr, JS::NullHandleValue, &Utf8Sink::Append, &sink)) return false;
  if (sink.high != 0) AppendUtf8(0xFFFD, &sink.text);
  *out = std::move(sink.text);
  return true;
}

// A JavaScript string of UTF-8 text; ASCII (most JSON sluice passes) is
// copied as it is, without decoding.
JSString* NewString(JSContext* cx, std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return JS_NewStringCopyUTF8N(cx, JS::UTF8Chars(text.data(), text.size()));
  }
  return JS_NewStringCopyN(cx, text.data(), text.size());
}

// JSON.parse(text).
bool ParseText(JSContext* cx, std::string_view text, JS::MutableHandleValue v) {
  JS::RootedString s(cx, NewString(cx, text));
  return s != nullptr && JS_ParseJSON(cx, s, v);
}

std::string ToUtf8(JSContext* cx, JS::HandleString s) {
  JS::UniqueChars chars = JS_EncodeStringToUTF8(cx, s);
  return chars ? std::string(chars.get()) : std::string();
}

static bool IsErrorObject(JSContext* cx, JS::HandleValue v) {
  if (!v.isObject()) return false;
  JS::RootedObject obj(cx, &v.toObject());
  return JS_ErrorFromException(cx, obj) != nullptr;
}

static std::string StringProperty(JSContext* cx, JS::HandleObject obj, const char* name, const char* fallback) {
  JS::RootedValue v(cx);
  if (!JS_GetProperty(cx, obj, name, &v) || !v.isString()) {
    JS_ClearPendingException(cx);
    return fallback;
  }
  JS::RootedString s(cx, v.toString());
  return ToUtf8(cx, s);
}

// The message of a thrown value: an Error as "message" (plain Error) or
// "Name: message"; anything else as String(value).
std::string ThrownMessage(JSContext* cx, JS::HandleValue v, bool name_plain_error) {
  if (IsErrorObject(cx, v)) {
    JS::RootedObject obj(cx, &v.toObject());
    const std::string name = StringProperty(cx, obj, "name", "Error");
    const std::string message = StringProperty(cx, obj, "message", "");
    if (name == "Error" && !name_plain_error) return message;
    return name + ": " + message;
  }
  JS::RootedString s(cx, JS::ToString(cx, v));
  if (s == nullptr) {
    JS_ClearPendingException(cx);
    return "(a thrown value that cannot be turned into a string)";
  }
  return ToUtf8(cx, s);
}

// The line an Error object was made at, or 0.
unsigned ErrorLine(JSContext* cx, JS::HandleValue v) {
  if (!v.isObject()) return 0;
  JS::RootedObject obj(cx, &v.toObject());
  const JSErrorReport* report = JS_ErrorFromException(cx, obj);
  return report != nullptr ? report->lineno : 0;
}

// Takes the pending exception (none: the call was terminated).
bool TakeException(JSContext* cx, JS::MutableHandleValue v) {
  if (!JS_IsExceptionPending(cx)) return false;
  if (!JS_GetPendingException(cx, v)) v.setUndefined();
  JS_ClearPendingException(cx);
  return true;
}

// "file:LINE: Name: message" (LINE when the error knows it).
std::string LocatedMessage(JSContext* cx, JS::HandleValue v, const std::string& file) {
  const unsigned line = ErrorLine(cx, v);
  std::string where = line > 0 ? file + ":" + std::to_string(line) + ": " : std::string();
  return where + ThrownMessage(cx, v, /*name_plain_error=*/true);
}

bool Evaluate(JSContext* cx, const char* file, std::string_view source) {
  JS::CompileOptions options(cx);
  options.setFileAndLine(file, 1);
  JS::SourceText<mozilla::Utf8Unit> text;
  JS::RootedValue ignored(cx);
  return text.init(cx, source.data(), source.size(), JS::SourceOwnership::Borrowed) &&
         JS::Evaluate(cx, options, text, &ignored);
}

// Runs the jobs promises queued, so that an async function finishes within
// its call; then a returned promise stands for its result.
bool SettleValue(JSContext* cx, JS::MutableHandleValue v) {
  js::RunJobs(cx);
  if (JS_IsExceptionPending(cx)) return false;
  if (!v.isObject()) return true;
  JS::RootedObject obj(cx, &v.toObject());
  if (!JS::IsPromiseObject(obj)) return true;
  switch (JS::GetPromiseState(obj)) {
    case JS::PromiseState::Fulfilled: v.set(JS::GetPromiseResult(obj)); return true;
    case JS::PromiseState::Rejected: {
      JS::RootedValue reason(cx, JS::GetPromiseResult(obj));
      JS::SetSettledPromiseIsHandled(cx, obj);
      JS_SetPendingException(cx, reason);
      return false;
    }
    case JS::PromiseState::Pending: break;
  }
  JS_ReportErrorASCII(cx, "the returned promise is still pending (nothing outside the call can settle it)");
  return false;
}

// Whether `text` is well-formed UTF-8 (what JS_NewStringCopyUTF8N accepts).
std::optional<size_t> Utf16Length(std::string_view text) {
  size_t units = 0;
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t n = 0;
    char32_t cp = 0;
    if (c < 0x80) {
      ++i;
      ++units;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      cp = c & 0x07;
    } else {
      return std::nullopt;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= text.size()) return std::nullopt;
      const unsigned char d = static_cast<unsigned char>(text[i + k]);
      if ((d & 0xC0) != 0x80) return std::nullopt;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF))) {
      return std::nullopt;
    }
    i += n + 1;
    units += n == 3 ? 2 : 1;  // a surrogate pair beyond the BMP
  }
  return units;
}

}  // namespace sluice::handlers
